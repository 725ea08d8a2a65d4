"""The inspectors, heatmaps, long-run charts and the run comparison in a real browser (daphne serving
the real ASGI app, data stored through the real ingest service)."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import (
    collapse_step_event,
    error_step_event,
    hover_step_event,
    ingest,
    make_run,
    mhgpo_step_event,
)
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.models import Group, Rollout, Run

NEUTRAL = ("the trajectory grid, group page, fork tree, rollout errors, heatmaps, downsampled and zoomed "
           "charts and the compare page as drawn and driven in a real browser; the queries behind them are "
           "tested on both backends in tests/webapp/runs/inspector/test_views.py (grid, groups, forks, errors) "
           "and tests/webapp/runs/charts/test_series_views.py (downsampling, zoom ranges, heatmaps, compare)")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def long_events(steps, *, scale=1.0, extra=None):
    import math

    for step in steps:
        yield {"type": "step", "attempt": 1, "step": step,
               "metrics": {"reward/mean": scale * math.sin(step / 300) + (3.0 if step == 2345 else 0.0),
                           "kl": step / 10000, "group_var/create_query": (step % 50) / 100,
                           "group_var/summarize": ((step * 7) % 40) / 100,
                           "zero_var_share/create_query": (step % 4) / 4, "zero_var_share/summarize": 0.25,
                           **(extra or {})}}


def test_trajectory_grid_aligns_a_hover_style_run(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, state=Run.State.SUCCEEDED, config={"strategy": "grpo", "padding": "fill"}, name="hover grid")
    ingest(run, [hover_step_event(1, examples=2, rollouts=6, group_size=7, seed=1)])  # seed 1: a failure
    rollouts = list(Rollout.objects.filter(run=run, example_id="claim-0").order_by("index"))
    calls = {r.index: list(r.calls.order_by("position")) for r in rollouts}
    fill_call_texts([c for own in calls.values() for c in own])
    log_in(page, asgi_server, "alice")

    page.goto(f"{asgi_server}/runs/{run.pk}/steps/1/")
    page.click("text=claim-0")
    page.wait_for_selector("#traj-grid")
    headers = page.eval_on_selector_all("#traj-grid thead .slot-head", "els => els.map(e => e.dataset.slot)")
    deepest = max(len(c) for c in calls.values()) // 2
    assert headers == [f"{m}#{i}" for i in range(deepest) for m in ("create_query", "summarize")]
    # Row by row, each call sits under its own (module, invocation) column; short rollouts end in
    # missing cells, which fill padding marks.
    for index, own in calls.items():
        row = page.locator(f"#traj-grid tr.rollout[data-index='{index}'] td")
        assert row.count() == len(headers)
        for col, call in enumerate(own):
            assert f"{call.module}#{call.invocation_index}" == headers[col]
            assert call.completion.split()[0] in row.nth(col).inner_text()
        for col in range(len(own), len(headers)):
            assert "missing" in row.nth(col).get_attribute("class")
    assert page.locator("td.padded").count() > 0 and page.locator("td.dup").count() > 0
    assert page.locator("td.differs mark").count() > 0
    screenshot("inspector-hover-grid")

    # Sort by reward (high first) and keep only failed rollouts.
    page.select_option("#sort-rollouts", "reward-desc")
    order = page.eval_on_selector_all("#traj-grid tbody tr", "rows => rows.map(r => Number(r.dataset.reward))")
    assert order == sorted(order, reverse=True)
    page.select_option("#filter-failure", "failed")
    failed = sum(r.failed for r in rollouts)
    assert failed >= 1 and page.get_attribute("#traj-grid", "data-shown") == str(failed)
    assert page.locator("#traj-grid tr.rollout:not([hidden]) td.parse-bad").count() == failed
    screenshot("inspector-hover-grid-failed-only")
    page.select_option("#filter-failure", "all")

    # A prompt loads on demand.
    page.locator(".prompt-toggle").first.click()
    page.wait_for_function("() => document.querySelector('pre.prompt').textContent.startsWith('Claim:')")
    screenshot("inspector-hover-grid-sorted")


def test_group_page_shows_grpo_collapse_and_gdpo_keeping_it_apart(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, config={"strategy": "grpo", "rewards": [{"name": "format", "weight": 1.0},
                                                                   {"name": "correct", "weight": 1.0}]})
    ingest(run, [collapse_step_event()])
    group = Group.objects.get(run=run)
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/groups/{group.pk}/")
    page.wait_for_selector("#advantage-chart[data-drawn='1']")
    assert page.inner_text("#distinct-rewards") == "3"
    assert page.inner_text("#distinct-grpo") == "2" and page.inner_text("#distinct-gdpo") == "3"
    assert "collapses 3 distinct reward vectors onto 2" in page.inner_text("#collapse-note")
    grpo = page.eval_on_selector_all("#members td.grpo", "els => els.map(e => e.textContent.trim())")
    gdpo = page.eval_on_selector_all("#members td.gdpo", "els => els.map(e => e.textContent.trim())")
    assert grpo[0] == grpo[1] and gdpo[0] != gdpo[1]  # rewards (1,0) and (0,1)
    assert page.locator("#advantage-chart .bars path").count() >= 3 * 4 - 1  # three bars per member
    screenshot("group-collapse")


def test_mhgpo_fork_tree(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"})
    ingest(run, [mhgpo_step_event(1, questions=2, group_size=4)])
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/steps/1/trajectories?example=q1")
    page.wait_for_selector("#forks .fork-tree")
    assert page.locator("#forks .branch").count() == 4
    assert "fork at rewriter × 4" in page.inner_text("#forks .fork-point")
    assert page.locator("#forks a.group-link.homogeneous").count() == 4
    assert page.locator("#forks a.group-link.heterogeneous").count() >= 4
    screenshot("inspector-mhgpo-fork-tree")


def test_a_rollout_that_raised_shows_its_error(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, config={"strategy": "mhgpo", "sampling": "fof"})
    ingest(run, [error_step_event(1)])  # the program's step raised in rollout #1 of q0
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/steps/1/")
    assert page.inner_text("#examples tbody tr:has-text('q0') td.raised") == "1"
    page.click("text=q0")
    page.wait_for_selector("#traj-grid")
    box = page.locator("#rollout-errors .error-box")
    assert box.count() == 1 and box.is_visible()
    assert box.locator(".error-headline").inner_text() == "ZeroDivisionError: division by zero"
    assert "in program step of module 'reranker'" in box.locator("pre.error-details").inner_text()
    # The rollout's row says it raised; its badge leads to the box.
    row = page.locator("#traj-grid tr.rollout[data-index='1']")
    assert row.get_attribute("data-error") == "1" and row.locator("td.parse-bad").count() == 1
    row.locator("a.raised").click()
    page.wait_for_url("**#error-1")
    page.select_option("#filter-failure", "failed")
    assert page.get_attribute("#traj-grid", "data-shown") == "1"
    screenshot("inspector-rollout-error")


def test_run_page_heatmap_and_click_to_step(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, state=Run.State.SUCCEEDED, name="hover steps")
    ingest(run, [hover_step_event(s, examples=2, rollouts=4, seed=s) for s in range(1, 13)])
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => Number(document.querySelector('#chart-reward')?.dataset.points || 0) === 12")
    page.wait_for_selector("#heatmap-group_var[data-modules='2']")
    page.wait_for_selector("#heatmap-zero_var_share[data-modules='2']")
    assert page.get_attribute("#heatmap-group_var", "data-columns") == "12"
    page.locator("#heatmaps").scroll_into_view_if_needed()
    screenshot("run-heatmaps")

    # Clicking a marker of the reward chart opens that step.
    page.locator("#chart-reward").scroll_into_view_if_needed()
    point = page.locator("#chart-reward .scatterlayer .trace .points path").nth(4)
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/steps/*/")
    step = int(page.url.rstrip("/").split("/")[-1])
    assert 1 <= step <= 12
    assert page.locator("#examples a:not(.history-link)").count() == 2  # one inspector link per example
    screenshot("step-page")


def test_long_run_loads_downsampled_and_zoom_gets_full_resolution(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, state=Run.State.SUCCEEDED, name="long run")
    ingest(run, long_events(range(1, 20_001)))
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_selector("#chart-reward[data-downsampled='true']")
    assert int(page.get_attribute("#chart-reward", "data-points")) == 2000
    assert page.get_attribute("#chart-reward", "data-webgl") == "false"  # SVG: a browser keeps ~16 WebGL contexts
    ys = page.evaluate("() => document.querySelector('#chart-reward').data[0].y")
    assert max(ys) > 2.9  # the one-step spike at 2345 survives downsampling
    page.wait_for_selector("#heatmap-group_var[data-modules='2']")
    assert int(page.get_attribute("#heatmap-group_var", "data-columns")) <= 400
    screenshot("long-run-overview")

    page.evaluate("() => Plotly.relayout(document.querySelector('#chart-reward'), {'xaxis.range': [2300, 2600]})")
    page.wait_for_selector("#chart-reward[data-resolution='full']")
    assert page.get_attribute("#chart-reward", "data-points") == "301"
    xs = page.evaluate("() => document.querySelector('#chart-reward').data[0].x")
    assert xs[0] == 2300 and xs[-1] == 2600 and len(set(xs)) == 301
    screenshot("long-run-zoomed")

    page.evaluate("() => Plotly.relayout(document.querySelector('#chart-reward'), {'xaxis.autorange': true})")
    page.wait_for_selector("#chart-reward[data-resolution='downsampled']")
    assert page.get_attribute("#chart-reward", "data-points") == "2000"


def test_compare_two_runs(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    a = make_run(owner, name="grpo run", config={"estimator": "grpo", "lr": 1e-5, "group_size": 8})
    b = make_run(owner, name="gdpo run", config={"estimator": "gdpo", "lr": 1e-5, "group_size": 8})
    ingest(a, long_events(range(1, 301)))
    ingest(b, long_events(range(1, 201), scale=0.5, extra={"reward/word": 0.5}))
    log_in(page, asgi_server, "alice")
    page.check(f"input[name=runs][value='{a.pk}']")
    page.check(f"input[name=runs][value='{b.pk}']")
    page.click("#compare-runs button[type=submit]")
    page.wait_for_url(f"{asgi_server}/runs/compare*")
    page.wait_for_selector("#compare-reward-mean[data-traces='2']")
    assert page.locator("#config-diff tbody tr").count() == 1
    assert "estimator" in page.inner_text("#config-diff") and "lr" not in page.inner_text("#config-diff th")
    page.select_option("#metric-choice", ["reward/mean", "kl"])
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector("#compare-kl[data-traces='2']")
    lengths = page.evaluate("() => document.querySelector('#compare-reward-mean').data.map(t => t.x.length)")
    assert sorted(lengths) == [200, 300]
    screenshot("compare-two-runs")
    # A run keeps its color on a chart the other run has no trace in (a TRL run's own reward names).
    page.select_option("#metric-choice", ["reward/mean", "reward/word"])
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector("#compare-reward-word[data-traces='1']")
    colors = page.evaluate("""() => Object.fromEntries(['#compare-reward-mean', '#compare-reward-word'].map(
        id => [id, Object.fromEntries(document.querySelector(id).data.map(t => [t.name, t.line.color]))]))""")
    assert colors["#compare-reward-word"]["gdpo run"] == colors["#compare-reward-mean"]["gdpo run"]
    assert colors["#compare-reward-mean"]["gdpo run"] != colors["#compare-reward-mean"]["grpo run"]
