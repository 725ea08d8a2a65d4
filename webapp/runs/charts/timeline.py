"""A run's timeline (trainer/run/pipeline.py `StepSpans`): the bars each process drew during its steps,
read for a window of steps, thinned to evenly spaced steps when the window holds more than a page
draws, as the charts are thinned."""

from __future__ import annotations

from typing import Any

from webapp.runs.models import Run, StepMetric

TIMELINE_STEPS = 50  # the newest steps shown when no window is asked for
MAX_TIMELINE_STEPS = 200  # steps drawn at most: a wider window shows evenly spaced ones
LANE_ORDER = ("sampler", "trainer", "adapter", "ingest")


def run_timeline(run: Run, *, from_step: int | None = None, to_step: int | None = None,
                 most_steps: int = MAX_TIMELINE_STEPS) -> dict[str, Any]:
    """The spans of the window's steps (inclusive; none given: the newest TIMELINE_STEPS), each with
    its step; `every` is 1 when every step of the window is drawn, k when every k-th is."""
    stored = StepMetric.objects.filter(run=run)
    if from_step is None and to_step is None:
        newest = list(stored.order_by("-step").values_list("step", flat=True).distinct()[:TIMELINE_STEPS])
        window = sorted(newest)
    else:
        if from_step is not None:
            stored = stored.filter(step__gte=from_step)
        if to_step is not None:
            stored = stored.filter(step__lte=to_step)
        window = sorted(set(stored.values_list("step", flat=True)))
    every = max(1, -(-len(window) // most_steps))  # ceil: at most `most_steps` steps drawn
    chosen = window[::every]
    newest_attempt: dict[int, tuple[int, list]] = {}
    for step, attempt, spans in (StepMetric.objects.filter(run=run, step__in=chosen)
                                 .values_list("step", "attempt", "spans")):
        if step not in newest_attempt or attempt > newest_attempt[step][0]:
            newest_attempt[step] = (attempt, spans or [])
    bars = [{**span, "step": step} for step in chosen for span in newest_attempt.get(step, (0, []))[1]]
    lanes = sorted({bar["lane"] for bar in bars},
                   key=lambda lane: (LANE_ORDER.index(lane) if lane in LANE_ORDER else len(LANE_ORDER), lane))
    return {
        "run": run.pk, "steps": [chosen[0], chosen[-1]] if chosen else None, "every": every,
        "window_steps": len(window), "lanes": lanes, "spans": bars,
    }
