"""Replay one module in a real browser (issue 57 item 4): from the inspector, *Replay this module* on a
call, its cost first, then the start, then the G alternatives beside the original once the real Celery
worker has sampled them with the run's adapter (the page refreshes itself; the test waits on it)."""

import pytest

from tests.browser.session import PASSWORD, log_in, off_playwright_thread
from tests.workers.test_replay import stored_search_run
from webapp.runs.models import Replay

NEUTRAL = ("the inspector's replay links, the confirm page's cost, the start and the alternatives beside the "
           "original as a browser shows them; the replay's services, refusals and pages are tested on both "
           "backends in tests/webapp/runs/replay/test_views.py and the worker's replay in tests/workers/test_replay.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL),
              pytest.mark.django_db(transaction=True)]


def test_replay_a_module_from_the_inspector(page, screenshot, asgi_server, celery_worker_process, make_user, tmp_path):
    owner = make_user("alice", password=PASSWORD)
    stored = []
    off_playwright_thread(lambda: stored.append(stored_search_run(owner, tmp_path)))  # the ingest notifies
    run, _, example = stored[0]
    log_in(page, asgi_server, "alice")

    page.goto(f"{asgi_server}/runs/{run.pk}/steps/1/trajectories?example={example['id']}")
    page.wait_for_selector("#traj-grid")
    links = page.locator("tr.rollout[data-index='0'] a.replay-link")
    assert links.all_inner_texts() == ["rewriter#0", "reranker#0", "answerer#0"]
    page.click("tr.rollout[data-index='0'] a.replay-link[data-position='1']")

    # The cost comes first, and changes with G; nothing has started.
    page.wait_for_selector("#replay-cost")
    assert "8 = G 4 × (1 + 1 later call)" in page.inner_text("#cost-generations")
    page.fill("#replay-g input[name=g]", "3")
    page.click("#replay-g button")
    page.wait_for_function("() => document.querySelector('#cost-generations').textContent.includes('G 3')")
    assert "6 = G 3 × (1 + 1 later call)" in page.inner_text("#cost-generations")
    assert "builtin:tiny" in page.inner_text("#cost-model")
    assert "initial adapter" in page.inner_text("#cost-adapter")
    assert Replay.objects.count() == 0
    screenshot("replay-confirm")

    page.click("#replay-start")
    page.wait_for_url(f"{asgi_server}/runs/{run.pk}/calls/**/replays/**")
    # The page refreshes itself while the replay waits or runs; the worker samples it.
    page.wait_for_selector("section.replay[data-state='succeeded'], section.replay[data-state='failed']",
                           timeout=240_000)
    replay = Replay.objects.get()
    assert replay.state == Replay.State.SUCCEEDED, replay.error
    section = page.locator(f"#replay-{replay.pk}")
    assert section.locator("tr.alternative").count() == 3
    assert section.locator("tr.original").count() == 1
    assert "mean" in section.locator(".replay-spread").inner_text()
    alternatives = section.locator("tr.alternative td:nth-child(2)").all_inner_texts()
    for text, alternative in zip(alternatives, replay.result["alternatives"], strict=True):
        assert alternative["calls"][0]["module"] == "reranker" and text.startswith("reranker")
    screenshot("replay-result")

    page.goto(f"{asgi_server}/runs/{run.pk}/steps/1/trajectories?example={example['id']}")
    page.wait_for_selector("#replays tr.replay-row[data-state='succeeded']")
    assert page.locator("#replays tr.replay-row").count() == 1
    screenshot("replay-inspector")
