"""Alerts in a real browser: a real run whose loss becomes NaN (Celery worker, trainer, ingest)
fires a nonfinite alert that shows in the topbar badge, on the alerts list and on the run page;
a rule added on the run page shows its errors beside the fields."""

import pytest

from tests.browser.session import log_in, off_playwright_thread
from tests.webapp.alerts.test_real_run import NAN_REWARDS
from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config, wait_for_state
from webapp.alerts.models import Alert, AlertRule, Kind
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run
from webapp.runs.services import run_create

NEUTRAL = ("what the alert badge, the alerts list, the run page's alerts panel and its rule form show and do "
           "in a real browser, and an alert pushed to an open page; firing at ingest (one open alert per "
           "rule and run), saving rules (select_for_update), marking seen and the pushed notice are tested "
           "on both backends in tests/webapp/alerts/test_evaluation.py, tests/webapp/alerts/test_views.py "
           "and tests/webapp/runs/live/test_consumers.py, a real worker's training and ingest in "
           "tests/workers/test_run_train.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_a_nan_loss_shows_as_an_alert_in_the_badge_the_list_and_the_run_page(
        page, screenshot, asgi_server, celery_worker_process, make_user, test_plugins):
    alice = make_user("alice", password="a-long-test-password")
    run = run_create(Launch(owner=alice, task=make_task(), config=toy_config(steps=2, rewards=NAN_REWARDS)), name="nan-run")
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    log_in(page, asgi_server, "alice", "a-long-test-password")

    # The badge: one unseen open alert (the default nonfinite rule; in-app only).
    assert page.inner_text("#alert-badge") == "1"

    page.goto(f"{asgi_server}/runs/{run.pk}/")
    row = page.locator("#run-alerts tr.alert-nonfinite")
    assert row.count() == 1
    assert "loss and grad_norm are not finite (NaN or inf) at step 1" in row.inner_text()
    page.locator("#alerts").scroll_into_view_if_needed()
    screenshot("alerts-run-page")

    # A rule for this run: a bad webhook URL comes back beside its field, nothing is saved.
    page.click("#add-alert-rule summary")
    page.select_option("#alert_kind", "finished")
    page.fill("#alert_webhook_url", "ftp://hooks.example.org/x")
    page.click("#add-alert-rule button[type=submit]")
    assert "Enter an http:// or https:// URL." in page.inner_text("#rule-error-webhook_url")
    assert not AlertRule.objects.filter(run=run).exists()
    screenshot("alerts-rule-error")
    page.fill("#id_webhook_url", "https://93.184.216.34/cohort")
    page.click("form.alert-rule-form button[type=submit]")
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/#alerts")
    assert "Alert rule saved" in page.inner_text(".messages")
    assert "93.184.216.34/cohort" in page.inner_text("#run-alert-rules")
    page.click("#add-alert-rule summary")  # the form again, open, beside the saved rule
    page.locator("#alerts").scroll_into_view_if_needed()
    screenshot("alerts-run-rule-saved")

    page.click("#alerts-link")
    page.wait_for_url(f"{asgi_server}/alerts/")
    listed = page.locator("#alert-list tr.alert-nonfinite")
    assert listed.count() == 1 and "nan-run" in listed.inner_text() and "new" in listed.inner_text()
    screenshot("alerts-list")

    page.click("#mark-seen button")
    page.wait_for_url(f"{asgi_server}/alerts/")
    assert page.locator("#alert-badge").count() == 0
    assert Alert.objects.get(run=run, kind=Kind.NONFINITE).seen

    # The defaults page: one row per kind; nonfinite and failed are on until changed.
    page.click("text=Default rules")
    page.wait_for_url(f"{asgi_server}/alerts/rules/")
    assert page.is_checked("#id_nonfinite-enabled") and page.is_checked("#id_failed-enabled")
    assert not page.is_checked("#id_stalled-enabled")
    screenshot("alerts-default-rules")


def test_an_alert_that_fires_while_the_run_page_is_open_shows_at_once(page, screenshot, asgi_server, make_user):
    """Pushed over the run's websocket (issue 25, item 5): the row appears in the alerts panel and
    the topbar badge counts it, with no reload."""
    from tests.webapp.runs.factories import make_run

    alice = make_user("alice", password="a-long-test-password")
    run = make_run(alice, state=Run.State.RUNNING, name="live-alert")
    log_in(page, asgi_server, "alice", "a-long-test-password")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("document.getElementById('live-status').textContent === 'Live.'")
    assert page.locator("#alert-badge").count() == 0 and page.is_visible("#no-alerts")

    nan_step = {"type": "step", "attempt": 1, "step": 2, "metrics": {"loss": None, "grad_norm": 0.5},
                "rollouts": [], "groups": []}
    off_playwright_thread(lambda: step_events_ingest(run, [nan_step]))  # as the worker's ingest
    row = page.wait_for_selector("#run-alerts tr.alert-nonfinite")
    assert "loss is not finite (NaN or inf) at step 2" in row.inner_text() and "open" in row.inner_text()
    assert page.inner_text("#alert-badge") == "1"
    alert = Alert.objects.get(run=run, kind=Kind.NONFINITE)
    assert row.get_attribute("data-alert") == str(alert.pk)
    page.locator("#alerts").scroll_into_view_if_needed()
    screenshot("alerts-live-push")
    page.reload()  # the server-rendered page agrees with what was pushed
    assert page.locator(f"#run-alerts tr[data-alert='{alert.pk}']").count() == 1
    assert page.inner_text("#alert-badge") == "1"
