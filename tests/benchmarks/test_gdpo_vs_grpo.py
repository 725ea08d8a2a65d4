"""benchmarks/gdpo_vs_grpo.py: its summary of synthetic runs (no training here)."""

import doctest
import math

import benchmarks.gdpo_vs_grpo as bench
from benchmarks.gdpo_vs_grpo import compare, compare_urls, format_table, run_config, summarise

NAMES = ["fmt", "ok"]


def run(estimator, seed, fmt, ok, wall=10.0, resolution=1.0):
    """A synthetic run of 10 steps: 8 steps at 0, then 2 at the given final rewards."""
    metrics = [{"reward/fmt": 0.0, "reward/ok": 0.0, "adv_resolution": resolution}] * 8
    metrics += [{"reward/fmt": fmt, "reward/ok": ok, "adv_resolution": resolution}] * 2
    return {"estimator": estimator, "seed": seed, "wall_s": wall, "metrics": metrics}


def test_doctests():
    assert doctest.testmod(bench).failed == 0


def test_summary_per_run_per_estimator_and_the_comparison():
    runs = [run("grpo", 0, 1.0, 0.4), run("gdpo", 0, 1.0, 0.9, resolution=0.5),
            run("grpo", 1, 1.0, 0.6), run("gdpo", 1, 1.0, 1.0, wall=20.0, resolution=1.0)]
    summary = summarise(runs, NAMES)
    assert [(r["estimator"], r["seed"], r["final"]["ok"]) for r in summary["runs"]] == [
        ("grpo", 0, 0.4), ("gdpo", 0, 0.9), ("grpo", 1, 0.6), ("gdpo", 1, 1.0)]
    assert math.isclose(summary["runs"][0]["all_steps"]["ok"], 0.08)  # 2 of 10 steps at 0.4
    grpo, gdpo = summary["per_estimator"]["grpo"], summary["per_estimator"]["gdpo"]
    assert math.isclose(grpo["final"]["ok"]["mean"], 0.5) and math.isclose(grpo["final"]["ok"]["std"], math.sqrt(0.02))
    assert gdpo["adv_resolution"]["mean"] == 0.75 and gdpo["wall_s"] == {"mean": 15.0, "total": 30.0}
    ok = summary["comparison"]["final/ok"]
    # diff 0.45; both spreads sqrt(0.02) and sqrt(0.005): pooled sqrt(0.0125) = 0.112 < 0.45
    assert math.isclose(ok["diff"], 0.45) and ok["exceeds_spread"] and ok["welch_t"] > 4
    fmt = summary["comparison"]["final/fmt"]
    assert fmt["diff"] == 0.0 and not fmt["exceeds_spread"] and math.isnan(fmt["welch_t"])
    table = format_table(summary, NAMES)
    assert "final/ok: gdpo - grpo = +0.450" in table and "LARGER than the seed-to-seed spread" in table
    assert "final/fmt: gdpo - grpo = +0.000" in table and "within the seed-to-seed spread" in table


def test_a_difference_inside_the_spread_is_reported_as_such():
    c = compare([0.1, 0.9], [0.3, 0.9])  # diff 0.1, spreads 0.57 and 0.42
    assert not c["exceeds_spread"] and abs(c["welch_t"]) < 1


def test_runs_differ_only_in_estimator_and_seed():
    grpo, gdpo = run_config("grpo", 0, None), run_config("gdpo", 3, 12)
    assert {k for k in grpo if grpo[k] != gdpo[k]} == {"estimator", "seed", "steps"}
    assert gdpo["steps"] == 12 and grpo["program"] == "toy_format"


def test_compare_urls_keep_to_the_page_limit():
    urls = compare_urls(list(range(1, 11)), ["fmt"], "http://localhost:8000/")
    assert len(urls) == 2 and urls[0].startswith("http://localhost:8000/runs/compare?runs=1&")
    assert urls[0].count("runs=") == 8 and urls[1].count("runs=") == 2
