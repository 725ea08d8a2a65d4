"""Phase 1 of a run that optimizes prompts first on the run page, in a real browser (issue 26, item 2):
the phase marker, every trial's score on a chart, and the chosen prompts, drawn from the stored record
and kept live by the run's websocket."""


import pytest

from tests.browser.session import log_in, off_playwright_thread
from tests.webapp.runs.factories import make_run
from webapp.runs.ingest.prompt_phase import run_record_prompt_events
from webapp.runs.live.notices import notice_send
from webapp.runs.models import Run

NEUTRAL = ("the run page's phase-1 section (marker, trials chart, chosen prompts) drawn and kept live in a "
           "real browser; storing the phase record (select_for_update) and the run page's section are tested "
           "on both backends in tests/webapp/runs/ingest/test_prompt_phase.py, the run's websocket in "
           "tests/webapp/runs/live/test_consumers.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

INSTRUCTION = "Given the question, write one short search query that names the entity."


def ship(run_id, events):
    """What the supervisor does with the trainer's events."""
    def work():
        record = run_record_prompt_events(run_id, events)
        notice_send(run_id, {"type": "prompts", "run": run_id, **record})

    off_playwright_thread(work)


def test_the_run_page_shows_phase_1_live(page, screenshot, asgi_server, make_user):
    alice = make_user("alice", password="a-long-test-password")
    run = make_run(alice, state=Run.State.RUNNING, name="better-together")
    run.config = {**run.config, "prompt_optimizer": "mipro_light"}
    run.save()
    ship(run.pk, [{"event": "started", "optimizer": "mipro_light", "model": "builtin:smollm2-135m-instruct",
                   "attempt": 1}, {"event": "trial", "trial": 1, "score": 25.0}])
    log_in(page, asgi_server, "alice", "a-long-test-password")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    assert page.inner_text("#prompt-phase-marker") == "phase 1 of 2: optimizing prompts"
    page.wait_for_function("document.getElementById('prompt-trials-chart').dataset.points === '1'")
    page.wait_for_function("document.getElementById('live-status').textContent === 'Live.'")

    ship(run.pk, [{"event": "trial", "trial": 2, "score": 50.0}, {"event": "trial", "trial": 3, "score": 50.0},
                  {"event": "chosen", "modules": {
                      "query": {"instructions": INSTRUCTION, "demos": [{"question": "Capital of France?", "query": "France capital"}]},
                      "answer": {"instructions": "Answer in one word.", "demos": []}}}])
    page.wait_for_function("document.getElementById('prompt-phase-marker').textContent.startsWith('phase 2')")
    assert page.get_attribute("#prompt-trials-chart", "data-points") == "3"
    assert "MIPROv2 (light) proposing with builtin:smollm2-135m-instruct · 3 trial(s) · best 50.0" == \
        page.inner_text("#prompt-phase-note")
    assert page.inner_text(".prompt-module[data-module='query'] .prompt-instructions") == INSTRUCTION
    assert "question: Capital of France? · query: France capital" in page.inner_text(".prompt-module[data-module='query']")
    assert "No demos." in page.inner_text(".prompt-module[data-module='answer']")
    page.locator("#prompt-phase").scroll_into_view_if_needed()
    screenshot("prompt-phase")
