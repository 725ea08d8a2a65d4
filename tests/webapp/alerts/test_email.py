"""Alert emails go through Django's mail backend after commit (locmem in tests), and a mail
server that cannot be reached is recorded on the alert, never raised into the ingest."""

import pytest
from django.core import mail

from tests.conftest import free_port
from tests.webapp.runs.factories import make_run
from webapp.alerts.models import Alert, Kind
from webapp.alerts.services import rule_save
from webapp.runs.ingest import step_events_ingest
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


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
    nan_step(run, django_capture_on_commit_callbacks, step=2)  # same episode: no second email
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
    assert mail.outbox == [] and len(callbacks) == 1  # the evaluation waits for the commit


def test_an_in_app_rule_sends_no_email(owner, django_capture_on_commit_callbacks):
    owner.email = "owner@example.org"
    owner.save()
    nan_step(make_run(owner, state=Run.State.RUNNING), django_capture_on_commit_callbacks)
    assert Alert.objects.count() == 1 and mail.outbox == []


def test_a_user_without_an_address_gets_the_reason_on_the_alert(owner, django_capture_on_commit_callbacks):
    email_rule(owner)
    nan_step(make_run(owner, state=Run.State.RUNNING), django_capture_on_commit_callbacks)
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
    alert = Alert.objects.get()
    assert alert.email_sent_at is None and "ConnectionRefusedError" in alert.email_error
    assert run.step_metrics.count() == 1
