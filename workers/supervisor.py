"""The run supervisor: the Celery task's body, where the trainer meets the web app.

Training runs in a subprocess (`python -m trainer train`), never inside the forked Celery worker (no
CUDA or vLLM state in a fork). The trainer writes its event log first; the supervisor tails it,
ships new step events to the database with the idempotent ingest, then notifies the run's websocket
group. If the database is unreachable, shipping retries on the next tick from the same log offset,
so nothing is lost; the claim and the final state wait for the database the same way. A heartbeat
keeps the run from being reaped (an outage shorter than COHORT_HEARTBEAT_TIMEOUT_S minus
HEARTBEAT_EVERY_S goes unnoticed); a cancel request in the database becomes the trainer's STOP
file, checked at the next step boundary.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from trainer.run.cli import STOP_FILE
from webapp.datasets.export import ExportError
from webapp.limits.model_allowlist import trainer_environment
from webapp.runs.ingest.trainer_events import trainer_events_record
from webapp.runs.models import Run
from webapp.runs.services import run_directory, run_finish, run_heartbeat, run_training_config
from webapp.scheduling.services import (
    claim_next,
    wake_self_at_start,
    wake_worker_that_fits,
    worker_gpus,
    worker_report,
)

log = logging.getLogger(__name__)

TICK_S = 0.5
HEARTBEAT_EVERY_S = 5.0
DATABASE_RETRY_S = 1.0

T = TypeVar("T")


class EventTail:
    """Reads complete new lines of the event log from a byte offset (a torn last line waits)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def read_new(self) -> tuple[list[dict[str, Any]], int]:
        """(events, offset after them); the caller commits the offset once they are stored."""
        if not self.path.exists():
            return [], self.offset
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        events = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        return events, self.offset + end


def outage_errors() -> tuple[type[Exception], ...]:
    """What an unreachable database raises: Django's errors, and the driver's own where the ingest
    uses the driver directly (psycopg's COPY is not wrapped by Django)."""
    driver = connection.Database
    return OperationalError, InterfaceError, driver.OperationalError, driver.InterfaceError


def with_database(what: str, operation: Callable[[], T]) -> T:
    """`operation()` once the database answers: an outage delays a write that must happen (the
    claim, the final state), it does not fail the task and leave the run stuck in its old state."""
    while True:
        try:
            close_old_connections()
            return operation()
        except outage_errors():
            log.warning("database unavailable while %s; retrying in %.0f s", what, DATABASE_RETRY_S, exc_info=True)
            time.sleep(DATABASE_RETRY_S)


class Supervisor:
    def __init__(self, run: Run):
        self.run = run
        self.run_dir = run_directory(run.pk)
        self.tail = EventTail(self.run_dir / "events.jsonl")
        self.final_status: dict[str, Any] | None = None
        self.last_heartbeat = 0.0
        self.stderr_path = self.run_dir / f"attempt-{run.attempt}.log"

    def run_config(self) -> dict[str, Any]:
        return run_training_config(self.run, self.run_dir)

    def command(self) -> list[str]:
        config_path = self.run_dir / "config.json"
        config_path.write_text(json.dumps(self.run_config()))
        argv = [sys.executable, "-m", "trainer", "train", "--config", str(config_path), "--run-dir",
                str(self.run_dir), "--quiet", "--attempt", str(self.run.attempt)]
        if self.run.attempt > 1:
            argv.append("--resume")
        return argv

    @staticmethod
    def environment() -> dict[str, str]:
        """The trainer's environment: every hub download and the tiny model go to the shared cache."""
        return {**os.environ, **trainer_environment(), "COHORT_MODEL_CACHE": str(settings.COHORT_MODEL_CACHE),
                "PYTHONUNBUFFERED": "1"}

    def ship(self) -> bool:
        """Store new events; on a database error keep the offset and try again next tick. True when
        steps were stored."""
        events, offset = self.tail.read_new()
        if not events:
            return False
        try:
            close_old_connections()
            stored = trainer_events_record(self.run, events)
        except outage_errors():  # an outage; any other error is a bug and fails the run
            log.warning("database unavailable; run %s will catch up from its event log", self.run.pk, exc_info=True)
            return False
        self.tail.offset = offset
        for event in events:
            if event.get("type") == "status" and event.get("state") != "running":
                self.final_status = event
        return bool(stored)  # the ingest told the run's pages on its commit

    def heartbeat(self) -> str | None:
        try:
            close_old_connections()
            return run_heartbeat(self.run.pk)
        except outage_errors():
            return None

    def supervise(self) -> str:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / STOP_FILE).unlink(missing_ok=True)
        try:
            argv = with_database(f"exporting the data of run {self.run.pk}", self.command)
        except ExportError as exc:
            return self.finish_early(Run.State.FAILED, str(exc))
        with open(self.stderr_path, "ab") as err:
            process = subprocess.Popen(argv, stdout=err, stderr=err, stdin=subprocess.DEVNULL,
                                       start_new_session=True, env=self.environment())
        try:
            while process.poll() is None:
                self.tick()
                time.sleep(TICK_S)
        finally:
            if process.poll() is None:  # the Celery task itself is being stopped
                os.killpg(process.pid, signal.SIGTERM)
        # The database may still be away: keep shipping until the whole log is stored.
        while True:
            self.ship()
            events, offset = self.tail.read_new()
            if not events and offset == self.tail.offset:
                break
            self.heartbeat()
            time.sleep(1.0)
        return self.finish(process.returncode)

    def tick(self) -> None:
        stored = self.ship()
        # Right after a step is stored, too: its sweep's pruner may have just asked the run to stop
        # (webapp/sweeps, on steps_stored), and the trainer should stop at this step's boundary.
        if stored or time.monotonic() - self.last_heartbeat >= HEARTBEAT_EVERY_S:
            state = self.heartbeat()
            if state is not None:
                self.last_heartbeat = time.monotonic()
            if state == Run.State.CANCELLING:
                (self.run_dir / STOP_FILE).touch()

    def finish_early(self, state: str, error: str) -> str:
        """Ends a run that could not start training (its data is missing, for instance)."""
        with_database(f"recording run {self.run.pk} {state}", lambda: run_finish(self.run, state, error=error))
        return self.final_state()

    def finish(self, returncode: int) -> str:
        status = (self.final_status or {}).get("state")
        if status in ("succeeded", "cancelled"):
            state = status
            error = ""
        elif status == "suspended":  # checkpointed on request (a SUSPEND file, a signal): resumable
            state = Run.State.INTERRUPTED
            error = f"suspended at step {(self.final_status or {}).get('step')}; resume continues from its checkpoint"
        elif status is None and returncode < 0:
            # Killed by a signal (OOM killer, kill -9) before it could report: lost, not broken.
            state = Run.State.INTERRUPTED
            error = f"the training process was killed by signal {-returncode}; resume continues from its checkpoint"
        else:
            state = Run.State.FAILED
            error = (self.final_status or {}).get("error") or self._stderr_tail() or f"trainer exited with {returncode}"
        with_database(f"recording run {self.run.pk} {state}", lambda: run_finish(self.run, state, error=error))
        return self.final_state()

    def final_state(self) -> str:
        """The state the run ended in (its pages heard it from the state change itself)."""
        with_database(f"reading run {self.run.pk}", self.run.refresh_from_db)
        return self.run.state

    def _stderr_tail(self, limit: int = 4000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""


def supervise_next(worker_name: str) -> str:
    """Claims the fairest queued run this worker's GPU fits (a second delivery of a wake-up claims
    nothing) and trains it; when nothing fits, wakes a worker with a bigger GPU if one exists."""
    gpu_mem, gpu_count = with_database("reading this worker's GPUs", lambda: worker_gpus(worker_name))
    run = with_database("claiming the next queued run", lambda: claim_next(worker_name, gpu_mem, gpu_count))
    if run is None:
        with_database("waking a worker that fits", lambda: wake_worker_that_fits(worker_name, gpu_mem, gpu_count))
        return "not claimed"
    return Supervisor(run).supervise()


def worker_started(worker_name: str) -> int:
    """At a GPU worker's start: report it, then wake it once per queued run it fits."""
    worker = with_database("reporting this worker", lambda: worker_report(worker_name))
    return with_database("waking this worker",
                         lambda: wake_self_at_start(worker_name, worker.gpu_memory_gb, worker.gpu_count))
