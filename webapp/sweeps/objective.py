"""A sweep's objective, read from the step metrics its runs stored: each run's value (at its last step,
or its best), and a trial's value and intermediate values (the mean over its seeds)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from webapp.runs.models import StepMetric
from webapp.sweeps.models import Sweep

EVAL_KEY = "eval/reward/mean"
TRAIN_KEY = "reward/mean"


def default_objective(config: dict) -> str:
    """The last `eval/reward/mean` when the runs evaluate on the dev set, else the last `reward/mean`."""
    evaluates = bool(config.get("eval_every")) or bool(config.get("eval_before"))
    return EVAL_KEY if evaluates else TRAIN_KEY


def metric_series(run_ids: Iterable[int], key: str) -> dict[int, dict[int, float]]:
    """run -> step -> the metric's finite value (the newest attempt's, as the charts show it)."""
    found: dict[int, dict[int, float]] = {}
    rows = StepMetric.objects.filter(run_id__in=list(run_ids)).order_by("seq").values_list("run_id", "step", "metrics")
    for run_id, step, metrics in rows:
        value = (metrics or {}).get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            found.setdefault(run_id, {})[step] = float(value)
    return found


def run_value(series: dict[int, float], sweep: Sweep) -> float | None:
    """One run's objective: the value at its last step that has the metric, or the best of them."""
    if not series:
        return None
    if sweep.mode == Sweep.Mode.BEST:
        return (max if sweep.direction == Sweep.Direction.MAXIMIZE else min)(series.values())
    return series[max(series)]


def trial_intermediate(per_run: list[dict[int, float]]) -> dict[str, float]:
    """step -> the mean over the runs that stored that step (JSON keys: strings)."""
    steps = sorted({step for series in per_run for step in series})
    return {str(step): statistics.fmean(s[step] for s in per_run if step in s) for step in steps}


def seed_series(runs_by_seed: dict[int, int], series: dict[int, dict[int, float]]) -> dict[str, dict[str, float]]:
    """seed -> step -> value (JSON keys: strings), from run -> step -> value."""
    return {str(seed): {str(step): v for step, v in sorted(series.get(run_id, {}).items())}
            for seed, run_id in sorted(runs_by_seed.items()) if series.get(run_id)}


def over_seeds(by_seed: dict[str, dict[str, float]], seeds: set[str]) -> dict[int, float]:
    """step -> the mean over `seeds` of their values, at the steps every one of them stored."""
    chosen = [by_seed[s] for s in seeds if s in by_seed]
    if len(chosen) < len(seeds) or not chosen:
        return {}
    steps = set.intersection(*(set(c) for c in chosen))
    return {int(step): statistics.fmean(c[step] for c in chosen) for step in steps}
