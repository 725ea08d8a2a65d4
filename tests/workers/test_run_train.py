"""A run trained by a real Celery worker process: claim, subprocess, ingest, final state."""

import time

import pytest

from tests.conftest import wait_for
from tests.webapp.runs.factories import make_task
from trainer.config import RunConfig
from trainer.programs.toy import ToyEcho
from webapp.celery import app
from webapp.runs.launch.check import Launch
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
    run = run_create(Launch(owner=owner, task=make_task(), config=toy_config()))
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    assert list(StepMetric.objects.filter(run=run).values_list("step", "seq")) == [(1, 1), (2, 2), (3, 3)]
    assert Rollout.objects.filter(run=run).count() == 3 * 4 * 4
    assert run.current_step == 3 and run.best_reward is not None and run.heartbeat_at is not None


def test_the_same_task_delivered_twice_trains_once(celery_worker_process, owner):
    run = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=2)))
    duplicate = app.send_task("workers.tasks.run_train_task", args=[run.pk], queue="gpu")
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    assert duplicate.get(timeout=60) in ("not claimed", "succeeded")
    assert StepMetric.objects.filter(run=run).count() == 2


def test_cancel_stops_a_running_run_at_a_step_boundary(celery_worker_process, owner, step_gate):
    from webapp.runs.services import run_cancel

    step_gate.allow(2)  # the trainer waits before step 3 until the test says otherwise
    run = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=200, checkpoint_every=0)))
    wait_for(lambda: StepMetric.objects.filter(run=run).count() == 2, 240, "the first two steps",
             celery_worker_process.log_path)
    run.refresh_from_db()
    run_cancel(run)  # a cancel ends the trainer's wait at the gate: it stops at this boundary
    run = wait_for_state(run, {Run.State.CANCELLED, Run.State.FAILED, Run.State.SUCCEEDED},
                         log=celery_worker_process.log_path)
    assert run.state == Run.State.CANCELLED
    assert run.current_step == 2 and StepMetric.objects.filter(run=run).count() == 2


def training_process_pids(run: Run) -> list[int]:
    """The trainer processes of `run`: matched on its own folder's full path, so a run of the same id
    under another runs folder (a second test session, a stack on this machine) is never touched."""
    import re
    import subprocess

    from webapp.runs.services import run_directory

    config = re.escape(str(run_directory(run.pk) / "config.json"))
    found = subprocess.run(["pgrep", "-f", f"trainer train --config {config}( |$)"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def test_killed_training_process_is_interrupted_then_resume_completes_every_step_once(celery_worker_process, owner,
                                                                                    step_gate):
    import os
    import signal

    from webapp.runs.services import run_resume

    steps = 8
    step_gate.allow(3)  # killed while it waits before step 4: its newest checkpoint is step 2's
    run = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=steps, checkpoint_every=2)))
    wait_for(lambda: StepMetric.objects.filter(run=run).count() == 3, 240, "the first three steps",
             celery_worker_process.log_path)
    pids = training_process_pids(run)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    run = wait_for_state(run, {Run.State.INTERRUPTED, Run.State.FAILED, Run.State.SUCCEEDED},
                         log=celery_worker_process.log_path)
    assert run.state == Run.State.INTERRUPTED, run.error
    step_gate.allow(steps)
    run_resume(run)
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=celery_worker_process.log_path)
    assert run.state == Run.State.SUCCEEDED, run.error
    assert run.attempt == 2
    stored = list(StepMetric.objects.filter(run=run).order_by("step").values_list("attempt", "step"))
    # Step 3 of attempt 1 came after the checkpoint: attempt 2 replaced it; nothing is missing or doubled.
    assert stored == [(1, 1), (1, 2)] + [(2, step) for step in range(3, steps + 1)]
    assert Rollout.objects.filter(run=run).values("step").distinct().count() == steps


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
