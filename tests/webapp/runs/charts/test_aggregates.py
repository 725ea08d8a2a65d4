"""Aggregates over seeds (webapp/runs/charts/aggregates.py): the IQM as scipy's trim_mean, the stratified
bootstrap's percentile interval as rliable computes it (checked against rliable's own numbers), the
per-table summary, and the per-step bands of the compare page."""

import math
import time

import numpy as np
import pytest

from webapp.runs.charts.aggregates import (
    band_from_matrix,
    band_over_steps,
    bootstrap_ci,
    iqm,
    seed_summary,
)

# --- IQM: scipy.stats.trim_mean(x, 0.25, axis=None) ---------------------------------------------


@pytest.mark.parametrize(("scores", "expected"), [
    ([1, 2, 3, 4, 100], 3.0),  # n=5: int(1.25) = 1 cut from each end -> mean(2, 3, 4)
    ([1, 2, 3, 4], 2.5),  # n=4: one from each end -> mean(2, 3)
    ([5, 1, 3], 3.0),  # n=3: int(0.75) = 0 cut -> the plain mean
    ([7], 7.0),
    ([10, 1, 2, 3, 4, 5, 6, 7, -50], 4.0),  # n=9: two cut from each end (-50, 1 and 7, 10) -> mean(2..6)
    ([[1, 5], [2, 6], [3, 7], [4, 8]], 4.5),  # (runs, tasks) flattened: n=8, mean(3, 4, 5, 6)
])
def test_iqm_is_the_25_percent_trimmed_mean_of_all_scores(scores, expected):
    assert iqm(scores) == expected


def test_iqm_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        iqm([])


# --- the bootstrap interval ---------------------------------------------------------------------


def test_the_interval_contains_the_mean_and_is_deterministic_for_a_seed():
    rng = np.random.default_rng(3)
    scores = rng.normal(0.5, 0.1, size=8)
    low, high = bootstrap_ci(scores)
    assert low < scores.mean() < high
    assert bootstrap_ci(scores, seed=0) == (low, high)
    assert bootstrap_ci(scores, seed=1) != (low, high)  # another draw, another (close) interval
    low_iqm, high_iqm = bootstrap_ci(scores, iqm)
    assert low_iqm < iqm(scores) < high_iqm


def test_the_interval_shrinks_with_more_runs():
    rng = np.random.default_rng(0)
    widths = []
    for n in (5, 50, 500):
        low, high = bootstrap_ci(rng.normal(0.0, 1.0, size=n))
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] == pytest.approx(2 * 1.96 / math.sqrt(500), rel=0.15)  # the normal theory's width


def test_a_stratified_bootstrap_keeps_each_task_column_apart():
    # Task 0 is always 0 and task 1 always 1: resampling runs within a column cannot mix them, so the
    # mean is 0.5 in every resample (pooling the 6 values would let it range from 0 to 1).
    scores = np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    assert bootstrap_ci(scores) == (0.5, 0.5)


def test_any_statistic_and_bad_input():
    scores = [0.1, 0.4, 0.35, 0.8]
    low, high = bootstrap_ci(scores, lambda x: float(np.max(x)))
    assert 0.35 <= low <= high == 0.8
    for bad in ([], [[]], np.zeros((2, 2, 2))):
        with pytest.raises(ValueError):
            bootstrap_ci(bad)
    with pytest.raises(ValueError):
        bootstrap_ci(scores, confidence=1.5)


# Reference numbers from rliable itself, on the score matrix below (5 runs x 3 tasks; dyadic numbers,
# so every sum is exact and the IQM cannot differ in its last bit by the order of summation). Produced
# outside the project (rliable is not a dependency) with
#     python3 -m venv /tmp/rl && /tmp/rl/bin/pip install rliable numpy "pandas<3"
# (rliable 1.2.0, arch 7.2.0, numpy 2.4.6, scipy 1.17.1; arch 7.2 needs pandas < 3 to import), by
#     from rliable import library as rly, metrics
#     rly.get_interval_estimates({"a": RLIABLE_SCORES}, lambda x: np.array([metrics.aggregate_iqm(x)]),
#                                reps=50000, confidence_interval_size=0.95, method="percentile",
#                                random_state=np.random.RandomState(0))
# and the same with metrics.aggregate_mean. Random states 1, 2 and 3 gave the very same IQM interval.
RLIABLE_SCORES = np.array([
    [0.125, 0.500, 0.875],
    [0.250, 0.625, 0.750],
    [0.375, 0.250, 1.000],
    [0.000, 0.750, 0.625],
    [0.500, 0.375, 0.875],
])
RLIABLE_IQM = 0.5277777777777778
RLIABLE_IQM_CI = (0.4305555555555556, 0.625)
RLIABLE_MEAN = 0.525
RLIABLE_MEAN_CI = (0.4416666666666667, 0.6083333333333333)


def test_iqm_and_its_interval_agree_with_rliable():
    assert iqm(RLIABLE_SCORES) == RLIABLE_IQM
    assert float(np.mean(RLIABLE_SCORES)) == RLIABLE_MEAN
    # Bootstrap noise: a percentile of R resamples has a standard error of about
    # sqrt(q (1 - q) / R) / density; at R = 2000 and q = 0.025 that is a few hundredths of the scores'
    # range here (1.0), so 0.02 of the range; with rliable's 50,000 resamples, 0.005.
    spread = float(RLIABLE_SCORES.max() - RLIABLE_SCORES.min())
    for statistic, reference in ((iqm, RLIABLE_IQM_CI), (np.mean, RLIABLE_MEAN_CI)):
        assert bootstrap_ci(RLIABLE_SCORES, statistic) == pytest.approx(reference, abs=0.02 * spread)
        assert bootstrap_ci(RLIABLE_SCORES, statistic, reps=50000) == pytest.approx(reference, abs=0.005 * spread)


# --- a table's summary --------------------------------------------------------------------------


def test_seed_summary():
    s = seed_summary([0.1, 0.2, 0.3, 0.4, 1.0, None, float("nan")])  # a seed still running, a broken one
    assert s["n"] == 5 and s["mean"] == pytest.approx(0.4) and s["iqm"] == pytest.approx(0.3)
    assert s["std"] == pytest.approx(np.std([0.1, 0.2, 0.3, 0.4, 1.0], ddof=1))
    assert (s["min"], s["max"]) == (0.1, 1.0)
    assert s["ci_low"] < s["mean"] < s["ci_high"]
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(bootstrap_ci([0.1, 0.2, 0.3, 0.4, 1.0], reps=50000), abs=0.02)
    one = seed_summary([0.7])
    assert one == {"n": 1, "mean": 0.7, "iqm": 0.7, "std": None, "min": 0.7, "max": 0.7, "ci_low": None,
                   "ci_high": None}
    assert seed_summary([])["mean"] is None and seed_summary([])["n"] == 0


# --- bands over steps ---------------------------------------------------------------------------


def test_band_kinds_at_each_step_over_the_runs_that_have_it():
    runs = [{1: 0.0, 2: 1.0, 3: 5.0}, {1: 2.0, 2: 3.0}, {1: 4.0, 2: 2.0}]  # the first run is one step longer
    minmax = band_over_steps(runs, "minmax")
    assert minmax == {"steps": [1, 2, 3], "mean": [2.0, 2.0, 5.0], "low": [0.0, 1.0, None], "high": [4.0, 3.0, None]}
    std = band_over_steps(runs, "std")
    assert std["low"][:2] == pytest.approx([0.0, 1.0]) and std["high"][:2] == pytest.approx([4.0, 3.0])
    ci = band_over_steps(runs, "ci")
    assert ci["steps"] == [1, 2, 3] and ci["low"][2] is None
    # Three runs: 27 equally likely resamples; 1/27 > 2.5% of them are all the smallest run, so the
    # interval reaches from the smallest to the largest value.
    assert ci["low"][:2] == pytest.approx([0.0, 1.0]) and ci["high"][:2] == pytest.approx([4.0, 3.0])
    with pytest.raises(ValueError, match="band kind"):
        band_over_steps(runs, "iqr")


def test_the_exact_band_is_what_the_monte_carlo_bootstrap_estimates():
    rng = np.random.default_rng(7)
    values = rng.normal(size=(5, 30))  # 5 runs: 126 distinct resamples, enumerated with their probabilities
    _, low, high = band_from_matrix(values, "ci")
    for step in (0, 11, 29):
        mc_low, mc_high = bootstrap_ci(values[:, step], reps=50000)
        assert (low[step], high[step]) == pytest.approx((mc_low, mc_high), abs=0.02 * np.ptp(values[:, step]))
    many = rng.normal(size=(12, 30))  # 12 runs: Monte Carlo, deterministic for its seed
    assert np.array_equal(band_from_matrix(many, "ci")[1], band_from_matrix(many, "ci")[1])
    mean, low, high = band_from_matrix(many, "ci")
    assert np.all(low <= mean) and np.all(mean <= high)


def test_a_band_of_100_steps_over_a_few_runs_takes_a_few_milliseconds():
    rng = np.random.default_rng(0)
    runs = [{s: float(v) for s, v in enumerate(rng.random(100))} for _ in range(3)]
    band_over_steps(runs)  # warm
    start = time.perf_counter()
    for _ in range(20):
        band_over_steps(runs)
    assert (time.perf_counter() - start) / 20 < 0.005
