"""Webhooks: a real Celery worker POSTs the alert to a real HTTP server on 127.0.0.1, retrying
temporary failures (connection errors, timeouts, 5xx) with backoff and never a 4xx."""

import pytest
from django.test import override_settings

from tests.conftest import free_port, wait_for
from tests.webapp.runs.factories import make_run
from webapp.alerts.delivery import alert_webhook_attempt, run_url
from webapp.alerts.models import Alert, AlertRule, Kind
from webapp.alerts.services import rule_save
from webapp.alerts.webhook import WebhookTemporaryError
from webapp.celery import app
from webapp.projects.services import personal_project_ensure
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run
from workers.tasks import alert_webhook_task

NEUTRAL = ("webhook delivery: the POST, retries with backoff on 5xx, timeouts and unreachable servers, no "
           "retry on a 4xx or an inside address, each recorded on the alert by plain UPDATEs; firing at "
           "ingest and saving rules are tested on both backends in tests/webapp/alerts/test_evaluation.py "
           "and tests/webapp/alerts/test_views.py")
WEBHOOK_TASK = "workers.tasks.alert_webhook_task"
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL)]


def webhook_alert(owner, url: str) -> Alert:
    """An open alert whose rule posts to `url`, made without queuing its delivery."""
    rule = AlertRule.objects.create(owner=owner, project=personal_project_ensure(owner), kind=Kind.FAILED, webhook_url=url)
    run = make_run(owner, state=Run.State.FAILED, name="broken-run", current_step=3)
    return Alert.objects.create(rule=rule, run=run, kind=rule.kind, message="broken-run failed at step 3.", step=3,
                                webhook_status=Alert.Webhook.PENDING)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_nan_step_posts_the_alert_and_two_5xx_answers_make_three_attempts(celery_worker_process, owner,
                                                                             webhook_server):
    webhook_server.script = [500, 503, 200]
    run = make_run(owner, state=Run.State.RUNNING, name="nan-run")
    rule_save(owner=owner, kind=Kind.NONFINITE, run=run, params={}, email=False, webhook_url=webhook_server.url,
              enabled=True)
    step_events_ingest(run, [{"type": "step", "attempt": 1, "step": 4, "metrics": {"loss": float("nan")}}])
    alert = Alert.objects.get(run=run)
    log = celery_worker_process.log_path
    wait_for(lambda: Alert.objects.get(pk=alert.pk).webhook_status == Alert.Webhook.DELIVERED, 60,
             "the third attempt to be delivered", log)
    alert.refresh_from_db()
    assert alert.webhook_attempts == 3 and len(webhook_server.requests) == 3
    assert alert.webhook_last_error == "" and alert.webhook_delivered_at is not None
    payload = webhook_server.requests[-1]["json"]
    assert run_url(run.pk).endswith(f"/runs/{run.pk}/")  # COHORT_BASE_URL + the run page (the worker's setting)
    assert payload == {
        "alert": alert.pk, "kind": "nonfinite",
        "run": {"id": run.pk, "name": "nan-run", "url": run_url(run.pk)},
        "message": alert.message, "step": 4, "fired_at": alert.fired_at.isoformat(),
    }
    gaps = [b["at"] - a["at"] for a, b in zip(webhook_server.requests, webhook_server.requests[1:], strict=False)]
    assert all(gap < 10 for gap in gaps)  # backoff 1 s then 2 s (with jitter), not minutes


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_4xx_answer_is_not_retried(celery_worker_process, owner, webhook_server):
    webhook_server.script = [404, 200]
    alert = webhook_alert(owner, webhook_server.url)
    result = app.send_task(WEBHOOK_TASK, args=[alert.pk])
    assert result.get(timeout=60) == Alert.Webhook.FAILED  # the task ended: no retry is scheduled
    alert.refresh_from_db()
    assert alert.webhook_status == Alert.Webhook.FAILED and alert.webhook_attempts == 1
    assert alert.webhook_last_error == "HTTP 404 Not Found" and len(webhook_server.requests) == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_server_slower_than_the_timeout_is_given_up_on_and_tried_again(celery_worker_process, owner,
                                                                         webhook_server):
    # The first answer would come after 30 s; the worker's 5 s timeout gives up on it and retries.
    webhook_server.script = [("sleep", 30, 200), 200]
    alert = webhook_alert(owner, webhook_server.url)
    result = app.send_task(WEBHOOK_TASK, args=[alert.pk])
    assert result.get(timeout=60) == Alert.Webhook.DELIVERED
    alert.refresh_from_db()
    assert alert.webhook_attempts == 2 and alert.webhook_status == Alert.Webhook.DELIVERED
    first, second = webhook_server.requests
    assert 5 <= second["at"] - first["at"] < 20  # 5 s timeout, then a backoff of at most 1 s


@pytest.mark.django_db
def test_one_attempt_reports_a_timeout_within_the_configured_limit(owner, webhook_server):
    webhook_server.script = [("sleep", 10, 200)]
    alert = webhook_alert(owner, webhook_server.url)
    with override_settings(ALERTS_WEBHOOK_TIMEOUT_S=0.5), pytest.raises(WebhookTemporaryError):
        alert_webhook_attempt(alert.pk, last_try=False)
    alert.refresh_from_db()
    assert alert.webhook_status == Alert.Webhook.PENDING and alert.webhook_last_error == "no answer within 0.5 s"


@pytest.mark.django_db
def test_an_address_inside_the_network_is_refused_at_sending_without_retries(owner, settings):
    """A rule saved before the rule (or with a name that has since moved inside) fails for good."""
    settings.COHORT_WEBHOOK_ALLOWED_NETWORKS = []
    alert = webhook_alert(owner, f"http://127.0.0.1:{free_port()}/hook")
    alert_webhook_task.apply(args=[alert.pk])
    alert.refresh_from_db()
    assert alert.webhook_attempts == 1 and alert.webhook_status == Alert.Webhook.FAILED
    assert "inside the network (loopback)" in alert.webhook_last_error


@pytest.mark.django_db
def test_an_unreachable_server_is_retried_five_times_then_marked_failed(owner, settings):
    """The task's own retry policy, run eagerly (Celery runs eager retries at once, no backoff)."""
    settings.COHORT_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # allowed, and nothing listens there
    alert = webhook_alert(owner, f"http://127.0.0.1:{free_port()}/hook")  # nothing listens there
    alert_webhook_task.apply(args=[alert.pk])
    alert.refresh_from_db()
    assert alert.webhook_attempts == 6  # the first try and 5 retries
    assert alert.webhook_status == Alert.Webhook.FAILED and alert.webhook_last_error.startswith("cannot connect")
