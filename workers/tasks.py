"""Celery tasks: thin entry points that take ids and call services (DESIGN.md "How a run flows")."""

import datetime as dt
import logging
import os
import socket

from celery import shared_task
from django.conf import settings

# Django-free (plain HTTP), so the retry policy below can name it when the worker loads this module.
from webapp.alerts.webhook import WebhookTemporaryError


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
    from webapp.alerts.services import check_stalled
    from webapp.runs.services import runs_reap_stale

    try:
        check_stalled()  # first: a `stalled` alert tells of a silent worker before the reaper acts
    except Exception:  # alerts must never keep the reaper from its job
        logging.getLogger(__name__).exception("checking stalled-run alerts failed")
    return runs_reap_stale(timeout=dt.timedelta(seconds=settings.COHORT_HEARTBEAT_TIMEOUT_S))


@shared_task(name="workers.tasks.import_dataset_task")
def import_dataset_task(dataset_id: int, staged_path: str, options: dict) -> dict:
    """Validates and imports an uploaded dataset (default queue); its page shows the progress."""
    from webapp.datasets.services import dataset_import_staged

    return dataset_import_staged(dataset_id, staged_path, options)


@shared_task(name="workers.tasks.alert_webhook_task", bind=True, autoretry_for=(WebhookTemporaryError,),
             retry_backoff=True, retry_backoff_max=300, retry_jitter=True, max_retries=5)
def alert_webhook_task(self, alert_id: int) -> str:
    """POSTs an alert to its rule's webhook; unreachable, slow or 5xx answers are retried with
    backoff (at most 5 times), a 4xx never (webapp/alerts/delivery.py records each try)."""
    from webapp.alerts.delivery import alert_webhook_attempt

    return alert_webhook_attempt(alert_id, last_try=self.request.retries >= self.max_retries)
