"""Plays a worker for sweep tests that need no training: claims a sweep's queued runs and stores the
steps a test function of the run's config says, through the real ingest (so the pruner hears them)."""

from __future__ import annotations

from collections.abc import Callable

from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run
from webapp.runs.services import run_claim, run_finish


def store_steps(run: Run, values: dict[int, float], key: str = "reward/mean") -> None:
    step_events_ingest(run, [{"type": "step", "attempt": run.attempt, "step": step, "metrics": {key: value}}
                             for step, value in sorted(values.items())])


def train_queued(sweep, curve: Callable[[dict, int], float | None], *, key: str = "reward/mean",
                 stop_when_asked: bool = True) -> list[Run]:
    """Claims and trains every queued run of `sweep` step by step (curve(config, step) -> the metric, or
    None to store nothing); a run asked to stop (pruned or cancelled) stops at that boundary, as the
    trainer does. Returns the runs it trained."""
    trained = []
    for queued in Run.objects.filter(sweep_member__trial__sweep=sweep, state=Run.State.QUEUED).order_by("pk"):
        run = run_claim(queued.pk, worker="sim@test")
        if run is None:
            continue
        for step in range(1, run.total_steps + 1):
            value = curve(run.config, step)
            if value is not None:
                store_steps(run, {step: value}, key)
            run.refresh_from_db()
            if stop_when_asked and run.state == Run.State.CANCELLING:
                run_finish(run, Run.State.CANCELLED)
                break
        else:
            run_finish(run, Run.State.SUCCEEDED)
        trained.append(run)
    return trained
