"""Write-side operations on runs. Views, commands and tasks call these; each one is a named step
of the run state machine (`Run.TRANSITIONS`), applied with a compare-and-set UPDATE."""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from webapp.celery import app as celery_app
from webapp.projects.services import personal_project_ensure
from webapp.runs.ingest.trainer_events import run_discard_steps_after, run_record_gpus  # noqa: F401 (re-exported: the ingest is their home)
from webapp.runs.launch.check import Launch
from webapp.runs.launch.limits import limits_fail_run_over_budget
from webapp.runs.models import (
    Group,
    GroupMember,
    InvalidTransition,
    ModuleCall,
    Rollout,
    Run,
    StepMetric,
)

log = logging.getLogger(__name__)

TRAIN_TASK = "workers.tasks.run_train_task"


SLURM_TICK_TASK = "workers.tasks.slurm_tick_task"


def _enqueue_training(run: Run) -> None:
    # After commit: the worker must find the run row (and its new state) when the message arrives. A run
    # on a Slurm partition wakes the slurm queue's tick, which submits it (its beat would, a tick later).
    if run.on_slurm:
        # expires: with no slurm worker running, wake-ups must not pile up (the beat ticks anyway).
        transaction.on_commit(lambda: celery_app.send_task(SLURM_TICK_TASK, queue="slurm", expires=300))
    else:
        transaction.on_commit(lambda: celery_app.send_task(TRAIN_TASK, args=[run.pk], queue="gpu"))


def run_create(launch: Launch, *, name: str = "", tags: list[str] | None = None, notes: str = "") -> Run:
    """A queued run of a checked launch (`launch_check` in webapp/runs/launch/check.py makes the only
    Launch there is), in its project or its owner's personal one; training is enqueued after commit."""
    config = launch.config
    with transaction.atomic():
        project = launch.project or personal_project_ensure(launch.owner)
        run = Run.objects.create(owner=launch.owner, project=project, task=launch.task, name=name,
                                 config=config.to_dict(), total_steps=config.steps, state=Run.State.QUEUED,
                                 tags=list(tags or []), notes=notes, partition=launch.partition,
                                 time_limit_min=launch.time_limit_min)
        _enqueue_training(run)
    return run


def _refuse_external(run: Run, action: str) -> None:
    """Cancel and resume need Cohort's own worker; a run trained elsewhere is stopped or resumed there."""
    if run.is_external:
        raise InvalidTransition(f"run {run.pk} is trained by {run.origin_label} outside Cohort and only logged "
                                f"here: {action} it where it trains.")


def run_cancel(run: Run) -> Run:
    """Queued runs stop at once; running ones are asked to stop at the next step boundary."""
    _refuse_external(run, "stop")
    if run.state == Run.State.QUEUED and run.transition(Run.State.CANCELLED, finished_at=timezone.now()):
        return run
    if run.state == Run.State.RUNNING and run.transition(Run.State.CANCELLING):
        return run
    if run.state in (Run.State.INTERRUPTED,) and run.transition(Run.State.CANCELLED, finished_at=timezone.now()):
        return run
    raise InvalidTransition(f"a {run.state} run cannot be cancelled.")


def run_prune(run: Run, reason: str) -> bool:
    """Its sweep's pruner stops the run (webapp/sweeps): a queued one at once, a running one at the next
    step boundary, as a cancel does; either way it ends `pruned` with `reason`. False when the run had
    already ended (nothing to stop)."""
    reason = reason[:2000]
    if run.state == Run.State.QUEUED and run.transition(Run.State.PRUNED, pruned_reason=reason,
                                                        finished_at=timezone.now()):
        return True
    if run.state == Run.State.RUNNING and run.transition(Run.State.CANCELLING, pruned_reason=reason):
        return True
    if run.state == Run.State.CANCELLING:  # a cancel asked first: it still stops there, now as pruned
        return bool(Run.objects.filter(pk=run.pk, state=Run.State.CANCELLING).update(pruned_reason=reason))
    return False


def _stopped_state(run: Run) -> str:
    """What a run that stopped on request ends as: pruned when its sweep's pruner asked, else cancelled."""
    return Run.State.PRUNED if run.pruned_reason else Run.State.CANCELLED


def run_resume(run: Run) -> Run:
    """An interrupted or failed run continues from its newest checkpoint as attempt n+1."""
    _refuse_external(run, "resume")
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
    if limits_fail_run_over_budget(run):
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
    """running/cancelling -> succeeded | failed | cancelled (pruned, when its sweep's pruner stopped it)."""
    run.refresh_from_db()
    if run.state == Run.State.CANCELLING and state == Run.State.CANCELLED:
        state = _stopped_state(run)
    try:
        return run.transition(state, error=error[:10000], finished_at=timezone.now())
    except InvalidTransition:
        return False


def runs_reap_stale(*, timeout: dt.timedelta) -> list[int]:
    """Runs whose worker went silent: running -> interrupted (resumable), cancelling -> cancelled.
    Never a run trained elsewhere: no worker of ours beats for it (its heartbeat is its last post)."""
    cutoff = timezone.now() - timeout
    reaped = []
    # Nor a run on Slurm: Slurm says whether its job lives (webapp/scheduling/slurm), even while the job
    # cannot post (the server was away) or Slurm cannot answer.
    stale = Run.objects.filter(state__in=[Run.State.RUNNING, Run.State.CANCELLING], heartbeat_at__lt=cutoff,
                               origin=Run.ORIGIN_COHORT, partition="")
    for run in stale:
        target = Run.State.INTERRUPTED if run.state == Run.State.RUNNING else _stopped_state(run)
        if run.transition(target, error="the worker stopped answering (no heartbeat)", finished_at=timezone.now()):
            reaped.append(run.pk)
    return reaped


def run_directory(run_id: int, *, on_slurm: bool = False) -> Path:
    """Where the worker keeps a run's event log, exported data and checkpoints; a run on Slurm keeps them
    on the cluster's shared filesystem, where its job writes them."""
    root = settings.COHORT_SLURM_RUNS_DIR if on_slurm else settings.COHORT_RUNS_DIR
    return Path(root) / f"run-{run_id}"


def run_training_config(run: Run, run_dir: Path) -> dict:
    """The run's config with its task's data files, exported into `run_dir`. Exported once per run and
    reused by every attempt (on a worker or a Slurm job), so a resumed run continues over the very
    rows it started with even if the dataset was re-uploaded meanwhile."""
    from webapp.datasets.export import task_export

    record = run_dir / "data" / "export.json"
    if record.exists():
        files = json.loads(record.read_text())
    else:
        files = task_export(run.task, record.parent)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(files))
    return {**run.config, **{k: v for k, v in files.items() if v is not None}}


def run_update_details(run: Run, *, name: str, tags: list[str], notes: str) -> Run:
    """Name, tags and notes: the labels a user may change at any time, whatever the run's state."""
    Run.objects.filter(pk=run.pk).update(name=name, tags=list(tags), notes=notes)
    run.name, run.tags, run.notes = name, list(tags), notes
    return run


def run_move(run: Run, project) -> Run:
    """Moves the run, with its alert rules, to `project` (the caller checked that its owner and the
    mover are members there). Its experiment, if any, stays where it is: it links its runs by id."""
    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(project=project)
        run.alert_rules.update(project=project)
    run.project = project
    return run


def runs_set_archived(runs: Iterable[Run], archived: bool) -> int:
    """Archive (hide from the runs table by default) or unarchive runs; returns how many changed.
    Archiving keeps everything: an archived run opens, compares and exports as before."""
    ids = [r.pk for r in runs]
    if archived:
        return Run.objects.filter(pk__in=ids, archived_at__isnull=True).update(archived_at=timezone.now())
    return Run.objects.filter(pk__in=ids, archived_at__isnull=False).update(archived_at=None)


class RunsActive(Exception):
    """Deleting was refused: these runs are queued, running or cancelling."""

    def __init__(self, runs: list[Run]):
        self.runs = runs
        names = ", ".join(f"{r} ({r.state})" for r in runs)
        super().__init__(f"{names} {'is' if len(runs) == 1 else 'are'} still active: cancel first, then delete.")


def runs_delete(runs: Iterable[Run]) -> int:
    """Deletes finished runs with everything they recorded, then (after commit) their directories.

    Refuses the whole request with RunsActive when any run is queued, running or cancelling: its
    worker still writes to the run. A run trained elsewhere has no worker of ours and no Cancel, and
    its trainer may have died without finishing it, so it may be deleted running (a later post of
    its trainer answers 404, and the SDK keeps the steps in its folder). Returns how many runs were
    deleted.
    """
    ids = sorted({r.pk for r in runs})
    with transaction.atomic():
        locked = list(Run.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
        active = [r for r in locked if r.is_active and not r.is_external]
        if active:
            raise RunsActive(active)
        directories = [run_directory(r.pk, on_slurm=r.on_slurm) for r in locked] + [Path(r.checkpoint_dir) for r in locked if r.checkpoint_dir]
        _delete_recorded_rows(ids)
        deleted = Run.objects.filter(pk__in=ids).delete()[1].get(Run._meta.label, 0)
        transaction.on_commit(lambda: _remove_directories(directories))
    return deleted


def _delete_recorded_rows(run_ids: list[int]) -> None:
    """The bulk of a run (calls, members, rollouts): one DELETE per table, children first. Django's
    cascade would load every rollout and call into memory first (a long run holds millions)."""
    quote = connection.ops.quote_name
    groups = Group.objects.filter(run_id__in=run_ids).values("pk")
    rollouts = Rollout.objects.filter(run_id__in=run_ids).values("pk")
    calls = ModuleCall.objects.filter(rollout__run_id__in=run_ids).values("pk")
    steps = [
        (GroupMember, "group_id", groups), (GroupMember, "call_id", calls), (ModuleCall, "rollout_id", rollouts),
        (Group, "run_id", None), (StepMetric, "run_id", None),
    ]
    with connection.cursor() as cursor:
        for model, column, subquery in steps:
            if subquery is None:
                where, params = f"{quote(column)} IN ({', '.join(['%s'] * len(run_ids))})", list(run_ids)
            else:
                sql, params = subquery.query.sql_with_params()
                where = f"{quote(column)} IN ({sql})"
            cursor.execute(f"DELETE FROM {quote(model._meta.db_table)} WHERE {where}", params)
        # A fork's parent is a rollout of the same run: clear the links, then the rollouts go at once.
        table = quote(Rollout._meta.db_table)
        marks = ", ".join(["%s"] * len(run_ids))
        cursor.execute(f"UPDATE {table} SET {quote('parent_id')} = NULL WHERE {quote('run_id')} IN ({marks}) "
                       f"AND {quote('parent_id')} IS NOT NULL", list(run_ids))
        cursor.execute(f"DELETE FROM {table} WHERE {quote('run_id')} IN ({marks})", list(run_ids))


def _remove_directories(directories: list[Path]) -> None:
    """Removes run directories that lie inside COHORT_RUNS_DIR (never anything else); a missing one is fine."""
    roots = [Path(settings.COHORT_RUNS_DIR).resolve(), Path(settings.COHORT_SLURM_RUNS_DIR).resolve()]
    for directory in directories:
        path = directory.resolve()
        if not any(path != root and root in path.parents for root in roots):
            log.warning("not removing %s: it is outside the runs directories %s", path, roots)
            continue
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass
        except OSError:
            log.warning("could not remove run directory %s", path, exc_info=True)
