"""One moment a trainer's events are stored, whoever read them from its event log: the supervisor on
this server's worker (workers/supervisor.py) and a Slurm job posting them over HTTP
(webapp/scheduling/slurm/views.py) hand the same lines here.

A `running` status starts an attempt: what earlier attempts recorded after its checkpoint's step is
superseded (every step is stored once) and the GPUs it trains on are noted. Step events go through the
idempotent ingest, so a batch sent twice stores nothing twice; phase 1's prompt events are folded into
the run's record and its pages are told.
"""

from __future__ import annotations

import time
from typing import Any

from webapp.runs.charts.blocks import blocks_discard_after
from webapp.runs.ingest.prompt_phase import run_record_prompt_events
from webapp.runs.ingest.retention import storage_recount
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.live.notices import notice_send
from webapp.runs.models import CallText, Group, Rollout, Run, StepMetric


def with_ingest_span(event: dict[str, Any], read_at: float) -> dict[str, Any]:
    """The step event with the ingest's bar on the timeline: from the trainer's last bar of the step
    (the step is done and written to the event log) to the moment it was read to be stored. A step
    without bars keeps none (its run draws no timeline)."""
    spans = event.get("spans") or []
    ends = [span["end"] for span in spans if isinstance(span, dict) and isinstance(span.get("end"), int | float)]
    if not ends or max(ends) > read_at:
        return event
    ingest = {"lane": "ingest", "name": f"step {event.get('step')} read from the event log to be stored",
              "start": max(ends), "end": read_at}
    return {**event, "spans": [*spans, ingest]}


def run_discard_steps_after(run: Run, *, attempt: int, step: int) -> None:
    """A resumed attempt restarts after its checkpoint's `step`: what earlier attempts recorded past
    it is superseded, so the charts show every step once."""
    StepMetric.objects.filter(run=run, attempt__lt=attempt, step__gt=step).delete()
    blocks_discard_after(run.pk, step)
    Rollout.objects.filter(run=run, attempt__lt=attempt, step__gt=step).delete()
    Group.objects.filter(run=run, attempt__lt=attempt, step__gt=step).delete()
    CallText.objects.filter(run=run, attempt__lt=attempt, step__gt=step).delete()
    storage_recount(run)


def run_record_gpus(run_id: int, gpus: int) -> None:
    """The GPUs the trainer reported when it started an attempt (its `running` status event)."""
    Run.objects.filter(pk=run_id).update(gpus=max(0, min(int(gpus), 32767)))


def trainer_events_record(run: Run, events: list[dict[str, Any]], *, read_at: float | None = None) -> list[StepMetric]:
    """Stores `events` (event-log lines, in order) for `run`; the steps stored now. Database errors
    propagate: the caller keeps its place in the log and sends the same lines again."""
    read_at = time.time() if read_at is None else read_at
    # A batch that holds a later attempt's start (a whole log read again) drops the earlier attempts' steps
    # that start superseded: what they recorded after its checkpoint is stored once, by the later attempt.
    resumed = [(int(e["attempt"]), int(e.get("step", 0))) for e in events
               if e.get("type") == "status" and e.get("state") == "running"]
    events = [e for e in events if e.get("type") != "step"
              or not any(int(e.get("attempt", 1)) < attempt and int(e.get("step", 0)) > step for attempt, step in resumed)]
    for event in events:
        if event.get("type") == "status" and event.get("state") == "running":
            run_discard_steps_after(run, attempt=int(event["attempt"]), step=int(event.get("step", 0)))
            if "gpus" in event:  # what this attempt trains on (0: a CPU)
                run_record_gpus(run.pk, int(event["gpus"]))
    prompts = run_record_prompt_events(run.pk, [e for e in events if e.get("type") == "prompts"])
    stored = step_events_ingest(run, [with_ingest_span(e, read_at) for e in events if e.get("type") == "step"])
    if prompts is not None:  # phase 1's progress: the page redraws its trials and chosen prompts
        notice_send(run.pk, {"type": "prompts", "run": run.pk, **prompts})
    return stored
