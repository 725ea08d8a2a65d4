"""Running a sweep: queue its first configurations, settle each trial when its runs end, queue the next
ones Optuna proposes, and stop a trial its pruner gives up on.

Every step is driven by an event with the sweep row locked, in whichever process the event happens:
the sweep's creation, a run of it reaching a final state (`run_state_changed`), a run storing steps
(`steps_stored`: the pruner), and the periodic reaper (a safety net after a crash between a run's end
and the sweep's step). Trials are queued through `run_create`, so they wait in the fair queue like any
run and count against the owner's launch limits; a refused launch leaves the sweep waiting, not failed.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from webapp.projects.services import personal_project_ensure
from webapp.runs.launch.check import Launch, LaunchRefused, launch_check
from webapp.runs.models import Run
from webapp.runs.services import run_cancel, run_create, run_prune
from webapp.sweeps.messages import sweep_notice_after_commit
from webapp.sweeps.models import Sweep, Trial, TrialRun
from webapp.sweeps.objective import (
    default_objective,
    metric_series,
    run_value,
    seed_series,
    trial_intermediate,
)
from webapp.sweeps.plan import SweepSpec, room_for_runs, sweep_plan
from webapp.sweeps.space import space_json
from webapp.sweeps.study import propose, prune_verdict

log = logging.getLogger(__name__)

FINAL_RUN_STATES = frozenset({Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED, Run.State.PRUNED})
GIVEN_UP = "the worker was lost mid-trial: a sweep's trial is not resumed, the sweep goes on"


def sweep_create(base: Launch, *, spec: SweepSpec, name: str = "", tags: Sequence[str] = (), notes: str = "") -> Sweep:
    """Checks the whole sweep (sweep_plan) over its checked base launch, then creates it and queues its
    first configurations, all in one transaction: a refused sweep leaves nothing behind. `tags` and
    `notes` go on every run."""
    owner, config = base.owner, base.config
    dimensions, n_trials = sweep_plan(owner, config, spec)
    with transaction.atomic():
        sweep = Sweep.objects.create(
            owner=owner, project=base.project or personal_project_ensure(owner), task=base.task, name=name,
            config=config.to_dict(),
            space=space_json(dimensions), method=spec.method, seeds=spec.seeds, n_trials=n_trials,
            parallel=spec.parallel, objective=spec.objective or default_objective(config.to_dict()), mode=spec.mode,
            direction=spec.direction, pruner=spec.pruner, sampler_seed=spec.sampler_seed, options=dict(spec.options),
            run_tags=list(tags), run_notes=notes, partition=base.partition, time_limit_min=base.time_limit_min)
        sweep_advance(sweep.pk)
    return sweep


def sweep_advance(sweep_id: int) -> Sweep | None:
    """Settles the trials whose runs all ended, then queues what Optuna proposes next until `parallel`
    configurations train at once or the budget is spent; finishes the sweep when nothing is left."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().select_related("owner", "task", "project").filter(pk=sweep_id).first()
        if sweep is None:
            return None
        trials = list(sweep.trials.prefetch_related("members__run"))
        for trial in trials:
            if trial.state == Trial.State.RUNNING:
                _settle(sweep, trial)
        sweep_notice_after_commit(sweep.pk)
        if sweep.state != Sweep.State.RUNNING:  # cancelled: its trials still settle, none starts
            return sweep
        running = sum(t.state == Trial.State.RUNNING for t in trials)
        waiting = ""
        while running < sweep.parallel and len(trials) < sweep.n_trials:
            trial, waiting = _start_trial(sweep, trials)
            if trial is None:
                break
            trials.append(trial)
            running += trial.state == Trial.State.RUNNING
        changes: dict[str, Any] = {"waiting": waiting}
        if running == 0 and (len(trials) >= sweep.n_trials):
            changes.update(state=Sweep.State.FINISHED, finished_at=timezone.now())
        Sweep.objects.filter(pk=sweep.pk).update(**changes)
        for name, value in changes.items():
            setattr(sweep, name, value)
    return sweep


def _start_trial(sweep: Sweep, trials: list[Trial]) -> tuple[Trial | None, str]:
    """Queues trial number len(trials), one run per seed; (None, why) when the launch limits refuse it
    now (Optuna proposes the same configuration when asked again). A configuration RunConfig refuses
    is a failed trial: the sweep goes on."""
    params, attrs = propose(sweep, trials)
    try:  # each seed's run through the launch check; the sweep's plan counts the runs (counts=False)
        launches = [launch_check(sweep.owner, task=sweep.task, program=sweep.config.get("program"), counts=False,
                                 project=sweep.project, partition=sweep.partition, time_limit=sweep.time_limit_min,
                                 values={**sweep.config, **params, "seed": seed}) for seed in sweep.seed_values]
    except LaunchRefused as refused:  # a configuration RunConfig or a per-run limit refuses: a failed trial
        trial = Trial.objects.create(sweep=sweep, number=len(trials), params=params, system_attrs=attrs,
                                     state=Trial.State.FAILED, finished_at=timezone.now(),
                                     reason=f"Refused at launch: {refused.reasons()}")
        return trial, ""
    room, usage = room_for_runs(sweep.owner)
    if room < len(launches):  # the owner's active or queued runs: room comes back as runs end
        return None, (f"Waiting for room under your launch limits for {len(launches)} more runs ({usage}).")
    trial = Trial.objects.create(sweep=sweep, number=len(trials), params=params, system_attrs=attrs)
    described = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    for seed, launch in zip(sweep.seed_values, launches, strict=True):
        run = run_create(launch, name=f"{sweep} · trial {trial.number} · {described} · seed {seed}"[:200],
                         tags=list(dict.fromkeys(["sweep", f"sweep-{sweep.pk}", *sweep.run_tags])),
                         notes=sweep.run_notes)
        TrialRun.objects.create(trial=trial, run=run, seed=seed)
    return trial, ""


def _settle(sweep: Sweep, trial: Trial) -> None:
    """Once every run of a running trial ended: its state and value (Trial.State), told to Optuna the
    next time the study is rebuilt."""
    runs = [m.run for m in trial.members.all()]
    if any(r.state not in FINAL_RUN_STATES for r in runs):
        return
    series = metric_series([r.pk for r in runs], sweep.objective)
    trial.intermediate = trial_intermediate([series.get(r.pk, {}) for r in runs]) or trial.intermediate
    trial.seed_series = seed_series({m.seed: m.run_id for m in trial.members.all()}, series) or trial.seed_series
    values = [v for r in runs if r.state == Run.State.SUCCEEDED
              and (v := run_value(series.get(r.pk, {}), sweep)) is not None]
    if trial.reason or any(r.state == Run.State.PRUNED for r in runs):
        # The pruner's verdict stands even where a run reached its end before the stop took effect.
        state, reason = Trial.State.PRUNED, trial.reason or next(r.pruned_reason for r in runs if r.pruned_reason)
    elif failed := [r for r in runs if r.state != Run.State.SUCCEEDED]:
        state, reason = Trial.State.FAILED, f"run {failed[0].pk} {failed[0].state}: {failed[0].error or 'no error given'}"[:2000]
    elif not values:
        state, reason = Trial.State.FAILED, (f"no objective: no run of this configuration stored {sweep.objective!r}; "
                                             "the sweep goes on")
    else:
        state, reason = Trial.State.COMPLETE, ""
    trial.state, trial.reason, trial.finished_at = state, reason, timezone.now()
    trial.value = statistics.fmean(values) if state == Trial.State.COMPLETE else None
    trial.save(update_fields=["state", "reason", "finished_at", "value", "intermediate", "seed_series"])


def sweep_steps_stored(run: Run, rows: Sequence) -> str | None:
    """After a run of a sweep stored steps: its trial's intermediate values, and the pruner's verdict.
    A pruned trial's runs stop at their next step boundary (queued ones at once). Returns the reason
    when it pruned."""
    member = TrialRun.objects.filter(run_id=run.pk).select_related("trial").first()
    if member is None:
        return None
    newest = max((row.step for row in rows), default=0)
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(pk=member.trial.sweep_id).first()
        trial = Trial.objects.filter(pk=member.trial_id).first()
        # In this transaction, with the verdict: whoever sees the step judged sees the run stopped.
        TrialRun.objects.filter(pk=member.pk, judged_step__lt=newest).update(judged_step=newest)
        if sweep is None or trial is None or trial.state != Trial.State.RUNNING:
            return None
        members = dict(TrialRun.objects.filter(trial=trial).values_list("seed", "run_id"))
        runs = list(Run.objects.filter(pk__in=members.values()))
        series = metric_series(members.values(), sweep.objective)
        by_seed = seed_series(members, series)
        if by_seed == trial.seed_series or not by_seed:
            return None
        trial.seed_series = by_seed
        trial.intermediate = trial_intermediate([series.get(r.pk, {}) for r in runs])
        reason, attrs = (None, trial.system_attrs)
        if sweep.pruner != Sweep.Pruner.NONE and sweep.state == Sweep.State.RUNNING:
            reason, attrs = prune_verdict(sweep, list(sweep.trials.exclude(pk=trial.pk)) + [trial], trial)
        trial.system_attrs = attrs
        fields = ["intermediate", "seed_series", "system_attrs"]
        if reason:
            trial.reason = reason
            fields.append("reason")
            for run_row in runs:
                run_prune(run_row, reason)
        trial.save(update_fields=fields)
        sweep_notice_after_commit(sweep.pk)
    return reason


def run_ended(run: Run) -> None:
    """A run of a sweep reached a final state (or was interrupted: a sweep gives that run up as failed,
    which ends it): the sweep takes its next step."""
    member = TrialRun.objects.filter(run_id=run.pk).values_list("trial__sweep_id", flat=True).first()
    if member is None:
        return
    if run.state == Run.State.INTERRUPTED:
        run.transition(Run.State.FAILED, error=f"{run.error}; {GIVEN_UP}"[:10000])  # its own signal advances the sweep
        return
    if run.state in (Run.State.FAILED, Run.State.CANCELLED):  # its configuration failed: stop the other seeds
        for sibling in Run.objects.filter(sweep_member__trial__members__run=run, state__in=[Run.State.QUEUED, Run.State.RUNNING]):
            run_cancel(sibling)
    if run.state in FINAL_RUN_STATES:
        sweep_advance(member)


def sweep_cancel(sweep: Sweep) -> int:
    """Stops the sweep: no further trial, and its queued and running runs are cancelled. How many runs
    it asked to stop."""
    with transaction.atomic():
        if not Sweep.objects.filter(pk=sweep.pk, state=Sweep.State.RUNNING).update(
                state=Sweep.State.CANCELLED, finished_at=timezone.now(), waiting=""):
            return 0
        sweep_notice_after_commit(sweep.pk)
        runs = Run.objects.filter(sweep_member__trial__sweep=sweep, state__in=[Run.State.QUEUED, Run.State.RUNNING])
        stopped = 0
        for run in runs:
            run_cancel(run)
            stopped += 1
    sweep.refresh_from_db()
    return stopped


def sweeps_advance_running() -> list[int]:
    """Every running sweep takes a step (the reaper's safety net); the ids of those that did."""
    advanced = []
    for sweep_id in Sweep.objects.filter(state=Sweep.State.RUNNING).values_list("pk", flat=True):
        try:
            sweep_advance(sweep_id)
            advanced.append(sweep_id)
        except Exception:  # one sweep's trouble never stops the others (nor the reaper)
            log.exception("advancing sweep %s failed", sweep_id)
    return advanced


def sweep_best(trials: Sequence[Trial], direction: str) -> Trial | None:
    complete = [t for t in trials if t.state == Trial.State.COMPLETE and t.value is not None and math.isfinite(t.value)]
    if not complete:
        return None
    return (max if direction == Sweep.Direction.MAXIMIZE else min)(complete, key=lambda t: t.value)


