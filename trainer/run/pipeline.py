"""The pipeline's metrics: how sampling and training share each step's time, and how stale the
trained batch was.

Every run reports them, so the run page's Pipeline section answers "do generation and training
overlap?" for any run. In the synchronous loop (`max_staleness = 0`) they do not:
the trainer waits while the batch is sampled and the sampler waits while the trainer scores, updates
and hands over the adapter, so the two wait shares add up to the whole step, the batch is always
sampled by the weights being trained (staleness 0) and no batch waits in a queue or is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class StepTimes:
    """Wall-clock seconds of one synchronous step, measured on the trainer's process."""

    step_s: float  # the whole step: sampling, scoring, the update, the adapter hand-over, metrics
    sampling_s: float  # from the step's start until the whole batch was sampled and scored
    adapter_sync_s: float = 0.0  # saving the adapter and loading it into a sampler with its own weights


def sync_pipeline_metrics(times: StepTimes, *, sampled_by: Iterable[int | None] = (),
                          trainer_version: int = 0) -> dict[str, float]:
    """`pipeline/...` of a synchronous step whose batch was sampled by the policy versions `sampled_by`
    (each rollout's `policy_version`) and trains as update `trainer_version` (the updates the weights
    had before it).

    A batch sampled by version v and trained at update t is t - v versions stale (the off-policy lag
    of asynchronous RL, AReaL's and TRL's `max_staleness`); the synchronous loop samples with the very
    weights it then trains, so every rollout it records is 0 behind.

    trainer_wait_share = sampling_s / step_s: the trainer has nothing to train until the batch is
    sampled. sampler_wait_share = (step_s - sampling_s) / step_s: the sampler has nothing to do
    until the next step's adapter is in place. A step too short to time (0 s) waited for nothing.
    """
    step_s = max(times.step_s, 0.0)
    sampling_s = min(max(times.sampling_s, 0.0), step_s)
    trainer_wait = sampling_s / step_s if step_s > 0 else 0.0
    lags = [trainer_version - v for v in sampled_by if v is not None]
    return {
        "pipeline/staleness/mean": sum(lags) / len(lags) if lags else 0.0,
        "pipeline/staleness/max": float(max(lags)) if lags else 0.0,
        "pipeline/dropped_stale": 0.0,
        "pipeline/queue_depth": 0.0,
        "pipeline/trainer_wait_share": trainer_wait,
        "pipeline/sampler_wait_share": (1.0 - trainer_wait) if step_s > 0 else 0.0,
        "pipeline/adapter_sync_s": max(times.adapter_sync_s, 0.0),
    }


def async_pipeline_metrics(*, step_s: float, trainer_wait_s: float, sampler_busy_s: float, staleness: int,
                           dropped: int, dropped_in_flight: int, queue_depth: int,
                           adapter_sync_s: float) -> dict[str, float]:
    """`pipeline/...` of a step of the asynchronous pipeline (`max_staleness >= 1`).

    trainer_wait_share = the time the trainer waited for its batch / step_s; sampler_wait_share = the
    time within the step the sampler generated nothing / step_s. With the two overlapping, both can be
    near 0; their sum is the idle share of the two processes together (1 in the synchronous loop).
    staleness: t - v of the trained batch (one policy version samples a whole batch, so its mean and
    its max are the same); queue_depth: the batches left in the sampler's hands when the update started.
    """
    step_s = max(step_s, 0.0)
    share = (lambda seconds: min(max(seconds, 0.0) / step_s, 1.0)) if step_s > 0 else (lambda _: 0.0)
    return {
        "pipeline/staleness/mean": float(staleness),
        "pipeline/staleness/max": float(staleness),
        "pipeline/dropped_stale": float(dropped),
        "pipeline/dropped_in_flight": float(dropped_in_flight),
        "pipeline/queue_depth": float(queue_depth),
        "pipeline/trainer_wait_share": share(trainer_wait_s),
        "pipeline/sampler_wait_share": 1.0 - share(sampler_busy_s) if step_s > 0 else 0.0,
        "pipeline/adapter_sync_s": max(adapter_sync_s, 0.0),
    }


class StepSpans:
    """The step's timeline as the trainer's process lived it: a bar per span on its lane (the sampler,
    the trainer, the adapter hand-over), in seconds since the epoch so that lanes of other processes
    line up with these. `add` records one the caller timed; `events()` is the step event's `spans`."""

    def __init__(self) -> None:
        self._spans: list[dict] = []

    def add(self, lane: str, name: str, start: float, end: float, **extra) -> None:
        self._spans.append({"lane": lane, "name": name, "start": start, "end": end, **extra})

    def events(self) -> list[dict]:
        return list(self._spans)
