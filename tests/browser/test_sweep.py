"""The sweep page in a real browser (issue 44, part 3): a finished sweep's parallel coordinates, its
parameter importance (once enough trials completed) and trials table are drawn; "Launch this" opens the launch form filled in with
the sweep's settings and the best trial's values; a sweep notice makes an open page redraw."""

import pytest

from tests.browser.session import log_in, off_playwright_thread
from tests.suites import UI_ONLY
from tests.webapp.sweeps.world import add_trial, make_sweep
from trainer.config import RunConfig
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Task
from webapp.sweeps.importance import MIN_COMPLETE_TRIALS
from webapp.sweeps.messages import sweep_notice_send
from webapp.sweeps.models import Trial

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

ROWS = "document.querySelectorAll('#trials-table tbody tr').length"


def toy_sweep(owner, trials: int = MIN_COMPLETE_TRIALS):
    """A finished-looking sweep of the toy task: `trials` complete trials with distinct values."""
    catalog_sync()
    task = Task.objects.get(name="toy")
    config = RunConfig.from_dict(config_defaults(task)).to_dict()
    sweep = make_sweep(owner, task=task, config=config)
    for number in range(trials):
        add_trial(sweep, number)
    return sweep


def open_sweep(page, base_url, sweep):
    page.goto(f"{base_url}/sweeps/{sweep.pk}/")
    page.wait_for_function("() => document.getElementById('parcoords-chart').data !== undefined")


def test_a_finished_sweep_draws_its_plots_and_launches_its_best_configuration(page, screenshot, asgi_server, make_user):
    alice = make_user("alice", password="a-long-test-password")
    sweep = toy_sweep(alice)
    log_in(page, asgi_server, "alice")
    page.click("#studies-link")
    page.click(f"#studies-table tr[data-kind='sweep'][data-id='{sweep.pk}'] a")
    page.wait_for_url(f"{asgi_server}/sweeps/{sweep.pk}/")
    page.wait_for_function("() => document.getElementById('parcoords-chart').data !== undefined")

    chart = page.evaluate("""() => { const d = document.getElementById('parcoords-chart').data[0];
        return {type: d.type, labels: d.dimensions.map(x => x.label), n: d.dimensions[0].values.length}; }""")
    n = MIN_COMPLETE_TRIALS  # enough complete trials for the importance to be drawn
    assert chart == {"type": "parcoords", "labels": ["estimator", "learning_rate (log)", "lora_r", "reward/mean"], "n": n}
    importance = page.evaluate("() => document.getElementById('importance-chart').data[0].y")
    assert sorted(importance) == ["estimator", "learning_rate", "lora_r"] and importance[-1] == "learning_rate"
    assert page.is_visible("#importance-chart")
    assert f"Optuna's fANOVA (a random forest of 32 trees, seed 0) over {n} complete" in page.inner_text("#importance-note")
    assert page.evaluate("() => document.getElementById('objective-chart').data.length") == 2
    assert page.evaluate(ROWS) == n
    best_trial = Trial.objects.filter(sweep=sweep).order_by("-value").first()
    best = best_trial.params
    assert page.get_attribute("#trials-table tbody tr.best", "data-number") == str(best_trial.number)
    assert page.locator("#trials-table tr[data-number='0'] a.seed-link").count() == 3
    screenshot("sweep-page")

    page.click("#launch-best")
    page.wait_for_url(f"{asgi_server}/runs/new?*")
    page.wait_for_selector("form.launch")
    # Depends on runs:new reading `?config=` (webapp/runs/launch/config_link.py): the best values, over the sweep's settings.
    assert float(page.input_value("#id_learning_rate")) == pytest.approx(best["learning_rate"])
    assert page.input_value("#id_estimator") == best["estimator"]
    assert page.input_value("#id_lora_r") == str(best["lora_r"])


def test_a_sweep_notice_redraws_an_open_page(page, asgi_server, make_user):
    alice = make_user("alice", password="a-long-test-password")
    sweep = toy_sweep(alice, trials=3)
    log_in(page, asgi_server, "alice")
    open_sweep(page, asgi_server, sweep)
    assert page.inner_text("#importance-note").endswith(f"3 so far, {MIN_COMPLETE_TRIALS - 3} more to go.")
    assert page.is_hidden("#importance-chart")
    # Joined the sweep's group, and the catch-up fetch of the (re)connect is done: only a notice redraws now.
    page.wait_for_function("() => window.cohortSweep.socket.readyState === 1 && window.cohortSweep.fetches >= 1 "
                           "&& !window.cohortSweep.inFlight")
    fetches = page.evaluate("() => window.cohortSweep.fetches")
    assert page.evaluate(ROWS) == 3

    def a_trial_completes():
        add_trial(sweep, 3)
        sweep_notice_send(sweep.pk)

    off_playwright_thread(a_trial_completes)
    page.wait_for_function(f"() => {ROWS} === 4")
    assert page.evaluate("() => window.cohortSweep.fetches") == fetches + 1
    assert page.evaluate("() => document.getElementById('parcoords-chart').data[0].dimensions[0].values.length") == 4
    assert "4 of 12 started: 4 complete" in page.inner_text("#sweep-progress")
    assert page.inner_text("#importance-note").endswith(f"4 so far, {MIN_COMPLETE_TRIALS - 4} more to go.")
