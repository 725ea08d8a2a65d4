"""The run's timeline (timeline.json): a window of steps' bars, the newest by default, thinned to evenly
spaced steps past a page's worth, only for the run's readers."""

import pytest
from django.urls import reverse

from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.charts.timeline import MAX_TIMELINE_STEPS, TIMELINE_STEPS
from webapp.runs.models import Run
from webapp.runs.services import run_discard_steps_after

pytestmark = pytest.mark.django_db


def timed_step(step, *, attempt=1):
    """A synchronous step of 10 s: 6 s sampling, then the trainer's 4 (and an adapter hand-over)."""
    t = 1_000.0 + 10 * step
    return {"type": "step", "attempt": attempt, "step": step, "metrics": {"reward/mean": 0.5},
            "spans": [{"lane": "adapter", "name": "save and load", "start": t + 9, "end": t + 10},
                      {"lane": "trainer", "name": "update", "start": t + 6, "end": t + 9},
                      {"lane": "sampler", "name": "generate", "start": t, "end": t + 6, "policy_version": step - 1}]}


def timeline(client, run, **query):
    response = client.get(reverse("runs:timeline", args=[run.pk]), query)
    assert response.status_code == 200, response.content
    return response.json()


def test_the_newest_steps_by_default_each_bar_with_its_step_and_the_lanes_in_order(client, owner):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, (timed_step(s) for s in range(1, TIMELINE_STEPS + 11)))
    client.force_login(owner)
    data = timeline(client, run)
    assert data["steps"] == [11, TIMELINE_STEPS + 10] and data["every"] == 1
    assert data["lanes"] == ["sampler", "trainer", "adapter"]
    assert len(data["spans"]) == 3 * TIMELINE_STEPS
    generate = next(s for s in data["spans"] if s["step"] == 11 and s["lane"] == "sampler")
    assert generate == {"lane": "sampler", "name": "generate", "start": 1110.0, "end": 1116.0,
                        "policy_version": 10, "step": 11}


def test_a_window_wider_than_a_page_shows_evenly_spaced_steps_and_says_so(client, owner):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, (timed_step(s) for s in range(1, 2 * MAX_TIMELINE_STEPS + 101)))
    client.force_login(owner)
    data = timeline(client, run, from_step=1, to_step=2 * MAX_TIMELINE_STEPS + 100)
    assert data["every"] == 3 and data["window_steps"] == 2 * MAX_TIMELINE_STEPS + 100
    steps = sorted({s["step"] for s in data["spans"]})
    assert len(steps) <= MAX_TIMELINE_STEPS and steps[:3] == [1, 4, 7]
    assert timeline(client, run, from_step=20, to_step=24)["steps"] == [20, 24]
    assert timeline(client, run, from_step=30, to_step=20)["spans"] == []  # an empty window, not an error


def test_a_resumed_run_shows_each_step_once_from_the_attempt_that_kept_it(client, owner):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, (timed_step(s) for s in range(1, 6)))
    run_discard_steps_after(run, attempt=2, step=3)
    ingest(run, (timed_step(s, attempt=2) for s in range(4, 6)))
    client.force_login(owner)
    data = timeline(client, run)
    assert sorted(s["step"] for s in data["spans"] if s["lane"] == "sampler") == [1, 2, 3, 4, 5]


def test_a_run_without_a_timeline_answers_empty_and_others_cannot_read_it(client, owner, make_user):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, [{"type": "step", "attempt": 1, "step": 1, "metrics": {"reward/mean": 0.1}}])
    client.force_login(owner)
    assert timeline(client, run) == {"run": run.pk, "steps": [1, 1], "every": 1, "window_steps": 1, "lanes": [],
                                     "spans": []}
    bad = client.get(reverse("runs:timeline", args=[run.pk]), {"from_step": "soon"})
    assert bad.status_code == 400 and "from_step" in bad.json()["error"]
    client.force_login(make_user("mallory"))
    assert client.get(reverse("runs:timeline", args=[run.pk])).status_code == 404
