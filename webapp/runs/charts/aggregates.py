"""Aggregates over seeds, computed as rliable computes them (Agarwal et al., NeurIPS 2021, "Deep RL at
the edge of the statistical precipice"): the mean, the interquartile mean (IQM) and percentile confidence
intervals from a stratified bootstrap; and the band a compare chart draws around a group's mean curve.

Why: with the 3-10 seeds a lab can afford, one run's curve (or a mean without its uncertainty) says
little about a method; the paper's remedy is interval estimates, and the IQM as a point estimate that
one lucky or broken seed does not move as it moves the mean. rliable and scipy are not dependencies
of the project: each estimator is a few lines of numpy, checked against rliable's own numbers in
tests/webapp/runs/charts/test_aggregates.py.

Shapes: `scores` is (runs,) for one task or (runs, tasks); the stratified bootstrap resamples runs with
replacement within each task column, so every task keeps its number of runs (rliable's
`StratifiedBootstrap` with `task_bootstrap=False`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

IQM_CUT = 0.25  # the proportion cut from each end: the middle half remains
BAND_KINDS = ("ci", "minmax", "std")


def iqm(scores) -> float:
    """Interquartile mean: `scipy.stats.trim_mean(scores, 0.25, axis=None)`, i.e. over every value
    flattened, `int(0.25 * n)` values are cut from each end and the rest averaged (as scipy does, by
    np.partition, so the very same values are summed in the same order).

    >>> iqm([1, 2, 3, 4, 100])  # n = 5: one value cut from each end, mean(2, 3, 4)
    3.0
    >>> iqm([[1, 5], [2, 6], [3, 7], [4, 8]])  # (runs, tasks) flattened: n = 8, mean(3, 4, 5, 6)
    4.5
    """
    x = np.asarray(scores, dtype=float).ravel()
    if not x.size:
        raise ValueError("the IQM of no scores is undefined")
    low = int(IQM_CUT * x.size)
    high = x.size - low
    part = np.partition(x, (low, high - 1))
    return float(np.mean(part[low:high]))


def _iqm_rows(samples: np.ndarray) -> np.ndarray:
    """The IQM of each row of (reps, m): sorted once, the middle columns averaged."""
    m = samples.shape[1]
    low = int(IQM_CUT * m)
    return np.sort(samples, axis=1)[:, low:m - low].mean(axis=1)


# Statistics computed for every resample at once; any other callable is called once per resample.
_ROWWISE: dict[Callable, Callable[[np.ndarray], np.ndarray]] = {
    np.mean: lambda s: s.mean(axis=1),
    np.median: lambda s: np.median(s, axis=1),
    iqm: _iqm_rows,
}


def bootstrap_ci(scores, statistic: Callable = np.mean, *, reps: int = 2000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile interval of `statistic` over a stratified bootstrap of `scores` (runs,) or (runs, tasks):
    `reps` resamples, each drawing every task column's runs with replacement from that column; the
    interval is the (1 - confidence) / 2 and (1 + confidence) / 2 percentiles of the resampled
    statistics (numpy's linear interpolation, as `arch`'s percentile method that rliable calls). The
    same `seed` gives the same interval.

    Worked example: scores (1, 2, 3), statistic the mean: a resample such as (1, 1, 3) has mean 5/3; the
    27 equally likely resamples put 1/27 of their mass on each of 1 and 3, so the 95% interval is about
    (1.0, 3.0) - three seeds say little.
    """
    x = np.asarray(scores, dtype=float)
    if x.ndim == 1:
        x = x[:, None]  # (runs, 1): one task
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"scores must be (runs,) or (runs, tasks) with at least one run, not {x.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    if reps < 1:
        raise ValueError(f"reps must be at least 1, not {reps}")
    n, tasks = x.shape
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(reps, n, tasks))  # (reps, runs, tasks): each column its own draw
    samples = x[idx, np.arange(tasks)]  # (reps, runs, tasks)
    rowwise = _ROWWISE.get(statistic)
    if rowwise is not None:
        stats = rowwise(samples.reshape(reps, n * tasks))
    else:
        shaped = samples[:, :, 0] if np.ndim(scores) == 1 else samples
        stats = np.array([float(statistic(sample)) for sample in shaped])
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(stats, [tail, 100 - tail])
    return float(low), float(high)


def seed_summary(values: Sequence[float | None]) -> dict:
    """What a table says about one arm over its seeds: n, mean, IQM, sample standard deviation, min,
    max and the 95% bootstrap CI of the mean (None with fewer than two values; so is std). None and
    non-finite values (a seed still running) are left out. The CI is the one the compare page's band
    draws for the same values (band_rows: exact for up to 7 seeds), so the two pages agree.

    >>> s = seed_summary([0.1, 0.2, 0.3, 0.4, 1.0])
    >>> s["n"], round(s["mean"], 3), round(s["iqm"], 3), s["min"], s["max"]
    (5, 0.4, 0.3, 0.1, 1.0)
    """
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if not x.size:
        return {"n": 0, "mean": None, "iqm": None, "std": None, "min": None, "max": None,
                "ci_low": None, "ci_high": None}
    low = high = None
    if x.size > 1:
        _, lows, highs = band_rows(x[None, :], "ci")
        low, high = float(lows[0]), float(highs[0])
    return {"n": int(x.size), "mean": float(x.mean()), "iqm": iqm(x),
            "std": float(x.std(ddof=1)) if x.size > 1 else None, "min": float(x.min()), "max": float(x.max()),
            "ci_low": low, "ci_high": high}


# --- bands over steps ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _every_resample(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every distinct bootstrap resample of k runs, as weights (M, k) (how often each run is drawn,
    over k) and their probabilities (M,) = k! / prod(c_i!) / k^k. M = C(2k - 1, k): 10 for 3 runs,
    1,716 for 7."""
    counts = np.array([np.bincount(c, minlength=k) for c in itertools.combinations_with_replacement(range(k), k)])
    log_p = math.lgamma(k + 1) - np.array([sum(math.lgamma(c + 1) for c in row) for row in counts]) - k * math.log(k)
    return counts / k, np.exp(log_p)


def _mean_ci_rows(sub: np.ndarray, *, reps: int, confidence: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap percentile interval of the mean of each row of (n points, k runs).

    With few runs there are fewer distinct resamples than `reps` draws (10 for 3 runs), so the
    bootstrap distribution is enumerated exactly, with its probabilities, and its quantiles taken: the
    value a Monte Carlo percentile converges to, without its noise, at a fraction of the cost (a
    sweep's page draws ~200 bands of 100 steps). With more runs, `reps` Monte Carlo resamples as
    bootstrap_ci, one draw of runs for every point (in chunks, to bound the memory)."""
    n, k = sub.shape
    tail = (1 - confidence) / 2
    if math.comb(2 * k - 1, k) <= reps:
        weights, p = _every_resample(k)
        boot = sub @ weights.T  # (n, M): each resample's mean at each point
        order = np.argsort(boot, axis=1, kind="stable")
        cdf = np.cumsum(p[order], axis=1)  # (n, M)
        ordered = np.take_along_axis(boot, order, axis=1)
        rows = np.arange(n)
        lo = np.argmax(cdf >= tail - 1e-12, axis=1)
        hi = np.argmax(cdf >= 1 - tail - 1e-12, axis=1)
        return ordered[rows, lo], ordered[rows, hi]
    idx = rng.integers(0, k, size=(reps, k))
    counts = np.bincount((idx + (np.arange(reps) * k)[:, None]).ravel(), minlength=reps * k).reshape(reps, k)
    weights = (counts / k).T  # (k, reps)
    low, high = np.empty(n), np.empty(n)
    chunk = max(1, 2_000_000 // reps)
    for start in range(0, n, chunk):
        boot = sub[start:start + chunk] @ weights  # (chunk, reps)
        low[start:start + chunk], high[start:start + chunk] = np.percentile(boot, [100 * tail, 100 * (1 - tail)], axis=1)
    return low, high


def band_rows(cells: np.ndarray, kind: str = "ci", *, reps: int = 2000, confidence: float = 0.95,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, low, high), each (n,), of `cells` (n points, k runs): at each point (one step of one
    group) the values of its runs, NaN where a run has none. Only the runs that have a value count;
    the band is NaN (a gap) where fewer than two do, the mean NaN where none does. `kind`: "ci"
    (bootstrap interval of the mean), "minmax", "std" (mean +- the sample standard deviation).

    Every point of every group at once: the compare page passes a sweep's 200 groups x 100 steps as
    one (20000, 3) array, and the work is a few whole-array operations."""
    if kind not in BAND_KINDS:
        raise ValueError(f"band kind must be one of {', '.join(BAND_KINDS)}, not {kind!r}")
    cells = np.asarray(cells, dtype=float)
    if cells.ndim != 2:
        raise ValueError(f"cells must be (points, runs), not {cells.shape}")
    present = np.isfinite(cells)
    count = present.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(present, cells, 0.0).sum(axis=1) / count  # NaN where count is 0
    low, high = np.full(len(cells), np.nan), np.full(len(cells), np.nan)
    wide = count >= 2
    if kind == "minmax":
        low[wide] = np.where(present, cells, np.inf).min(axis=1)[wide]
        high[wide] = np.where(present, cells, -np.inf).max(axis=1)[wide]
    elif kind == "std":
        squares = np.where(present, (cells - mean[:, None]) ** 2, 0.0).sum(axis=1)
        std = np.sqrt(squares[wide] / (count[wide] - 1))
        low[wide], high[wide] = mean[wide] - std, mean[wide] + std
    else:
        rng = np.random.default_rng(seed)
        # The bootstrap of a mean does not care which run is which: each point's present values are
        # moved to the front (np.sort puts NaN last), and the points with c values are one batch.
        compact = cells.copy()
        partial = count < cells.shape[1]
        compact[partial] = np.sort(cells[partial], axis=1)
        for c in np.unique(count[wide]).tolist():
            points = np.flatnonzero(count == c)
            low[points], high[points] = _mean_ci_rows(compact[points, :c], reps=reps, confidence=confidence, rng=rng)
    return mean, low, high


def band_from_matrix(values: np.ndarray, kind: str = "ci", *, reps: int = 2000, confidence: float = 0.95,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """band_rows of one group's (runs, S steps) matrix: (mean, low, high), each (S,)."""
    return band_rows(np.asarray(values, dtype=float).T, kind, reps=reps, confidence=confidence, seed=seed)


def band_over_steps(per_run: Sequence[dict[int, float]], kind: str = "ci", *, reps: int = 2000,
                    confidence: float = 0.95, seed: int = 0) -> dict:
    """A group's curve from its runs' {step: value}: `steps` (every step some run has, ascending), and
    at each step `mean`, `low`, `high` over the runs that have it (None where undefined: see
    band_from_matrix). 100 steps of a few runs take a few milliseconds.

    >>> band = band_over_steps([{1: 0.0, 2: 1.0}, {1: 2.0, 2: 3.0}], "minmax")
    >>> band["steps"], band["mean"], band["low"], band["high"]
    ([1, 2], [1.0, 2.0], [0.0, 1.0], [2.0, 3.0])
    """
    steps = sorted({int(s) for run in per_run for s, v in run.items() if v is not None and math.isfinite(v)})
    where = {s: i for i, s in enumerate(steps)}
    values = np.full((len(per_run), len(steps)), np.nan)
    for r, run in enumerate(per_run):
        for s, v in run.items():
            if v is not None and math.isfinite(v):
                values[r, where[int(s)]] = v
    mean, low, high = band_from_matrix(values, kind, reps=reps, confidence=confidence, seed=seed)
    return {"steps": steps, "mean": _listed(mean), "low": _listed(low), "high": _listed(high)}


def _listed(a: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else v for v in a.tolist()]
