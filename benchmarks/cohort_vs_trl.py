"""The same `toy_format` task trained by Cohort and by TRL's GRPOTrainer on SmolLM2-135M-Instruct,
both into one Cohort server, their reward curves on one Compare page (issue 34, item 4).

1. Starts the dashboard (`python -m webapp.stack up`: SQLite, embedded Redis, daphne, one Celery
   worker) on a throwaway COHORT_VAR_DIR and a free port, with the model cache that holds the built
   SmolLM2 (`python -m trainer models build smollm2-135m-instruct`), and makes a user and an API token;
   or uses a running server (`--url`, `--token`; `--username`/`--password` for the screenshot).
2. Queues Cohort's run of the built-in `toy_format` task through the API with the task's SmolLM2
   suggestion (trainer/programs/toy_format.py `model_suggestions`: 8 completions for each of 4
   prompts a step, 24 new tokens, temperature 1, LoRA r 16 at 2e-4), `--steps` and `--seed`, and
   evaluation off (TRL's run evaluates nothing), and waits for it to succeed.
3. Then, not beside it, runs examples/trl_toy_format.py (the same task and settings for TRL's
   GRPOTrainer, streaming through `cohort.trl.CohortCallback`) with the same steps and seed against
   the same server, so both trainings have the same cores to themselves in turn.
4. Prints a table per system: the step time, the wall time and the reward's first and last 5-step
   mean, then screenshots the Compare page with both runs' `reward/mean` and per-reward curves.

Step times, two per system:
- between step ends: the wall time from one step's end to the next (the first step, with its warm-up,
  is left out). Cohort: the differences of the stored steps' `StepMetric.created_at` (the worker
  stores each step as it ends: sampling, rewards, update, storing; a checkpoint every 10 steps);
  TRL: the differences of `on_step_end` wall times (a clock callback added after Cohort's, so an
  interval holds the whole step, optimizer and callbacks included).
- the trainer's own timer: Cohort's logged `time/step_s` (sampling, rewards, update, optimizer step),
  TRL's logged `step_time` (its `training_step`: generation, rewards, forward and backward, without
  the optimizer step, which the Trainer runs outside it); the first step is left out here too.

    .venv/bin/python benchmarks/cohort_vs_trl.py [--steps 24] [--seed 0] \\
        [--screenshot docs/screenshots/cohort-vs-trl.png] [--json benchmarks/out/cohort_vs_trl.json]
    .venv/bin/python benchmarks/cohort_vs_trl.py --url http://127.0.0.1:8000 --token <key> \\
        [--username me --password ...]

Everything it started is stopped at the end (SIGINT to the stack's process group, as Ctrl-C would);
the throwaway folder is removed unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
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

from benchmarks.dashboard import LoadSampler, machine, screenshot  # noqa: E402
from benchmarks.servers import PYTHON, Stack  # noqa: E402

TASK = "toy_format"
COHORT_NAME = "cohort toy_format"
TRL_NAME = "trl toy_format"
# The task's two rewards. examples/trl_toy_format.py names its reward functions after them, so both
# runs log them under the same keys and each reward's two curves share a chart.
REWARDS = ("reward/regex_match", "reward/exact_match")
# The Compare page's charts, two a row: the mean beside the zero-variance share, then the two rewards.
CHART_METRICS = ("reward/mean", "zero_var_share", *REWARDS)


# --- the numbers ----------------------------------------------------------------------------------

def intervals(times: list[float]) -> list[float]:
    """Differences of consecutive times (the first step's own time, with its warm-up, is not one).

    >>> intervals([10.0, 12.5, 16.0])
    [2.5, 3.5]
    """
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def window_means(values: list[float], n: int = 5) -> tuple[float | None, float | None]:
    """The mean of the first and of the last `n` values (they overlap when there are fewer than 2n).

    >>> window_means([0, 0, 1, 1, 1, 1], n=2)
    (0.0, 1.0)
    """
    finite = [v for v in values if v is not None and v == v]
    if not finite:
        return None, None
    return statistics.fmean(finite[:n]), statistics.fmean(finite[-n:])


def median_mean(values: list[float]) -> tuple[float | None, float | None]:
    return (statistics.median(values), statistics.fmean(values)) if values else (None, None)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def table(rows: list[dict[str, Any]]) -> str:
    """The measurements as a Markdown table, one row per system.

    >>> print(table([{"system": "A", "steps": 2, "between": (1.0, 1.5), "own": (0.9, 1.0), "wall_s": 61,
    ...               "reward": (0.25, 0.5)}]))  # doctest: +NORMALIZE_WHITESPACE
    | system | steps | s/step between step ends, median / mean | s/step, trainer's own timer, median / mean | wall time | reward/mean, first 5 steps | reward/mean, last 5 steps |
    |---|---|---|---|---|---|---|
    | A | 2 | 1.00 / 1.50 | 0.90 / 1.00 | 1 min 01 s | 0.25 | 0.50 |
    """
    lines = ["| system | steps | s/step between step ends, median / mean | s/step, trainer's own timer, median / mean "
             "| wall time | reward/mean, first 5 steps | reward/mean, last 5 steps |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['system']} | {row['steps']} | {_fmt(row['between'][0])} / {_fmt(row['between'][1])} | "
                     f"{_fmt(row['own'][0])} / {_fmt(row['own'][1])} | {_duration(row['wall_s'])} | "
                     f"{_fmt(row['reward'][0])} | {_fmt(row['reward'][1])} |")
    return "\n".join(lines)


# --- the two trainings ----------------------------------------------------------------------------

def cohort_config(steps: int, seed: int) -> dict[str, Any]:
    """The task's SmolLM2 suggestion with `steps` and `seed`, and no evaluation (TRL's run has none)."""
    from trainer.config.fields import SMOLLM2_MODEL
    from trainer.programs.toy_format import ToyFormat

    return {**ToyFormat.model_suggestions[SMOLLM2_MODEL], "steps": steps, "seed": seed, "eval_every": 0}


def run_cohort(client, steps: int, seed: int, timeout_s: float) -> dict[str, Any]:
    started = time.monotonic()
    run = client.create_run(TASK, config=cohort_config(steps, seed), name=COHORT_NAME, tags=["cohort-vs-trl"])
    print(f"Cohort run {run['id']} queued: {client.url}runs/{run['id']}/", flush=True)
    run = client.wait(run["id"], timeout=timeout_s, poll_s=2.0)
    wall = time.monotonic() - started
    if run["state"] != "succeeded":
        raise RuntimeError(f"Cohort run {run['id']} ended {run['state']}: {run.get('error') or ''}")
    print(f"Cohort run {run['id']} succeeded in {_duration(wall)}", flush=True)
    return {"run": run, "wall_s": wall}


def run_trl(url: str, token: str, model: Path, steps: int, seed: int, work: Path, timeout_s: float) -> dict[str, Any]:
    """examples/trl_toy_format.py in a process of its own (this script's `_trl` mode: the example's
    main(), with a clock callback added last), its output in work/trl.log."""
    clock, log = work / "trl-step-ends.json", work / "trl.log"
    argv = [PYTHON, str(Path(__file__).resolve()), "_trl", "--clock", str(clock), "--",
            "--model", str(model), "--url", url, "--token", token, "--steps", str(steps), "--seed", str(seed),
            "--name", TRL_NAME, "--output-dir", str(work / "trl-output")]
    env = {**os.environ, "COHORT_DIR": str(work / "cohort-runs"), "PYTHONUNBUFFERED": "1"}
    print(f"TRL: examples/trl_toy_format.py --steps {steps} --seed {seed} (log: {log})", flush=True)
    started = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise RuntimeError(f"the TRL run took over {timeout_s:.0f} s; see {log}") from None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    wall = time.monotonic() - started
    if code:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"the TRL run exited with {code}:\n{tail}")
    print(f"TRL run done in {_duration(wall)}", flush=True)
    return {"step_ends": json.loads(clock.read_text()), "wall_s": wall}


def trl_child(clock_path: str, example_argv: list[str]) -> None:
    """The example's main() unchanged, with a callback that records every `on_step_end`'s wall time,
    added when the training starts, after the example's CohortCallback (so an interval holds it)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import trl_toy_format
    from transformers import TrainerCallback

    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks.append(time.time())
            Path(clock_path).write_text(json.dumps(marks))

    make_trainer = trl_toy_format.make_trainer

    def make_timed_trainer(*args, **kwargs):
        trainer = make_trainer(*args, **kwargs)
        train = trainer.train

        def timed_train(*a, **k):
            trainer.add_callback(Clock())  # main() has added CohortCallback by now: this one runs after it
            return train(*a, **k)

        trainer.train = timed_train
        return trainer

    trl_toy_format.make_trainer = make_timed_trainer
    Path(clock_path).write_text("[]")
    trl_toy_format.main(example_argv)


def find_trl_run(client, after_id: int, timeout_s: float = 120.0) -> dict[str, Any]:
    """The TRL run the example made (the newest of that name after Cohort's), once finished."""
    runs = client.runs(task=TASK)
    mine = runs[(runs["name"] == TRL_NAME) & (runs["id"] > after_id)]
    if mine.empty:
        raise RuntimeError(f"no run named {TRL_NAME!r} after run {after_id}")
    return client.wait(int(mine["id"].max()), timeout=timeout_s, poll_s=1.0)


def series(client, run_id: int, keys: tuple[str, ...]) -> dict[str, list[float]]:
    frame = client.metrics(run_id, series=keys)
    return {k: ([float(v) for v in frame[k].tolist()] if k in frame else []) for k in keys}


# --- the screenshot -------------------------------------------------------------------------------

def compare_url(url: str, run_ids: list[int], metrics: tuple[str, ...] = CHART_METRICS) -> str:
    """The Compare page of `run_ids` with `metrics` charted.

    >>> compare_url("http://h", [1, 2], ("reward/mean",))
    'http://h/runs/compare?runs=1&runs=2&metrics=reward%2Fmean'
    """
    return f"{url}/runs/compare?" + urlencode([("runs", i) for i in run_ids] + [("metrics", m) for m in metrics])


# --- the whole measurement ------------------------------------------------------------------------

def measure(args) -> dict[str, Any]:
    from cohort.client import Client

    work = Path(tempfile.mkdtemp(prefix="cohort-vs-trl-"))
    stack = None
    try:
        if args.url:
            url, token, username, password = args.url.rstrip("/"), args.token, args.username, args.password
        else:
            stack = Stack(work / "var", args.model_cache)
            print(f"Starting the stack on {stack.url} (COHORT_VAR_DIR={stack.var_dir})", flush=True)
            stack.start()
            url, username, password = stack.url, "bench", secrets.token_urlsafe(16)
            token = stack.user_and_token(username, password)
        client = Client(url, token)
        model = args.model_cache / "smollm2-135m-instruct"
        if not (model / "config.json").exists():
            raise SystemExit(f"{model} is missing: .venv/bin/python -m trainer models build smollm2-135m-instruct")

        with LoadSampler() as cohort_load:
            cohort = run_cohort(client, args.steps, args.seed, args.timeout)
        cohort_id = cohort["run"]["id"]
        with LoadSampler() as trl_load:
            trl = run_trl(url, token, model, args.steps, args.seed, work, args.timeout)
        trl_run = find_trl_run(client, cohort_id)

        c_series = series(client, cohort_id, ("reward/mean", "time/step_s", *REWARDS))
        t_series = series(client, trl_run["id"], ("reward/mean", "step_time", *REWARDS))
        c_between = intervals(stack.step_times(cohort_id)) if stack else []
        rows = [
            {"system": f"Cohort (run {cohort_id})", "steps": len(c_series["reward/mean"]),
             "between": median_mean(c_between), "own": median_mean(c_series["time/step_s"][1:]),
             "wall_s": cohort["wall_s"], "reward": window_means(c_series["reward/mean"]), "load": cohort_load.mean},
            {"system": f"TRL GRPOTrainer (run {trl_run['id']})", "steps": len(t_series["reward/mean"]),
             "between": median_mean(intervals(trl["step_ends"])), "own": median_mean(t_series["step_time"][1:]),
             "wall_s": trl["wall_s"], "reward": window_means(t_series["reward/mean"]), "load": trl_load.mean},
        ]
        result = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
            "steps": args.steps, "seed": args.seed, "config": cohort_config(args.steps, args.seed),
            "rows": rows, "table": table(rows),
            "cohort": {"run": cohort_id, "series": c_series, "between_s": c_between},
            "trl": {"run": trl_run["id"], "series": t_series, "between_s": intervals(trl["step_ends"])},
        }
        if args.screenshot and username and password:
            result["compare_url"] = compare_url(url, [cohort_id, trl_run["id"]])
            screenshot(url, username, password, result["compare_url"], args.screenshot, ready=(
                f"document.querySelectorAll('#compare-charts .chart[data-traces]').length === {len(CHART_METRICS)}"),
                selector="#compare-charts")
            result["screenshot"] = str(args.screenshot)
        elif args.screenshot:
            print("No screenshot: --username and --password are needed to log in to a running server", flush=True)
        return result
    finally:
        if stack is not None:
            stack.stop()
        if args.keep:
            print(f"Kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(result: dict[str, Any]) -> str:
    return "\n".join([
        f"\nCohort and TRL on toy_format, SmolLM2-135M-Instruct, {result['steps']} steps, seed {result['seed']} "
        f"({result['date']}; {result['machine']}).",
        "The two trainings ran one after the other on the same CPU cores (never side by side); the dashboard's "
        "server, worker and Redis idled beside each.",
        "",
        result["table"],
        "",
        "s/step between step ends: Cohort from its stored steps' StepMetric.created_at, TRL from on_step_end wall "
        "times. The trainer's own timer: Cohort's time/step_s (sampling, rewards, update); TRL's step_time (its "
        "training_step: generation, rewards, forward and backward, not the optimizer step). The first step, with "
        "its warm-up, is left out of both.",
        "Mean 1-minute load average while each trained (2 cores; about 2 is the training alone): "
        + ", ".join(f"{row['system']} {_fmt(row.get('load'), 1)}" for row in result["rows"]) + ".",
        "Wall time: Cohort from queuing the run to its success (worker pick-up, model load, training, storing); "
        "TRL from starting the example's process to its exit (imports, model load, training, upload).",
        *([f"Compare page: {result['compare_url']}", f"Screenshot: {result['screenshot']}"]
          if result.get("screenshot") else []),
    ])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_trl"]:  # the TRL process run_trl() starts
        child = argparse.ArgumentParser()
        child.add_argument("--clock", required=True)
        split = argv.index("--")
        trl_child(child.parse_args(argv[1:split]).clock, argv[split + 1:])
        return
    from trainer.models.smollm2 import default_cache_dir  # the model cache's own rule (it loads torch)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", help="a running Cohort server (default: start one on a throwaway folder)")
    parser.add_argument("--token", default=os.environ.get("COHORT_TOKEN"), help="an API key of --url's server")
    parser.add_argument("--username", help="to log in to --url's server for the screenshot")
    parser.add_argument("--password", default=os.environ.get("COHORT_PASSWORD"))
    parser.add_argument("--model-cache", type=Path,
                        default=default_cache_dir(),
                        help="the cache holding the built SmolLM2 (default: $COHORT_MODEL_CACHE, else ~/.cache/cohort)")
    parser.add_argument("--screenshot", default=str(ROOT / "docs" / "screenshots" / "cohort-vs-trl.png"),
                        help="where the Compare page's charts are saved ('' for none)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds each training may take")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway folder (the stack's logs, TRL's log)")
    args = parser.parse_args(argv)
    if args.url and not args.token:
        parser.error("--url needs --token (or COHORT_TOKEN)")
    args.screenshot = Path(args.screenshot) if args.screenshot else None
    started = time.monotonic()
    result = measure(args)
    result["total_wall_s"] = time.monotonic() - started
    print(report(result))
    print(f"The whole command took {_duration(result['total_wall_s'])}.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
