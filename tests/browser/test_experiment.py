"""The Experiment page in a real browser (issue 26, item 3): launched with one button from the launch
form of a DSPy program's task, its table fills in as the runs store their evaluations."""

import re

import pytest

from tests.browser.session import log_in, off_playwright_thread
from tests.webapp.runs.factories import make_multihop_task
from webapp.experiments.models import Experiment
from webapp.runs.ingest.store import step_events_ingest

NEUTRAL = ("the Experiment page's launch button and its table filling in, in a real browser; queueing the "
           "arms through the fair queue (all or nothing) and the table's scores from stored evaluations are "
           "tested on both backends in tests/webapp/experiments/test_experiments.py, the compare page in "
           "tests/webapp/runs/charts/test_series_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("test_plugins")]


def store_evals(experiment, scores):
    """What the runs' ingest stores: each run's step-0 and last-step evaluations."""
    def work():
        for member in experiment.members.select_related("run"):
            before, after = scores[(member.kind, member.seed)]
            step_events_ingest(member.run, [
                {"type": "step", "attempt": 1, "step": step, "metrics": {"eval/reward/mean": value},
                 "rollouts": [], "groups": []}
                for step, value in ((0, before), (member.run.total_steps, after))])

    off_playwright_thread(work)


def test_launch_an_experiment_and_read_its_table(page, screenshot, asgi_server, make_user, tmp_path):
    task = make_multihop_task(tmp_path)
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/new?task={task.pk}")
    page.fill("#id_name", "table 1")
    page.fill("#id_steps", "20")
    page.fill("#id_experiment_seeds", "3")
    page.click("#launch-experiment")
    page.wait_for_url(f"{asgi_server}/experiments/*/")
    experiment = Experiment.objects.get()
    assert "Experiment" in page.inner_text(".messages") and page.inner_text("h1") == "table 1"
    assert page.locator("#experiment-table tbody tr").count() == 4
    assert page.inner_text("#experiment-table tr[data-arm='mmgrpo'] td:nth-child(2)") == "queued"

    store_evals(experiment, {("weights", 0): (0.21, 0.38), ("weights", 1): (0.19, 0.41), ("weights", 2): (0.22, 0.36),
                             ("both", 0): (0.30, 0.47), ("both", 1): (0.28, 0.44), ("both", 2): (0.33, 0.49)})
    page.reload()
    row = page.locator("#experiment-table tr[data-arm='bettertogether']")
    assert row.locator("td.mean").inner_text() == "0.467" and row.locator("td.spread").inner_text() == "± 0.025"
    assert page.inner_text("#experiment-table tr[data-arm='unadapted'] td.mean") == "0.207"
    assert row.locator("td.gain").inner_text() == "+0.260"  # from the unadapted program's mean
    assert row.locator("td.iqm").inner_text() == "0.467" and row.locator("td.ci").inner_text().startswith("[0.4")
    screenshot("experiment-page")
    page.click("#compare-link")
    page.wait_for_url(re.compile(r".*/runs/compare\?experiment=.*"))
    assert "table 1" in page.inner_text("#experiment-links")
    # Each kind of run's three seeds: one mean curve and its band.
    page.wait_for_selector("#compare-eval-reward-mean[data-bands='2']")
