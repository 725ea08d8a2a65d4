"""`POST /api/runs/<id>/events/` (webapp/scheduling/slurm/views.py): a Slurm job posts its trainer's
event-log lines with its run's job token alone. Another token is a 401, a bad body a 400 naming the
line; the posted steps are stored once, a `running` status starts the attempt, a final status ends the
run and revokes the token, and a cancelling run stays cancelling until Slurm says its job ended."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from webapp.runs.models import Run, StepMetric
from webapp.scheduling.models import SlurmJob
from webapp.scheduling.slurm import services

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def slurm_runs_dir(settings, tmp_path):
    settings.COHORT_SLURM_RUNS_DIR = tmp_path / "slurm-runs"
    return settings.COHORT_SLURM_RUNS_DIR


def slurm_run(owner, *, state: str = Run.State.QUEUED, key: str = "", **fields) -> tuple[Run, SlurmJob, str]:
    """A run on partition cpu with its submitted job and the job's token (`key`, or one issued as the
    tick issues it, written to the run's folder)."""
    run = make_run(owner, state=state, partition="cpu", time_limit_min=10, **fields)
    job = SlurmJob.objects.create(run=run, job_id="4242", state="RUNNING")
    if key:
        SlurmJob.objects.filter(pk=job.pk).update(token_hash=services.token_hash(key))
    else:
        run_dir = services.run_directory(run.pk, on_slurm=True)
        run_dir.mkdir(parents=True)
        services._job_token(job, run_dir)
        key = (run_dir / "job-token").read_text()
        assert (run_dir / "job-token").stat().st_mode & 0o777 == 0o600  # the job's user's alone
    job.refresh_from_db()
    return run, job, key


def post(run: Run, body, key: str | None = None, *, raw: bool = False):
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    data = body if raw else json.dumps(body)
    return Client(enforce_csrf_checks=True).post(reverse("slurm_job_events", args=[run.pk]), data,
                                                 content_type="application/json", headers=headers)


def step(number: int, attempt: int = 1, reward: float = 0.5) -> dict:
    return {"type": "step", "attempt": attempt, "step": number, "metrics": {"reward/mean": reward}}


def status(state: str, attempt: int = 1, step_: int = 0, **extra) -> dict:
    return {"type": "status", "state": state, "attempt": attempt, "step": step_, **extra}


def test_only_the_runs_own_job_token_posts_its_events(owner):
    run, _, key = slurm_run(owner)
    other, _, other_key = slurm_run(owner)
    body = {"events": [step(1)]}
    for given in (None, "", "not-the-token", other_key, f"{key}x"):
        response = post(run, body, given)
        assert response.status_code == 401, given
        assert "posts no events for this run" in response.json()["detail"]
    basic = Client().post(reverse("slurm_job_events", args=[run.pk]), json.dumps(body),
                          content_type="application/json", headers={"Authorization": f"Basic {key}"})
    assert basic.status_code == 401
    assert Client().get(reverse("slurm_job_events", args=[run.pk]), headers={
        "Authorization": f"Bearer {key}"}).status_code == 405
    assert not StepMetric.objects.exists()
    assert post(other, body, other_key).status_code == 200  # each token posts its own run's


def test_a_bad_body_is_a_400_naming_the_line_and_stores_nothing(owner):
    run, _, key = slurm_run(owner)
    cases = [(b"not json", "The body is not JSON"),
             (b"", '{"events": [...]}'),
             (b"[1, 2]", '{"events": [...]}'),
             (json.dumps({}).encode(), '{"events": [...]}'),
             (json.dumps({"events": []}).encode(), "1 to 5000"),
             (json.dumps({"events": {"type": "step"}}).encode(), '{"events": [...]}'),
             (json.dumps({"events": [step(1), {"type": "bogus"}]}).encode(), "events[1] is not an event"),
             (json.dumps({"events": ["step"]}).encode(), "events[0] is not an event"),
             (json.dumps({"events": [{**step(1), "step": True}]}).encode(), "events[0].step must be a whole number"),
             (json.dumps({"events": [{**step(1), "step": 1.5}]}).encode(), "events[0].step must be a whole number"),
             (json.dumps({"events": [{**step(1), "step": -1}]}).encode(), "events[0].step must be a whole number"),
             (json.dumps({"events": [{**step(1), "attempt": "1"}]}).encode(), "events[0].attempt must be"),
             (json.dumps({"events": [{**step(1), "metrics": [1]}]}).encode(), "events[0].metrics must be an object"),
             (json.dumps({"events": [step(1), {"type": "status", "state": "running"}]}).encode(),
              "events[1] starts or belongs to an attempt and must name it")]
    for body, words in cases:
        response = post(run, body, key, raw=True)
        assert response.status_code == 400, (body, response.content)
        assert words in response.json()["detail"], (body, response.json())
    assert not StepMetric.objects.exists()
    run.refresh_from_db()
    assert (run.state, run.current_step) == (Run.State.QUEUED, 0)


def test_a_running_status_and_steps_start_the_attempt_and_are_stored_once(owner):
    run, job, key = slurm_run(owner)
    events = [status("running", attempt=2, gpus=0), step(1, attempt=2), step(2, attempt=2, reward=0.75)]
    response = post(run, {"events": events}, key)
    assert response.status_code == 200, response.content
    assert response.json() == {"stored": 2, "state": "running"}
    run.refresh_from_db()
    assert (run.state, run.attempt, run.current_step, run.best_reward) == (Run.State.RUNNING, 2, 2, 0.75)
    assert run.started_at is not None and run.heartbeat_at is not None
    assert list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", "attempt")) == [(1, 2), (2, 2)]
    again = post(run, {"events": events[1:] + [step(3, attempt=2)]}, key)  # a batch sent again: only step 3 is new
    assert again.json() == {"stored": 1, "state": "running"}
    assert StepMetric.objects.filter(run=run).count() == 3
    job.refresh_from_db()
    assert job.token_hash == services.token_hash(key)  # still posting


def test_a_posted_final_status_finishes_the_run_and_revokes_the_token(owner):
    run, job, key = slurm_run(owner)
    response = post(run, {"events": [status("running"), step(1), status("succeeded", step_=1)]}, key)
    assert response.json() == {"stored": 1, "state": "succeeded"}
    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED and run.finished_at is not None
    job.refresh_from_db()
    assert job.token_hash == ""
    late = post(run, {"events": [step(2)]}, key)
    assert late.status_code == 401
    assert StepMetric.objects.filter(run=run).count() == 1


def test_a_posted_failure_keeps_the_trainers_error(owner):
    run, _, key = slurm_run(owner, state=Run.State.RUNNING)
    response = post(run, {"events": [status("failed", step_=0, error="CUDA out of memory")]}, key)
    assert response.json()["state"] == "failed"
    run.refresh_from_db()
    assert (run.state, run.error) == (Run.State.FAILED, "CUDA out of memory")


def test_a_token_of_a_run_that_ended_meanwhile_is_revoked_at_its_next_post(owner):
    run, job, key = slurm_run(owner, key="the-jobs-key")
    Run.objects.filter(pk=run.pk).update(state=Run.State.CANCELLED)  # cancelled while queued
    assert post(run, {"events": [step(1)]}, key).json() == {"stored": 0, "state": "cancelled"}
    job.refresh_from_db()
    assert job.token_hash == "" and not StepMetric.objects.exists()
    assert post(run, {"events": [step(1)]}, key).status_code == 401


def test_a_cancelling_run_says_so_and_ends_only_when_slurm_says_its_job_ended(owner):
    run, job, key = slurm_run(owner, state=Run.State.CANCELLING)
    assert post(run, {"events": [step(1)]}, key).json() == {"stored": 1, "state": "cancelling"}
    # The trainer saw its STOP file: its `cancelled` is posted, but the job may still be exiting.
    assert post(run, {"events": [status("cancelled", step_=1)]}, key).json() == {"stored": 0, "state": "cancelling"}
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLING and run.finished_at is None
    # The tick reads the ended job from Slurm.
    services.job_ended(run, job, {"JobState": "COMPLETED", "ExitCode": "0:0", "NodeList": "n1"})
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLED
    job.refresh_from_db()
    assert job.token_hash == "" and job.state == "COMPLETED" and job.ended
    assert post(run, {"events": [step(2)]}, key).status_code == 401
