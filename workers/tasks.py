"""Celery tasks: thin entry points that take ids and call services (docs/explanation/architecture.md "How a run flows")."""

import datetime as dt
import logging
import os
import socket

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

# Django-free (plain HTTP), so the retry policy below can name it when the worker loads this module.
from webapp.alerts.webhook import WebhookTemporaryError


@shared_task(name="workers.tasks.ping_task")
def ping_task() -> dict:
    """Answers with the worker's host and pid: proves a worker consumes the queue it was sent to."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


@shared_task(name="workers.tasks.run_train_task", bind=True)
def run_train_task(self, run_id: int | None = None) -> str:
    """A wake-up on the `gpu` queue (or this worker's own): claims the fairest queued run this
    worker's GPU fits, which need not be `run_id` (the queue's order lives in the database), and
    trains it. Every launch and resume sends one, so there are never fewer wake-ups than runs."""
    from workers.supervisor import supervise_next

    return supervise_next(self.request.hostname)


@shared_task(name="workers.tasks.replay_module_task")
def replay_module_task(replay_id: int) -> str:
    """A replay of one module (the inspector's *Replay this module*), on the `gpu` queue like runs, so it
    waits for a free worker as a run does: claims it and samples it in a subprocess (workers/replay.py)."""
    from workers.replay import replay_execute

    return replay_execute(replay_id)


@worker_ready.connect
def report_gpu_worker(sender, **kwargs) -> None:
    """A worker consuming the `gpu` queue tells the database its host, GPU and devices (the queue
    page shows them; claims compare the GPU memory with a run's minimum), then wakes itself for
    the queued runs it fits."""
    queues = set(sender.app.amqp.queues.consume_from or {})
    if "gpu" not in queues:
        return
    from workers.supervisor import worker_started

    try:
        worker_started(sender.hostname)
    except Exception:  # a worker that cannot report still trains what it is sent
        logging.getLogger(__name__).exception("reporting worker %s failed", sender.hostname)


@shared_task(name="workers.tasks.reap_stale_runs_task")
def reap_stale_runs_task() -> list[int]:
    """Marks runs whose worker stopped sending heartbeats `interrupted` (resumable), and runs trained
    elsewhere whose trainer stopped posting `lost`; their ids. Then every running sweep takes a step."""
    from webapp.alerts.services import check_stalled
    from webapp.runs.ingest.lost import external_runs_mark_lost
    from webapp.runs.services import runs_reap_stale
    from webapp.sweeps.services import sweeps_advance_running

    try:
        check_stalled()  # first: a `stalled` alert tells of a silent worker before the reaper acts
    except Exception:  # alerts must never keep the reaper from its job
        logging.getLogger(__name__).exception("checking stalled-run alerts failed")
    reaped = runs_reap_stale(timeout=dt.timedelta(seconds=settings.COHORT_HEARTBEAT_TIMEOUT_S))
    reaped += external_runs_mark_lost(stale_after=dt.timedelta(seconds=settings.COHORT_EXTERNAL_STALE_AFTER))
    try:  # after the reaping: a trial whose run was just given up on settles now
        sweeps_advance_running()
    except Exception:  # sweeps must never keep the reaper from its job
        logging.getLogger(__name__).exception("advancing sweeps failed")
    return reaped


@shared_task(name="workers.tasks.import_dataset_task")
def import_dataset_task(dataset_id: int, staged_path: str, options: dict) -> dict:
    """Validates and imports an uploaded dataset (default queue); its page shows the progress."""
    from webapp.datasets.services import dataset_import_staged

    return dataset_import_staged(dataset_id, staged_path, options)


@shared_task(name="workers.tasks.alert_email_task")
def alert_email_task(alert_id: int) -> str:
    """Emails a fired alert to its rule's owner, here rather than in the process whose ingest fired
    it: a mail server that hangs delays this task, never a step (webapp/alerts/delivery.py)."""
    from webapp.alerts.delivery import alert_email_send

    return alert_email_send(alert_id)


@shared_task(name="workers.tasks.alert_webhook_task", bind=True, autoretry_for=(WebhookTemporaryError,),
             retry_backoff=True, retry_backoff_max=300, retry_jitter=True, max_retries=5)
def alert_webhook_task(self, alert_id: int) -> str:
    """POSTs an alert to its rule's webhook; unreachable, slow or 5xx answers are retried with
    backoff (at most 5 times), a 4xx never (webapp/alerts/delivery.py records each try)."""
    from webapp.alerts.delivery import alert_webhook_attempt

    return alert_webhook_attempt(alert_id, last_try=self.request.retries >= self.max_retries)


@shared_task(name="workers.tasks.slurm_tick_task")
def slurm_tick_task() -> dict:
    """The slurm queue (one worker on the cluster's login node, beside Slurm's client tools): submits the
    runs placed on a partition, follows their jobs and cancels them (webapp/scheduling/slurm/services.py).
    Woken by each launch onto a partition and by the beat every COHORT_SLURM_POLL_S seconds."""
    from webapp.scheduling.slurm.services import slurm_tick

    return slurm_tick()
