"""The supervisor records the GPUs a run holds from the trainer's `running` status event."""

import json

import pytest

from tests.webapp.runs.factories import make_run
from webapp.runs.models import Run
from workers.supervisor import Supervisor

NEUTRAL = ("the supervisor copying the GPU count of the trainer's running event into Run.gpus (a plain "
           "UPDATE); the discard and the storage recount ship() also runs are tested on both backends in "
           "tests/workers/test_run_train.py (resume) and tests/webapp/runs/ingest/test_retention.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL),
              pytest.mark.django_db(transaction=True)]  # ship() closes stale connections itself


def test_the_running_status_event_sets_the_runs_gpu_count(owner, settings, tmp_path):
    settings.COHORT_RUNS_DIR = str(tmp_path / "runs")
    run = make_run(owner, state=Run.State.RUNNING)
    supervisor = Supervisor(run)
    supervisor.run_dir.mkdir(parents=True)
    status = {"type": "status", "state": "running", "attempt": 1, "step": 0, "total_steps": 4, "gpus": 2}
    (supervisor.run_dir / "events.jsonl").write_text(json.dumps(status) + "\n")
    supervisor.ship()
    run.refresh_from_db()
    assert run.gpus == 2
    assert supervisor.run_dir == tmp_path / "runs" / f"run-{run.pk}"  # where delete looks too


def test_an_event_log_without_a_gpu_count_leaves_it_alone(owner, settings, tmp_path):
    settings.COHORT_RUNS_DIR = str(tmp_path / "runs")
    run = make_run(owner, state=Run.State.RUNNING, gpus=1)
    supervisor = Supervisor(run)
    supervisor.run_dir.mkdir(parents=True)
    (supervisor.run_dir / "events.jsonl").write_text(json.dumps({"type": "status", "state": "running", "attempt": 1}) + "\n")
    supervisor.ship()
    run.refresh_from_db()
    assert run.gpus == 1
