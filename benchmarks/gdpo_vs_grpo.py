"""GRPO against GDPO on a two-reward task (issue 14, item 3; issue 23, item 5), through Cohort's own trainer.

Every run is `python -m trainer train` on one program with its suggested settings, by default
`toy_format` (trainer/programs/toy_format.py: a format reward, "ends with a period", and a content
reward, "the first word is the target", on the tiny model); `--program arith_format` runs the real
SmolLM2 on short arithmetic in a required format, where the model meets both rewards partly from the
start (trainer/programs/arith_format.py). The runs differ only in `estimator` and `seed`. For each run the
table gives the mean of each reward over the last 20 % of steps (the final rewards), the mean over
all steps (how early it rose), the rise (mean of the last 5 steps minus the first 5), the mean
logged advantage resolution (`adv_resolution`: distinct
advantages / distinct reward vectors per group, GDPO Section 2) and the wall time; per estimator
the mean and std across seeds; per reward whether the GDPO - GRPO difference of means exceeds the
seed-to-seed spread (the pooled std of the two estimators' seeds), with Welch's t beside it.

    nice -n 10 .venv/bin/python benchmarks/gdpo_vs_grpo.py [--seeds 0 1 2 3 4] [--steps 150] \
        [--program arith_format] [--parallel 2] [--out benchmarks/out/gdpo_vs_grpo.json]
    .venv/bin/python benchmarks/gdpo_vs_grpo.py --dashboard [--owner admin]

`--dashboard` trains nothing here: it queues the same runs with `manage.py launch_run` against the
configured database (`make run` creates the `admin` user and the `toy_format` task) and prints the
Compare page URLs that overlay them (at most 8 runs per page, so the seeds come in slices).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.config import SMOLLM2_MODEL  # noqa: E402
from trainer.programs import program_info  # noqa: E402
from trainer.run.reporting import read_events  # noqa: E402

PROGRAM = "toy_format"
ESTIMATORS = ("grpo", "gdpo")
TAIL = 0.2  # the final rewards: the last 20 % of steps
RISE_WINDOW = 5  # the rise: the mean of the last 5 steps minus that of the first 5
KINDS = ("final", "all_steps", "rise")
COMPARE_MAX_RUNS = 8  # webapp/runs/views.py: the Compare page overlays at most this many runs


def run_config(estimator: str, seed: int, steps: int | None, program: str = PROGRAM) -> dict[str, Any]:
    """The program's suggested config with `estimator` and `seed`; no evaluation or checkpoints
    (they cost time and neither enters the table)."""
    config = {**program_info(program)["suggested_config"], "program": program, "estimator": estimator,
              "seed": seed, "eval_every": 0, "checkpoint_every": 0}
    if steps is not None:
        config["steps"] = steps
    return config


def reward_names(program: str = PROGRAM) -> list[str]:
    return [r["name"] for r in program_info(program)["suggested_config"]["rewards"]]


def shared_model_cache(work: Path) -> Path:
    """The runs' model cache: the tiny models are built there per program, the real SmolLM2 is the
    user's already built one, linked in (building it costs about 30 s)."""
    from trainer.models import ensure_smollm2

    cache = work / "models"
    cache.mkdir(parents=True, exist_ok=True)
    link = cache / SMOLLM2_MODEL.removeprefix("builtin:")
    if not link.exists():
        link.symlink_to(ensure_smollm2(), target_is_directory=True)
    return cache


def train_one(estimator: str, seed: int, steps: int | None, work: Path, threads: int,
              program: str = PROGRAM) -> dict[str, Any]:
    """Trains one run in a subprocess; its per-step metrics and wall time (start-up included)."""
    run_dir = work / f"{estimator}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir.with_suffix(".json")
    config = run_config(estimator, seed, steps, program)
    config_path.write_text(json.dumps(config))
    # One thread: the tiny model's ops are too small to gain from more, and the machine is shared.
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "COHORT_MODEL_CACHE": str(shared_model_cache(work) if config.get("model") == SMOLLM2_MODEL
                                     else work / "models")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trainer", "train", "--config", str(config_path),
                           "--run-dir", str(run_dir), "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{estimator} seed {seed} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    steps_metrics = [e["metrics"] for e in read_events(run_dir / "events.jsonl") if e.get("type") == "step"]
    return {"estimator": estimator, "seed": seed, "wall_s": wall, "run_dir": str(run_dir), "metrics": steps_metrics}


def _mean(values: list[float | None]) -> float:
    known = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.fmean(known) if known else math.nan


def _std(values: list[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.stdev(known) if len(known) > 1 else math.nan


def summarise_run(metrics: list[dict[str, Any]], names: list[str], tail: float = TAIL) -> dict[str, Any]:
    """Per reward the mean over the last `tail` share of steps (at least one), over all steps, and
    its rise (the last `RISE_WINDOW` steps' mean minus the first's); the mean advantage resolution.

    >>> m = [{"reward/a": 0.0, "adv_resolution": 1.0}] * 8 + [{"reward/a": 1.0, "adv_resolution": 0.5}] * 2
    >>> summarise_run(m, ["a"])
    {'final': {'a': 1.0}, 'all_steps': {'a': 0.2}, 'rise': {'a': 0.4}, 'adv_resolution': 0.9}
    """
    last = metrics[-max(1, round(len(metrics) * tail)):] if metrics else []

    def rise(name: str) -> float:
        values = [m.get(f"reward/{name}") for m in metrics]
        return _mean(values[-RISE_WINDOW:]) - _mean(values[:RISE_WINDOW])

    return {
        "final": {n: _mean([m.get(f"reward/{n}") for m in last]) for n in names},
        "all_steps": {n: _mean([m.get(f"reward/{n}") for m in metrics]) for n in names},
        "rise": {n: rise(n) for n in names},
        "adv_resolution": _mean([m.get("adv_resolution") for m in metrics]),
    }


def compare(a: list[float], b: list[float]) -> dict[str, float | bool]:
    """`b` - `a` in means against the seed-to-seed spread: the pooled std sqrt((s_a^2 + s_b^2) / 2)
    and Welch's t = diff / sqrt(s_a^2/n_a + s_b^2/n_b) (inf when both spreads are 0 and the means
    differ; nan when nothing differs).

    >>> compare([0.0, 0.2], [0.5, 0.7])["exceeds_spread"]
    True
    """
    diff = statistics.fmean(b) - statistics.fmean(a)
    var_a, var_b = (statistics.variance(x) if len(x) > 1 else 0.0 for x in (a, b))
    pooled = math.sqrt((var_a + var_b) / 2)
    error = math.sqrt(var_a / len(a) + var_b / len(b))
    welch_t = diff / error if error > 0 else (math.copysign(math.inf, diff) if diff else math.nan)
    return {"diff": diff, "pooled_std": pooled, "welch_t": welch_t, "exceeds_spread": abs(diff) > pooled}


def summarise(runs: list[dict[str, Any]], names: list[str], tail: float = TAIL) -> dict[str, Any]:
    """The experiment's numbers: per run, per estimator (mean, std across seeds) and the comparison
    of the last estimator against the first on each reward's final mean."""
    rows = [{"estimator": r["estimator"], "seed": r["seed"], "wall_s": r["wall_s"],
             **summarise_run(r["metrics"], names, tail)} for r in runs]
    estimators = list(dict.fromkeys(r["estimator"] for r in rows))
    per_estimator = {}
    for est in estimators:
        mine = [r for r in rows if r["estimator"] == est]
        per_estimator[est] = {
            "seeds": [r["seed"] for r in mine],
            **{kind: {n: {"mean": _mean([r[kind][n] for r in mine]), "std": _std([r[kind][n] for r in mine])}
                      for n in names} for kind in KINDS},
            "adv_resolution": {"mean": _mean([r["adv_resolution"] for r in mine]),
                               "std": _std([r["adv_resolution"] for r in mine])},
            "wall_s": {"mean": _mean([r["wall_s"] for r in mine]), "total": sum(r["wall_s"] for r in mine)},
        }
    comparison = {}
    if len(estimators) >= 2:
        first, last = estimators[0], estimators[-1]
        comparison = {f"{kind}/{n}": compare([r[kind][n] for r in rows if r["estimator"] == first],
                                             [r[kind][n] for r in rows if r["estimator"] == last])
                      for kind in KINDS for n in names}
        comparison["baseline"], comparison["other"] = first, last
    return {"runs": rows, "per_estimator": per_estimator, "comparison": comparison, "tail": tail}


def format_table(summary: dict[str, Any], names: list[str]) -> str:
    """The summary as plain text: one line per run, then per estimator, then the comparison."""
    width = max(12, *(len(n) + 2 for n in names))
    labels = {"final": "fin", "all_steps": "all", "rise": "rise"}
    head = (f"{'estimator':9s} {'seed':>4s} "
            + " ".join(f"{labels[k] + ' ' + n:>{width + 5}s}" for k in KINDS for n in names)
            + f" {'adv_res':>8s} {'wall_s':>7s}")
    lines = [f"final = mean over the last {summary['tail']:.0%} of steps; all = mean over all steps; "
             f"rise = mean of the last {RISE_WINDOW} steps - mean of the first {RISE_WINDOW}", head]
    for r in summary["runs"]:
        lines.append(f"{r['estimator']:9s} {r['seed']:>4d} "
                     + " ".join(f"{r[k][n]:>{width + 5}.3f}" for k in KINDS for n in names)
                     + f" {r['adv_resolution']:>8.4f} {r['wall_s']:>7.1f}")
    lines.append("")
    for est, s in summary["per_estimator"].items():
        cells = " ".join(f"{s[k][n]['mean']:.3f} +- {s[k][n]['std']:.3f}".rjust(width + 5) for k in KINDS for n in names)
        lines.append(f"{est:9s} {'mean':>4s} {cells} {s['adv_resolution']['mean']:>8.4f} "
                     f"{s['wall_s']['mean']:>7.1f}   ({len(s['seeds'])} seeds, {s['wall_s']['total']:.0f} s in all)")
    comparison = summary["comparison"]
    if comparison:
        lines.append("")
        other, base = comparison["other"], comparison["baseline"]
        for key, c in comparison.items():
            if key in ("baseline", "other"):
                continue
            verdict = "LARGER than" if c["exceeds_spread"] else "within"
            lines.append(f"{key:>{width + 10}s}: {other} - {base} = {c['diff']:+.3f}, seed spread (pooled std) "
                         f"{c['pooled_std']:.3f}, Welch t {c['welch_t']:+.2f}: {verdict} the seed-to-seed spread")
    return "\n".join(lines)


def launch_dashboard(seeds: list[int], steps: int | None, owner: str, task: str) -> list[dict[str, Any]]:
    """Queues every (estimator, seed) run through `manage.py launch_run`; their ids."""
    launched = []
    for seed in seeds:
        for estimator in ESTIMATORS:
            command = [sys.executable, "manage.py", "launch_run", "--task", task, "--owner", owner,
                       "--name", f"{estimator} seed {seed}", "--set", f"estimator={estimator}", "--set", f"seed={seed}"]
            if steps is not None:
                command += ["--set", f"steps={steps}"]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            match = re.search(r"Queued run (\d+)", done.stdout)
            if done.returncode != 0 or match is None:
                raise SystemExit(f"launch_run failed for {estimator} seed {seed}: {(done.stderr or done.stdout).strip()}")
            launched.append({"estimator": estimator, "seed": seed, "run": int(match.group(1))})
            print(f"queued run {match.group(1)}: {estimator} seed {seed}")
    return launched


def compare_urls(run_ids: list[int], names: list[str], base_url: str) -> list[str]:
    """Compare page URLs overlaying `run_ids` on each reward, `COMPARE_MAX_RUNS` runs per page.

    >>> compare_urls([1, 2], ["a"], "http://h")
    ['http://h/runs/compare?runs=1&runs=2&metrics=reward%2Fa']
    """
    metrics = [("metrics", f"reward/{n}") for n in names]
    return [f"{base_url.rstrip('/')}/runs/compare?"
            + urlencode([("runs", i) for i in run_ids[start:start + COMPARE_MAX_RUNS]] + metrics)
            for start in range(0, len(run_ids), COMPARE_MAX_RUNS)]


def _finite(value: Any) -> Any:
    """`value` with every NaN or infinity as None: strict JSON (a mean over nothing is NaN).

    >>> _finite({"a": [float("nan"), 1.0, float("inf")]})
    {'a': [None, 1.0, None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=None, help="default: the program's suggested steps")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "gdpo_vs_grpo.json")
    parser.add_argument("--work-dir", type=Path, default=None, help="run folders (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--program", default=PROGRAM, help="the two-reward program (e.g. arith_format)")
    parser.add_argument("--parallel", type=int, default=1, help="runs trained at once (one per core)")
    parser.add_argument("--dashboard", action="store_true", help="queue the runs with launch_run instead")
    parser.add_argument("--owner", default=os.environ.get("COHORT_ADMIN_USER", "admin"))
    parser.add_argument("--task", default=PROGRAM, help="the task of the dashboard runs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = reward_names(args.program)
    if args.dashboard:
        launched = launch_dashboard(args.seeds, args.steps, args.owner, args.task)
        base_url = os.environ.get("COHORT_BASE_URL", "http://localhost:8000")
        for url in compare_urls([r["run"] for r in launched], names, base_url):
            print(f"compare: {url}")
        return 0
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="gdpo-vs-grpo-"))
    started = time.perf_counter()

    def one(estimator_seed: tuple[str, int]) -> dict[str, Any]:
        estimator, seed = estimator_seed
        run = train_one(estimator, seed, args.steps, work, args.threads, args.program)
        print(f"{estimator} seed {seed}: {len(run['metrics'])} steps in {run['wall_s']:.1f} s", flush=True)
        return run

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:  # each run is its own process
        runs = list(pool.map(one, [(estimator, seed) for seed in args.seeds for estimator in ESTIMATORS]))
    total = time.perf_counter() - started
    summary = summarise(runs, names)
    print()
    print(format_table(summary, names))
    print(f"\n{len(runs)} runs in {total:.0f} s ({total / 60:.1f} min); run folders in {work}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    config = run_config(ESTIMATORS[0], args.seeds[0], args.steps, args.program)
    result = {"program": args.program, "parallel": args.parallel, "rewards": names, "config": config, "total_s": total, **summary}
    args.out.write_text(json.dumps(_finite(result), indent=2, allow_nan=False))
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
