"""The run page of a run trained elsewhere, in a real browser against the real ASGI app: its origin and
why it has no Cancel or Resume, its charts growing as its trainer posts steps through the logging API,
its end shown live, its groups in the group inspector, and the run turning lost and back live."""

import datetime as dt
import json
import urllib.request

import pytest
from django.utils import dateformat, timezone

from tests.browser.session import PASSWORD, log_in, off_playwright_thread
from tests.suites import UI_ONLY
from webapp.api.services import token_create
from webapp.runs.ingest.external import external_run_start, external_steps_log
from webapp.runs.ingest.lost import external_runs_mark_lost
from webapp.runs.models import Group, Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]


def logged_step(step):
    """Two prompts x 2 completions, two rewards, as TRL's callback sends them."""
    rollouts = [{"prompt": [{"role": "user", "content": f"Repeat: word {g}"}], "completion": f"word {g} try {i}.",
                 "rewards": {"regex_match": 1.0, "exact_match": float(i == step % 2)}, "advantage": 0.5 - i,
                 "group": g} for g in range(2) for i in range(2)]
    return {"step": step, "metrics": {"loss": 0.1 * step}, "rollouts": rollouts}


def post(url, token, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def test_an_external_runs_page_is_live_says_why_it_has_no_cancel_and_shows_its_groups(
        page, screenshot, asgi_server, make_user):
    alice = make_user("alice", password=PASSWORD)
    token = token_create(user=alice, name="trl")[1]
    run, _ = external_run_start(alice, client_id="trl-1", task="toy_format", name="trl run", origin="trl")
    external_steps_log(run, [logged_step(s) for s in (1, 2)])
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '2'")
    assert page.inner_text("#run-origin") == "TRL"
    assert "stop or resume it where it trains" in page.inner_text("#external-note")
    assert page.locator("#cancel-form").count() == 0 and page.locator("#resume-form").count() == 0
    assert page.inner_text("#run-step") == "2" and " / 0" not in page.inner_text(".facts")  # no total was given
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # Live: a step posted through the API by the trainer reaches the open page, and so does its end.
    off_playwright_thread(lambda: post(f"{asgi_server}/api/runs/{run.pk}/steps/", token, {"steps": [logged_step(3)]}))
    page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '3'")
    off_playwright_thread(lambda: post(f"{asgi_server}/api/runs/{run.pk}/finish/", token, {"state": "succeeded"}))
    page.wait_for_function("() => document.getElementById('run-state').textContent === 'succeeded'")
    assert errors == []
    screenshot("external-run-page")

    # The group inspector: the members' completions and both rewards.
    group = Group.objects.get(run=run, step=3, index=1)
    page.goto(f"{asgi_server}/runs/{run.pk}/groups/{group.pk}/")
    page.wait_for_selector("#members")
    members = page.inner_text("#members")
    assert "word 1 try 0." in members and "word 1 try 1." in members
    assert "regex_match" in page.content() and "exact_match" in page.content()


def test_a_lost_runs_page_says_so_live_and_since_when_and_its_next_post_reopens_it(page, asgi_server, make_user):
    alice = make_user("alice", password=PASSWORD)
    token = token_create(user=alice, name="sdk")[1]
    run, _ = external_run_start(alice, client_id="sdk-1", task="toy_format", name="sdk run")
    external_steps_log(run, [logged_step(1)])
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '1'")
    assert not page.is_visible("#lost-note")

    # The reaper's beat finds its trainer silent: the open page turns lost and says since when.
    off_playwright_thread(lambda: external_runs_mark_lost(stale_after=dt.timedelta(0)))
    page.wait_for_function("() => document.getElementById('run-state').textContent === 'lost'")
    assert page.is_visible("#lost-note") and "posted nothing since" in page.inner_text("#lost-note")
    last_post = dateformat.format(timezone.localtime(Run.objects.get(pk=run.pk).heartbeat_at), "c")
    assert page.get_attribute("#lost-note time", "datetime") == last_post

    # Its trainer posts again: running, the note gone, the step drawn.
    off_playwright_thread(lambda: post(f"{asgi_server}/api/runs/{run.pk}/steps/", token, {"steps": [logged_step(2)]}))
    page.wait_for_function("() => document.getElementById('run-state').textContent === 'running'")
    page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '2'")
    assert not page.is_visible("#lost-note")
