"""The timeline of a TRL run from TRL's own timers (issue 55): `trl.extras.profiling.ProfilingContext`
times generation (`transformers.generate`, `vLLM.generate`), the weight sync to vLLM (`sync_weights`),
the reward functions and the log-prob passes (`_get_per_token_logps_and_entropies`), and reports each
duration to W&B, MLflow or Trackio only. While a callback records, every timer that ends also becomes a
bar on the run's timeline: a lane per kind of work, the step TRL was on.

TRL gives no hook for its timers, so recording wraps `ProfilingContext.__exit__` for as long as one
recorder is open (the class's own method comes back when the last one closes); what TRL reports to
its own loggers is unchanged.
"""

from __future__ import annotations

import threading
import time
from typing import Any

# (a substring of the timer's name, the lane it draws on); the first that matches wins.
LANES = (("generate", "sampler"), ("sync_weights", "adapter"), ("reward", "rewards"), ("logps", "trainer"))
MERGE_OVER = 8  # a name timed more often than this in one step is drawn as one bar "(n calls)"

_lock = threading.Lock()
_recorders: list[TimerSpans] = []
_original_exit: Any = None


def lane_of(name: str, reward_names: tuple[str, ...] = ()) -> str:
    """The lane of a TRL timer ("GRPOTrainer.transformers.generate" draws on the sampler's); TRL times
    each reward function under its own name, which `reward_names` lists."""
    if name.rsplit(".", 1)[-1] in reward_names:
        return "rewards"
    lowered = name.lower()
    return next((lane for part, lane in LANES if part in lowered), "trainer")


class TimerSpans:
    """Collects the bars of TRL's timers that end while it is open; `take()` hands over those of a step."""

    def __init__(self, reward_names: tuple[str, ...] = ()) -> None:
        self.reward_names = tuple(reward_names)  # the trainer's reward functions, timed under their names
        self._bars: list[tuple[str, float, float]] = []

    def open(self) -> None:
        global _original_exit
        from trl.extras.profiling import ProfilingContext

        with _lock:
            if not _recorders:
                _original_exit = ProfilingContext.__exit__
                ProfilingContext.__exit__ = _exit_and_record
            if self not in _recorders:
                _recorders.append(self)

    def close(self) -> None:
        from trl.extras.profiling import ProfilingContext

        with _lock:
            if self in _recorders:
                _recorders.remove(self)
            if not _recorders and _original_exit is not None:
                ProfilingContext.__exit__ = _original_exit
        self._bars.clear()

    def add(self, name: str, start: float, end: float) -> None:
        self._bars.append((name, start, end))

    def take(self) -> list[dict[str, Any]]:
        """The bars since the last `take`, as `run.log_span` takes them (name, start, end, lane): a
        name timed more than MERGE_OVER times is one bar from its first start to its last end."""
        bars, self._bars = self._bars, []
        by_name: dict[str, list[tuple[float, float]]] = {}
        for name, start, end in bars:
            by_name.setdefault(name, []).append((start, end))
        spans = []
        for name, times in by_name.items():
            short = name.split(".", 1)[1] if "." in name else name  # without TRL's class name
            if len(times) > MERGE_OVER:
                times = [(times[0][0], times[-1][1])]
                short = f"{short} ({len(by_name[name])} calls)"
            spans += [{"name": short, "start": start, "end": end, "lane": lane_of(name, self.reward_names)}
                      for start, end in times]
        return sorted(spans, key=lambda span: span["start"])


def _exit_and_record(context: Any, *exc_info: Any) -> Any:
    started = getattr(context, "_start_time", None)
    if started is not None:
        end = time.time()
        start = end - (time.perf_counter() - started)  # TRL's clock is perf_counter; the timeline's is the epoch
        for recorder in list(_recorders):
            recorder.add(str(context.name), start, end)
    return _original_exit(context, *exc_info)
