"""The run's timeline in a real browser against the real ASGI app (issue 55, item 5): a lane per process,
a bar per span, new steps drawn live from the run's websocket, and a generation bar that opens the
rollouts it produced."""

import pytest

from tests.browser.session import PASSWORD, log_in, off_playwright_thread
from tests.suites import UI_ONLY
from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

STEPS = 30


def timed_step(step):
    """A synchronous step of 10 s: the sampler generates for 6, the trainer trains for 3, the adapter
    travels for 1, as the pipeline metrics beside them say."""
    t = 1_000.0 + 10 * step
    return {"type": "step", "attempt": 1, "step": step,
            "metrics": {"reward/mean": 0.3 + step / 100, "pipeline/trainer_wait_share": 0.6,
                        "pipeline/sampler_wait_share": 0.4, "pipeline/adapter_sync_s": 1.0},
            "spans": [{"lane": "sampler", "name": f"generate the batch for update {step}", "start": t,
                       "end": t + 6, "policy_version": step - 1},
                      {"lane": "trainer", "name": f"update {step}", "start": t + 6, "end": t + 9},
                      {"lane": "adapter", "name": f"save and load adapter v{step}", "start": t + 9, "end": t + 10}]}


def test_the_timeline_draws_each_lane_grows_live_and_a_generation_bar_opens_its_rollouts(
        page, screenshot, asgi_server, make_user):
    alice = make_user("alice", password=PASSWORD)
    run = make_run(alice, state=Run.State.RUNNING, name="timeline")
    ingest(run, (timed_step(s) for s in range(1, STEPS + 1)))
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.getElementById('timeline')?.dataset.lanes === '3'")
    page.locator("#timeline-panel").scroll_into_view_if_needed()
    assert page.evaluate("document.getElementById('timeline').data.map((t) => t.name)") == [
        "sampler", "trainer", "adapter"]
    assert page.evaluate("document.getElementById('timeline').data.map((t) => t.x.length)") == [STEPS] * 3
    assert page.locator("#timeline .barlayer .point path").count() == 3 * STEPS  # every bar drawn
    assert "Steps 1 to 30." in page.inner_text("#timeline-note")

    # A step stored while the page is open is drawn from its notice, the timeline following the newest.
    page.wait_for_function("document.getElementById('live-status').textContent === 'Live.'")
    off_playwright_thread(lambda: step_events_ingest(run, [timed_step(STEPS + 1)]))
    page.wait_for_function(f"() => document.getElementById('timeline').dataset.spans === '{3 * (STEPS + 1)}'")
    screenshot("run-timeline")

    # A window of steps, then a click on the generation bar of step 5: the step's page, its rollouts.
    page.fill("#timeline-window input[name=from_step]", "3")
    page.fill("#timeline-window input[name=to_step]", "8")
    page.click("#timeline-window button[type=submit]")
    page.wait_for_function(f"() => document.getElementById('timeline').dataset.spans === '{3 * 6}'")
    # Plotly takes clicks on the layer above its bars, where it finds the bar under the pointer.
    box = page.locator("#timeline .barlayer .trace").first.locator(".point path").nth(2).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_url(f"**/runs/{run.pk}/steps/5/")


def test_a_run_trained_elsewhere_that_logs_only_bars_shows_its_timeline(page, asgi_server, make_user):
    """An SDK run may call run.log_span and report no pipeline metric: its Pipeline section still shows,
    for the timeline alone."""
    bob = make_user("bob", password=PASSWORD)
    run = make_run(bob, state=Run.State.RUNNING, name="bars only")
    steps = [timed_step(s) for s in range(1, 4)]
    for step in steps:
        step["metrics"] = {"reward/mean": 0.5}
    ingest(run, steps)
    log_in(page, asgi_server, "bob")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.getElementById('timeline')?.dataset.lanes === '3'")
    page.wait_for_function("() => !document.getElementById('section-pipeline').hidden")
    assert page.locator("#timeline .barlayer .point path").count() == 9


def pipelined_step(step):
    """A step of an asynchronous run (max_staleness = 1) as the trainer times it: 4 s of scoring and
    update on the trainer's lane, while the sampler generated this step's batch during the step before,
    with the adapter it had loaded (version step - 2), and the adapter's save and load on their lane."""
    t = 1_000.0 + 4 * step
    version = max(step - 2, 0)
    return {"type": "step", "attempt": 1, "step": step,
            "metrics": {"reward/mean": 0.3 + step / 5_000, "pipeline/trainer_wait_share": 0.02,
                        "pipeline/sampler_wait_share": 0.1, "pipeline/staleness/max": float(step - 1 - version)},
            "spans": [{"lane": "sampler", "name": f"generate the batch for update {step} with version {version}",
                       "start": t - 3.6, "end": t - 0.2, "policy_version": version},
                      {"lane": "adapter", "name": f"load adapter v{version}", "start": t - 3.8, "end": t - 3.6},
                      {"lane": "trainer", "name": f"update {step}", "start": t, "end": t + 3.7},
                      {"lane": "adapter", "name": f"save adapter v{step}", "start": t + 3.7, "end": t + 3.9}]}


def test_an_asynchronous_runs_timeline_shows_the_overlap_at_any_window_of_1000_steps(
        page, screenshot, asgi_server, make_user):
    carol = make_user("carol", password=PASSWORD)
    run = make_run(carol, state=Run.State.SUCCEEDED, name="pipelined")
    ingest(run, (pipelined_step(s) for s in range(1, 1_001)))
    log_in(page, asgi_server, "carol")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.getElementById('timeline')?.dataset.lanes === '3'")
    page.locator("#timeline-panel").scroll_into_view_if_needed()
    assert "Steps 951 to 1000." in page.inner_text("#timeline-note")  # the newest 50

    def window(first, last):
        page.fill("#timeline-window input[name=from_step]", str(first))
        page.fill("#timeline-window input[name=to_step]", str(last))
        page.click("#timeline-window button[type=submit]")

    window(1, 1_000)  # thinned like the charts: evenly spaced steps, said so
    page.wait_for_function("() => /every 5th of the window's 1000 steps/.test("
                           "document.getElementById('timeline-note').textContent)")
    assert page.locator("#timeline .barlayer .point path").count() == 4 * 200

    window(3, 8)
    page.wait_for_function(f"() => document.getElementById('timeline').dataset.spans === '{4 * 6}'")
    # Generation overlaps training: each batch is sampled while the trainer updates on the one before.
    overlaps = page.evaluate("""() => {
        const [sampler, trainer] = document.getElementById('timeline').data;
        return sampler.base.slice(1).map((start, i) => start < trainer.base[i] + trainer.x[i]);
    }""")
    assert overlaps == [True] * 5
    screenshot("run-timeline-async")
    box = page.locator("#timeline .barlayer .trace").first.locator(".point path").nth(2).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_url(f"**/runs/{run.pk}/steps/5/")  # the rollouts that batch produced
