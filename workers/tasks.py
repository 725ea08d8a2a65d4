"""Celery tasks: thin entry points that take ids and call services (DESIGN.md "How a run flows")."""

import datetime as dt
import os
import socket

from celery import shared_task
from django.conf import settings


@shared_task(name="workers.tasks.ping_task")
def ping_task() -> dict:
    """Answers with the worker's host and pid: proves a worker consumes the queue it was sent to."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


@shared_task(name="workers.tasks.run_train_task")
def run_train_task(run_id: int) -> str:
    """Claims and trains one run (on the `gpu` queue); a second delivery claims nothing."""
    from workers.supervisor import supervise_run

    return supervise_run(run_id)


@shared_task(name="workers.tasks.reap_stale_runs_task")
def reap_stale_runs_task() -> list[int]:
    """Marks runs whose worker stopped sending heartbeats `interrupted` (resumable)."""
    from webapp.runs.services import runs_reap_stale

    return runs_reap_stale(timeout=dt.timedelta(seconds=settings.COHORT_HEARTBEAT_TIMEOUT_S))


@shared_task(name="workers.tasks.import_dataset_task")
def import_dataset_task(dataset_id: int, staged_path: str, options: dict) -> dict:
    """Validates and imports an uploaded dataset (default queue); its page shows the progress."""
    from webapp.datasets.services import dataset_import_staged

    return dataset_import_staged(dataset_id, staged_path, options)
