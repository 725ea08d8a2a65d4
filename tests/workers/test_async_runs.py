"""A run with `max_staleness >= 1` trained by a real Celery worker: its sampler is a process of its own
beside the trainer's; the run succeeds with every trained batch within k versions, a sampler killed with
SIGKILL fails the run saying so (no hang, no restart), and a cancel ends both processes."""

import os
import signal
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config, training_process_pids, wait_for_state
from trainer.run.sampler_process import SAMPLER_PID_FILE
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run, StepMetric
from webapp.runs.services import run_cancel, run_create, run_directory

NEUTRAL = ("a run's life through a real worker with a sampler process beside its trainer; its queries are those of "
           "every real-worker run, tested on both backends in tests/workers/test_run_train.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def sampler_pid(run: Run) -> int:
    return int((run_directory(run.pk) / SAMPLER_PID_FILE).read_text())


def process_ended(pid: int) -> bool:
    """Whether `pid` is gone or a zombie nobody has reaped yet (it runs nothing either way)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def stored_steps(run: Run) -> int:
    return StepMetric.objects.filter(run=run).count()


def test_an_async_run_succeeds_and_a_killed_sampler_fails_its_run_saying_so(celery_worker_process, owner,
                                                                           step_gate):
    log = celery_worker_process.log_path
    run = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=4, max_staleness=1)))
    run = wait_for_state(run, {Run.State.SUCCEEDED, Run.State.FAILED}, log=log)
    assert run.state == Run.State.SUCCEEDED, run.error
    for row in StepMetric.objects.filter(run=run).order_by("step"):
        assert 0 <= row.metrics["pipeline/staleness/max"] <= 1 and row.metrics["pipeline/dropped_stale"] == 0
        lanes = {span["lane"] for span in row.spans}
        assert {"sampler", "trainer", "ingest"} <= lanes  # both processes' bars and the worker's, with the step
        (ingest,) = [span for span in row.spans if span["lane"] == "ingest"]
        assert ingest["start"] == max(span["end"] for span in row.spans if span["lane"] != "ingest")
    assert not (run_directory(run.pk) / SAMPLER_PID_FILE).exists()

    killed = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=50, max_staleness=1,
                                                                                checkpoint_every=0)))
    step_gate.allow(2, run=run_directory(killed.pk).name)  # held before step 3, its sampler alive
    wait_for(lambda: stored_steps(killed) == 2, 240, "the first two steps", log)
    pid = sampler_pid(killed)
    os.kill(pid, signal.SIGKILL)
    step_gate.allow(50, run=run_directory(killed.pk).name)
    killed = wait_for_state(killed, {Run.State.SUCCEEDED, Run.State.FAILED, Run.State.INTERRUPTED}, log=log)
    assert killed.state == Run.State.FAILED
    assert "sampler process" in killed.error and "killed by SIGKILL" in killed.error
    assert stored_steps(killed) <= 4  # at most the batches it had sent before it died were trained
    wait_for(lambda: not training_process_pids(killed), 60, "the trainer process to end", log)


def test_cancel_ends_the_trainer_and_its_sampler(celery_worker_process, owner, step_gate):
    log = celery_worker_process.log_path
    run = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=50, max_staleness=2,
                                                                             checkpoint_every=0)))
    step_gate.allow(2, run=run_directory(run.pk).name)
    wait_for(lambda: stored_steps(run) == 2, 240, "the first two steps", log)
    pid = sampler_pid(run)
    assert not process_ended(pid)
    run.refresh_from_db()
    run_cancel(run)
    run = wait_for_state(run, {Run.State.CANCELLED, Run.State.FAILED, Run.State.SUCCEEDED}, log=log)
    assert run.state == Run.State.CANCELLED and stored_steps(run) == 2
    wait_for(lambda: process_ended(pid) and not training_process_pids(run), 60, "both processes to end", log)
    assert not (run_directory(run.pk) / SAMPLER_PID_FILE).exists()
