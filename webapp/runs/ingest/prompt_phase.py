"""Phase 1 of a run that optimizes prompts first, as the dashboard keeps it: the trainer's `prompts`
events (trainer/dspy/prompt_phase.py) folded into `Run.prompt_optimization`, which the run page
draws (the phase, a chart of every trial's score, the chosen instructions and demos per module).

    {"optimizer": "mipro_light", "model": "...", "phase": "prompts" | "weights", "attempt": 1,
     "trials": [{"trial": 1, "score": 40.0}, ...], "modules": {"query": {"instructions": "...", "demos": [...]}}}

A search that starts again (a run killed during phase 1 and resumed) replaces the trials of the one
it repeats; a run resumed after phase 1 sends nothing, its record stays as it was.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from webapp.runs.models import Run

MAX_TRIALS = 1000  # a stored record stays small whatever the budget


def fold_prompt_events(record: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    """The record after `events` (pure: the tests and the ingest share it)."""
    record = {**record, "trials": list(record.get("trials") or [])}
    for event in events:
        kind = event.get("event")
        if kind == "started":
            record.update(optimizer=event.get("optimizer"), model=event.get("model"), phase="prompts",
                          attempt=event.get("attempt"), trials=[], modules={})
        elif kind == "trial" and len(record["trials"]) < MAX_TRIALS:
            trial = int(event["trial"])
            if all(t["trial"] != trial for t in record["trials"]):  # a log shipped again adds nothing
                record["trials"].append({"trial": trial, "score": float(event["score"])})
        elif kind == "chosen":
            record.update(phase="weights", modules=event.get("modules") or {})
    return record


def run_record_prompt_events(run_id: int, events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Folds the events into the run's record (row-locked: one writer per run, but a re-shipped log must
    not race a page's read); returns the new record, None when there was nothing to fold."""
    if not events:
        return None
    with transaction.atomic():
        run = Run.objects.select_for_update().only("pk", "prompt_optimization").get(pk=run_id)
        record = fold_prompt_events(run.prompt_optimization or {}, events)
        Run.objects.filter(pk=run_id).update(prompt_optimization=record)
    return record
