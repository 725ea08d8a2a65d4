"""A run trained by a real Celery worker process: claim, subprocess, ingest, final state."""

import time

import pytest

from tests.webapp.runs.factories import make_task
from trainer.config import RunConfig
from trainer.programs.toy import ToyEcho
from webapp.celery import app
from webapp.runs.models import Rollout, Run, StepMetric
from webapp.runs.services import run_create

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def toy_config(**changes) -> RunConfig:
    return RunConfig(**{**ToyEcho.suggested_config, "steps": 3, "group_size": 4, "rollouts_per_example": 4,
                        "eval_every": 0, "checkpoint_every": 1, **changes})


def wait_for_state(run: Run, states, timeout_s: float = 240.0, log=None) -> Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.state in states:
            return run
        time.sleep(0.5)
    raise AssertionError(f"run stayed {run.state}; worker log:\n{log.read_text() if log else ''}")


def test_a_queued_run_is_trained_to_success_with_every_step_stored_once(celery_worker_process, owner):
    run = run_create(owner=owner, task=make_task(), config=toy_config())
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    assert list(StepMetric.objects.filter(run=run).values_list("step", "seq")) == [(1, 1), (2, 2), (3, 3)]
    assert Rollout.objects.filter(run=run).count() == 3 * 4 * 4
    assert run.current_step == 3 and run.best_reward is not None and run.heartbeat_at is not None


def test_the_same_task_delivered_twice_trains_once(celery_worker_process, owner):
    run = run_create(owner=owner, task=make_task(), config=toy_config(steps=2))
    duplicate = app.send_task("workers.tasks.run_train_task", args=[run.pk], queue="gpu")
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    assert duplicate.get(timeout=60) in ("not claimed", "succeeded")
    assert StepMetric.objects.filter(run=run).count() == 2


def test_cancel_stops_a_running_run_at_a_step_boundary(celery_worker_process, owner):
    from webapp.runs.services import run_cancel

    run = run_create(owner=owner, task=make_task(), config=toy_config(steps=200, checkpoint_every=0))
    deadline = time.monotonic() + 240
    while not StepMetric.objects.filter(run=run).exists():
        assert time.monotonic() < deadline, celery_worker_process.log_path.read_text()
        time.sleep(0.5)
    run.refresh_from_db()
    run_cancel(run)
    run = wait_for_state(run, {Run.State.CANCELLED, Run.State.FAILED, Run.State.SUCCEEDED},
                         log=celery_worker_process.log_path)
    assert run.state == Run.State.CANCELLED
    assert run.current_step < 200


def training_process_pids(run: Run) -> list[int]:
    import subprocess

    found = subprocess.run(["pgrep", "-f", f"trainer train --config .*run-{run.pk}/config.json"],
                           capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def test_killed_training_process_is_interrupted_then_resume_completes_every_step_once(celery_worker_process, owner):
    import os
    import signal

    from webapp.runs.services import run_resume

    run = run_create(owner=owner, task=make_task(), config=toy_config(steps=60, checkpoint_every=2))
    deadline = time.monotonic() + 240
    while StepMetric.objects.filter(run=run).count() < 3:
        assert time.monotonic() < deadline, celery_worker_process.log_path.read_text()
        time.sleep(0.2)
    pids = training_process_pids(run)
    assert pids, "the training process must still be running (60 steps outlast the first 3)"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    run = wait_for_state(run, {Run.State.INTERRUPTED, Run.State.FAILED, Run.State.SUCCEEDED},
                         log=celery_worker_process.log_path)
    assert run.state == Run.State.INTERRUPTED, run.error
    run_resume(run)
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    assert run.attempt == 2
    steps = list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", flat=True))
    assert steps == list(range(1, 61))  # no duplicate, no missing step
    assert Rollout.objects.filter(run=run).values("step").distinct().count() == 60


def test_reaper_interrupts_a_run_whose_worker_went_silent(owner, settings):
    import datetime as dt

    from django.utils import timezone

    from tests.webapp.runs.factories import make_run
    from webapp.runs.services import runs_reap_stale

    stale = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now() - dt.timedelta(minutes=5))
    fresh = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now())
    cancelling = make_run(owner, state=Run.State.CANCELLING, heartbeat_at=timezone.now() - dt.timedelta(minutes=5))
    assert sorted(runs_reap_stale(timeout=dt.timedelta(seconds=60))) == sorted([stale.pk, cancelling.pk])
    for run, state in ((stale, Run.State.INTERRUPTED), (fresh, Run.State.RUNNING), (cancelling, Run.State.CANCELLED)):
        run.refresh_from_db()
        assert run.state == state
