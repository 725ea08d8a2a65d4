"""How the training loop tells the world what happened, without knowing who listens.

The loop calls a `Reporter`; the CLI uses `JsonlReporter` (an append-only event log) and the
Celery worker wraps that same log and ships it to the database. Every event is one JSON line with a
`type`, shaped as the step-event contract types it (trainer/run/events.py: `StatusEvent`, `StepEvent`
and what a step holds); step events are keyed by (attempt, step) so re-reading a log is idempotent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from trainer.rollouts.trajectory import jsonable
from trainer.run.events import StepEvent


class Reporter(Protocol):
    def status(self, state: str, **info: Any) -> None:
        """The run's life cycle: 'running', 'succeeded', 'failed', 'cancelled' (with a message)."""

    def step(self, event: StepEvent) -> None:
        """One finished training step: {"attempt", "step", "metrics", "rollouts", "groups", "spans"} (its `type`
        is the reporter's to add)."""

    def should_stop(self) -> bool:
        """Cooperative cancellation, checked at step boundaries."""

    def prompts(self, event: dict[str, Any]) -> None:
        """Phase 1 of a run that optimizes prompts first: {"event": "started" | "trial" | "chosen", ...}."""


class JsonlReporter:
    """Appends events to a JSONL file, flushed and fsynced per event (the log is the source the
    database is filled from, so an event must be on disk before anyone is told about it)."""

    def __init__(self, path: str | Path, *, stop_file: str | Path | None = None, progress_total: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stop_file = Path(stop_file) if stop_file else None
        self.progress = tqdm(total=progress_total, unit="step", dynamic_ncols=True) if progress_total else None

    def _write(self, event: dict[str, Any]) -> None:
        line = json.dumps(jsonable(event), ensure_ascii=False, allow_nan=False)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def status(self, state: str, **info: Any) -> None:
        self._write({"type": "status", "state": state, **info})
        if self.progress is not None and state != "running":
            self.progress.close()

    def step(self, event: StepEvent) -> None:
        self._write({"type": "step", **event})
        if self.progress is not None:
            metrics = event["metrics"]
            self.progress.n = event["step"]
            self.progress.set_postfix(reward=f"{metrics.get('reward/mean', float('nan')):.3f}",
                                      loss=f"{metrics.get('loss', float('nan')):.4f}")
            self.progress.refresh()

    def should_stop(self) -> bool:
        return bool(self.stop_file and self.stop_file.exists())

    def prompts(self, event: dict[str, Any]) -> None:
        self._write({"type": "prompts", **event})


class SilentReporter:
    """The reporter of a rank other than 0 in a many-process run: rank 0 reports for the run, and its
    stop decision reaches the other ranks through the process group (trainer.policy.distributed.decide)."""

    def status(self, state: str, **info: Any) -> None:
        pass

    def step(self, event: dict[str, Any]) -> None:
        pass

    def should_stop(self) -> bool:
        return False

    def prompts(self, event: dict[str, Any]) -> None:
        pass


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Every complete event of a log (a torn last line, from a crash mid-write, is skipped)."""
    events = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events
