"""Alert emails are queued after commit and sent by a Celery task through Django's mail backend
(locmem in the tests that run the task here, files for a real worker): a mail server that cannot be
reached, or that hangs, is the task's problem, recorded on the alert, never the ingest's."""

import socket

import pytest
from django.core import mail

from tests.conftest import free_port
from tests.webapp.runs.factories import make_run
from webapp.alerts.models import Alert, Kind
from webapp.alerts.services import rule_save
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run
from workers.tasks import alert_email_task

NEUTRAL = ("e-mail delivery of a fired alert: queued after commit, sent by the Celery task (here and in a "
           "real worker), failures recorded on the alert by plain UPDATEs, never the ingest's problem; "
           "firing at ingest and once per episode (the one-open-alert constraint) are tested on both "
           "backends in tests/webapp/alerts/test_evaluation.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db]


def send_queued(alert):
    """Runs the email task of `alert` here, as a worker would."""
    return alert_email_task.apply(args=[alert.pk]).get()


def nan_step(run, django_capture_on_commit_callbacks, step=1):
    with django_capture_on_commit_callbacks(execute=True):
        step_events_ingest(run, [{"type": "step", "attempt": 1, "step": step, "metrics": {"loss": float("nan")}}])


def email_rule(user):
    return rule_save(owner=user, kind=Kind.NONFINITE, run=None, params={}, email=True, webhook_url="", enabled=True)


def test_an_alert_is_emailed_to_the_rule_owner_once_per_episode(owner, settings, django_capture_on_commit_callbacks):
    settings.COHORT_BASE_URL = "https://cohort.example.org"
    owner.email = "owner@example.org"
    owner.save()
    email_rule(owner)
    run = make_run(owner, state=Run.State.RUNNING, name="nan-run")
    nan_step(run, django_capture_on_commit_callbacks, step=1)
    nan_step(run, django_capture_on_commit_callbacks, step=2)  # same episode: no second alert
    assert mail.outbox == []  # queued, not sent by the ingest
    assert send_queued(Alert.objects.get()) == "sent"
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["owner@example.org"] and message.from_email == settings.DEFAULT_FROM_EMAIL
    assert "nan-run" in message.subject and "not finite" in message.subject.lower() + message.body.lower()
    assert f"https://cohort.example.org/runs/{run.pk}/" in message.body
    alert = Alert.objects.get()
    assert alert.email_sent_at is not None and alert.email_error == ""


def test_nothing_is_emailed_before_the_alert_is_committed(owner, django_capture_on_commit_callbacks):
    owner.email = "owner@example.org"
    owner.save()
    email_rule(owner)
    run = make_run(owner, state=Run.State.RUNNING)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        step_events_ingest(run, [{"type": "step", "attempt": 1, "step": 1, "metrics": {"loss": None}}])
    # The step's notices and the apps' signal (the alert evaluation among its listeners) wait for the commit.
    assert mail.outbox == [] and len(callbacks) == 2


def test_an_in_app_rule_sends_no_email(owner, django_capture_on_commit_callbacks):
    owner.email = "owner@example.org"
    owner.save()
    nan_step(make_run(owner, state=Run.State.RUNNING), django_capture_on_commit_callbacks)
    assert Alert.objects.count() == 1 and mail.outbox == []


def test_a_user_without_an_address_gets_the_reason_on_the_alert(owner, django_capture_on_commit_callbacks):
    email_rule(owner)
    nan_step(make_run(owner, state=Run.State.RUNNING), django_capture_on_commit_callbacks)
    assert send_queued(Alert.objects.get()) == "no address"
    assert mail.outbox == [] and Alert.objects.get().email_error == "no email address on the account"


def test_an_unreachable_mail_server_is_recorded_and_the_ingest_goes_on(owner, settings,
                                                                       django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", free_port(), 2
    owner.email = "owner@example.org"
    owner.save()
    email_rule(owner)
    run = make_run(owner, state=Run.State.RUNNING)
    nan_step(run, django_capture_on_commit_callbacks)
    assert run.step_metrics.count() == 1 and Alert.objects.get().email_error == ""
    assert send_queued(Alert.objects.get()) == "failed"
    alert = Alert.objects.get()
    assert alert.email_sent_at is None and "ConnectionRefusedError" in alert.email_error


def test_a_hanging_mail_server_is_never_contacted_by_the_ingest(owner, settings, django_capture_on_commit_callbacks):
    """The server accepts and never answers: the ingest that fires the alert does not connect to it
    at all (it only queues the email), so no step waits for EMAIL_TIMEOUT."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.getsockname()[1], 10
        owner.email = "owner@example.org"
        owner.save()
        email_rule(owner)
        run = make_run(owner, state=Run.State.RUNNING)
        nan_step(run, django_capture_on_commit_callbacks)
        assert Alert.objects.count() == 1 and run.step_metrics.count() == 1
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_sends_the_email_the_ingest_queued(owner, tmp_path):
    """The email task runs in a real Celery worker process, whose mail backend writes files
    (django-environ reads filemail:///path as a relative path: one more slash makes it absolute)."""
    from tests.conftest import celery_worker, service_env, wait_for
    from webapp.celery import app

    outbox = tmp_path / "outbox"
    outbox.mkdir()
    owner.email = "owner@example.org"
    owner.save()
    email_rule(owner)
    run = make_run(owner, state=Run.State.RUNNING, name="nan-run")
    app.control.purge()
    with celery_worker(tmp_path / "worker.log", service_env(EMAIL_URL=f"filemail:///{outbox}"), app=app) as worker:
        step_events_ingest(run, [{"type": "step", "attempt": 1, "step": 1, "metrics": {"loss": float("nan")}}])
        alert = Alert.objects.get()
        wait_for(lambda: Alert.objects.get(pk=alert.pk).email_sent_at is not None, 60, "the worker's email",
                 worker.log_path)
    (sent,) = list(outbox.iterdir())
    text = sent.read_text()
    assert "To: owner@example.org" in text and "nan-run" in text
