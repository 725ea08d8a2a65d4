"""The per-example history and the best/worst divergence marks in a real browser (daphne serving
the real ASGI app, data stored through the real ingest service)."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.runs.inspector.divergence import grid_divergence
from webapp.runs.inspector.history import example_history
from webapp.runs.inspector.steps import trajectory_grid
from webapp.runs.models import Run

NEUTRAL = ("the example history's charts and visits table and the inspector's divergence marks as drawn in a "
           "real browser, compared with example_history() and grid_divergence() run by the test on the same "
           "database; the history's aggregations and the inspector's queries are tested on both backends in "
           "tests/webapp/runs/inspector/test_history.py, tests/webapp/runs/inspector/test_divergence.py and "
           "tests/webapp/runs/inspector/test_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

STEPS = range(1, 7)


def test_history_from_the_inspector_and_back_to_the_divergence(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, state=Run.State.SUCCEEDED, config={"strategy": "grpo", "padding": "fill"}, name="hover")
    ingest(run, [hover_step_event(s, examples=2, rollouts=6, group_size=7, seed=1) for s in STEPS])
    parting = grid_divergence(trajectory_grid(run, 3, "claim-0"))
    assert parting is not None and parting.word_index is not None  # the seed gives a word-level parting
    visits = example_history(run, "claim-0").visits
    log_in(page, asgi_server, "alice")

    page.goto(f"{asgi_server}/runs/{run.pk}/steps/3/trajectories?example=claim-0")
    page.wait_for_selector("#traj-grid")
    page.click("text=History of this example")
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/examples/claim-0/")
    page.wait_for_selector("#reward-chart[data-drawn='1']")
    page.wait_for_selector("#group-chart[data-drawn='1']")
    # One point per rewarded rollout of every visit, the mean line, the min-max band.
    rewarded = sum(len(v.rewards) for v in visits)
    assert page.get_attribute("#reward-chart", "data-points") == str(rewarded)
    names = page.evaluate("() => document.querySelector('#reward-chart').data.map(t => t.name)")
    assert names == ["min", "min–max", "mean", "rollouts"]
    drawn = page.locator("#reward-chart .scatterlayer .trace").nth(3).locator(".points path").count()
    assert drawn == rewarded
    # Variance and similarity per module over the visits.
    assert page.get_attribute("#group-chart", "data-traces") == "4"
    legend = page.eval_on_selector_all("#group-chart .legendtext", "els => els.map(e => e.textContent)")
    assert legend == ["create_query variance", "create_query similarity", "summarize variance", "summarize similarity"]
    assert page.inner_text("#visit-count") == "6" and page.inner_text("#visit-steps") == "1 – 6"
    # The visits table: newest first, one row per step, numbers as stored.
    rows = page.locator("#visits tbody tr.visit")
    assert rows.count() == len(STEPS)
    assert [int(s) for s in page.eval_on_selector_all("#visits tr.visit", "rs => rs.map(r => r.dataset.step)")] == \
        list(reversed(STEPS))
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[0] == "6" and first[1] == str(visits[0].rollouts) and first[3] == f"{visits[0].mean:.3f}"
    screenshot("example-history")

    page.go_back()
    page.wait_for_selector("#traj-grid")
    summary = page.inner_text("#divergence-summary")
    assert f"rollout {parting.best.index}) and worst" in summary and f"word {parting.word_number}" in summary
    best = page.locator(f"#traj-grid tr.rollout[data-index='{parting.best.index}']")
    worst = page.locator(f"#traj-grid tr.rollout[data-index='{parting.worst.index}']")
    assert best.locator(".badge.best").inner_text() == "best"
    assert worst.locator(".badge.worst").inner_text() == "worst"
    assert page.locator("#traj-grid td.diverge").count() == 2
    for row, word in ((best, parting.best_word), (worst, parting.worst_word)):
        cell = row.locator("td.diverge")
        assert cell.locator(".diverge-note").inner_text().startswith("best and worst part here")
        marked = cell.locator("mark.diverge-word")
        if word:
            assert marked.inner_text() == word and marked.is_visible()
        else:  # the shorter completion ended before the differing word
            assert marked.count() == 0
    # The marker is visible: an outline on the cell, a coloured background on the word.
    outline = page.eval_on_selector("#traj-grid td.diverge", "td => getComputedStyle(td).outlineStyle")
    assert outline == "solid"
    page.locator("#traj-grid td.diverge").first.scroll_into_view_if_needed()
    screenshot("inspector-divergence")


def test_step_page_rows_lead_to_the_history(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, config={"strategy": "grpo", "padding": "fill"})
    ingest(run, [hover_step_event(s, examples=2, rollouts=4, seed=s) for s in (1, 2)])
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/steps/2/")
    page.locator("#examples tr:has-text('claim-1') a.history-link").click()
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/examples/claim-1/")
    page.wait_for_selector("#reward-chart[data-drawn='1']")
    assert page.locator("#visits tr.visit").count() == 2
    # A visit's link opens the inspector of that step.
    page.locator("#visits tr.visit[data-step='1'] a.inspect-link").click()
    page.wait_for_selector("#traj-grid")
    assert "/steps/1/trajectories?example=claim-1&attempt=1" in page.url
