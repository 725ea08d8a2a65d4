"""Write-side operations on runs. Views, commands and tasks call these; each one is a named step
of the run state machine (`Run.TRANSITIONS`), applied with a compare-and-set UPDATE."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from trainer.config import RunConfig
from webapp.celery import app as celery_app
from webapp.runs.models import Group, InvalidTransition, Rollout, Run, StepMetric, Task

TRAIN_TASK = "workers.tasks.run_train_task"


def _enqueue_training(run: Run) -> None:
    # After commit: the worker must find the run row (and its new state) when the message arrives.
    transaction.on_commit(lambda: celery_app.send_task(TRAIN_TASK, args=[run.pk], queue="gpu"))


def run_create(*, owner, task: Task, config: RunConfig, name: str = "") -> Run:
    """A queued run of `task` with a validated config; training is enqueued after commit."""
    with transaction.atomic():
        run = Run.objects.create(owner=owner, task=task, name=name, config=config.to_dict(),
                                 total_steps=config.steps, state=Run.State.QUEUED)
        _enqueue_training(run)
    return run


def run_cancel(run: Run) -> Run:
    """Queued runs stop at once; running ones are asked to stop at the next step boundary."""
    if run.state == Run.State.QUEUED and run.transition(Run.State.CANCELLED, finished_at=timezone.now()):
        return run
    if run.state == Run.State.RUNNING and run.transition(Run.State.CANCELLING):
        return run
    if run.state in (Run.State.INTERRUPTED,) and run.transition(Run.State.CANCELLED, finished_at=timezone.now()):
        return run
    raise InvalidTransition(f"a {run.state} run cannot be cancelled.")


def run_resume(run: Run) -> Run:
    """An interrupted or failed run continues from its newest checkpoint as attempt n+1."""
    with transaction.atomic():
        if not run.transition(Run.State.QUEUED, attempt=run.attempt + 1, error="", finished_at=None):
            raise InvalidTransition("the run changed state meanwhile; reload and try again.")
        _enqueue_training(run)
    return run


def run_claim(run_id: int, *, worker: str) -> Run | None:
    """queued -> running for exactly one worker; None when another delivery claimed it first."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.state != Run.State.QUEUED:
        return None
    now = timezone.now()
    if not run.transition(Run.State.RUNNING, worker=worker, heartbeat_at=now, started_at=run.started_at or now):
        return None
    return run


def run_heartbeat(run_id: int, *, current_step: int | None = None) -> str:
    """Marks the run alive; returns its state (so the supervisor sees a cancel request)."""
    changes = {"heartbeat_at": timezone.now()}
    Run.objects.filter(pk=run_id, state__in=[Run.State.RUNNING, Run.State.CANCELLING]).update(**changes)
    return Run.objects.values_list("state", flat=True).get(pk=run_id)


def run_finish(run: Run, state: str, *, error: str = "") -> bool:
    """running/cancelling -> succeeded | failed | cancelled."""
    run.refresh_from_db()
    if run.state == Run.State.CANCELLING and state == Run.State.SUCCEEDED:
        state = Run.State.SUCCEEDED  # it finished before the cancel took effect
    try:
        return run.transition(state, error=error[:10000], finished_at=timezone.now())
    except InvalidTransition:
        return False


def runs_reap_stale(*, timeout: dt.timedelta) -> list[int]:
    """Runs whose worker went silent: running -> interrupted (resumable), cancelling -> cancelled."""
    cutoff = timezone.now() - timeout
    reaped = []
    for run in Run.objects.filter(state__in=[Run.State.RUNNING, Run.State.CANCELLING], heartbeat_at__lt=cutoff):
        target = Run.State.INTERRUPTED if run.state == Run.State.RUNNING else Run.State.CANCELLED
        if run.transition(target, error="the worker stopped answering (no heartbeat)", finished_at=timezone.now()):
            reaped.append(run.pk)
    return reaped


def run_discard_steps_after(run: Run, *, attempt: int, step: int) -> None:
    """A resumed attempt restarts after its checkpoint's `step`: what earlier attempts recorded past
    it is superseded, so the charts show every step once."""
    StepMetric.objects.filter(run=run, attempt__lt=attempt, step__gt=step).delete()
    Rollout.objects.filter(run=run, attempt__lt=attempt, step__gt=step).delete()
    Group.objects.filter(run=run, attempt__lt=attempt, step__gt=step).delete()
