"""Sampling and training at the same time (`max_staleness`) against the synchronous loop, in one sitting.

SmolLM2-135M-Instruct on `toy_format`, sampled by vLLM's CPU engine on one core while the trainer
(the LoRA update) uses the other: k = 0 (the synchronous loop: the same two cores, the engine on the
second, the trainer on the first, each phase waiting for the other), k = 1 and k = 2 (the engine in the
sampler process of `trainer/run/sampler_process.py`), three seeds each, the same batches and settings.

It prints, per k: the median wall time per step (from the second step on: the first one waits for the
engine's first batch) and its ratio to k = 0; each side's wait share (`pipeline/trainer_wait_share`,
`pipeline/sampler_wait_share`); the reward at the last step per seed; and the reward against wall-clock
(seconds since the first step ended, mean over seeds). The ideal step for k >= 1 is the slower of the
two phases alone, measured in the k = 0 runs (sampling, and the rest of the step); the pipeline's step
is reported as a share above it.

With `--screenshot`, it then trains one more k = 1 run through the embedded stack (daphne, a real Celery
worker) and takes the manual's picture of its timeline (docs/screenshots/run-timeline-async.png).

Then it tries TRL's `AsyncGRPOTrainer` (TRL's experimental asynchronous GRPO) on the same model and batch,
in a process of its own with a time limit, and prints how far it got or its error.

    .venv/bin/python benchmarks/async_pipeline.py [--steps 12] [--seeds 0 1 2] [--out benchmarks/out/async.json]
        [--screenshot docs/screenshots/run-timeline-async.png]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

EXAMPLES, GROUP, NEW_TOKENS = 4, 4, 16


def run_config(k: int, seed: int, steps: int):
    from trainer.config import SMOLLM2_MODEL, RunConfig
    from trainer.programs.toy_format import ToyFormat

    return RunConfig(program="toy_format", model=SMOLLM2_MODEL, backend="vllm", rewards=list(ToyFormat.default_rewards),
                     steps=steps, examples_per_step=EXAMPLES, group_size=GROUP, rollouts_per_example=GROUP,
                     max_new_tokens=NEW_TOKENS, temperature=1.0, learning_rate=2e-4, micro_batch_size=EXAMPLES * GROUP,
                     eval_every=0, checkpoint_every=0, seed=seed, max_staleness=k)


class TimedReporter:
    """Keeps each step's metrics with the wall-clock second it was reported."""

    def __init__(self):
        self.steps: list[tuple[float, dict]] = []

    def status(self, state, **info):
        if state == "failed":
            print(f"    failed: {info.get('error')}", flush=True)

    def step(self, event):
        self.steps.append((time.perf_counter(), event["metrics"]))

    def should_stop(self):
        return False

    def prompts(self, event):
        pass


def one_run(k: int, seed: int, steps: int, work: Path) -> dict:
    """A run of `steps` steps; the synchronous one is pinned as the pipeline pins its two processes."""
    import torch

    from trainer.run.async_pipeline import placements
    from trainer.run.loop import Trainer

    sampler, trainer_cores = placements(torch.device("cpu"), 0)
    saved = os.sched_getaffinity(0), torch.get_num_threads()
    if k == 0 and sampler.cores:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sampler.cores))  # the engine's core
    reporter = TimedReporter()
    trainer = Trainer(run_config(k, seed, steps), work / f"k{k}-s{seed}", reporter,
                      model_cache_dir=Path.home() / ".cache" / "cohort")
    try:
        if k == 0 and trainer_cores:
            os.sched_setaffinity(0, trainer_cores)
            torch.set_num_threads(len(trainer_cores))
        state = trainer.run()
    finally:
        trainer.close()
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
        os.sched_setaffinity(0, saved[0])
        torch.set_num_threads(saved[1])
    times = [t for t, _ in reporter.steps]
    metrics = [m for _, m in reporter.steps]
    step_s = [b - a for a, b in zip(times, times[1:], strict=False)]  # step 2 on
    later = metrics[1:]
    return {
        "k": k, "seed": seed, "state": state, "step_s": step_s,
        "sampling_s": [m["pipeline/trainer_wait_share"] * s for m, s in zip(later, step_s, strict=True)],
        "trainer_wait": statistics.mean(m["pipeline/trainer_wait_share"] for m in later),
        "sampler_wait": statistics.mean(m["pipeline/sampler_wait_share"] for m in later),
        "staleness": [m["pipeline/staleness/max"] for m in metrics],
        "dropped": sum(m["pipeline/dropped_stale"] for m in metrics),
        "reward": [m["reward/mean"] for m in metrics],
        "clock": [t - times[0] for t in times],
    }


TRL_CHILD = textwrap.dedent("""
    import sys, time
    from datasets import Dataset
    from peft import LoraConfig
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
    from trainer.programs.toy_format import ToyFormat

    path, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    program = ToyFormat()
    rows = program.generate_examples("train")
    prompts = [[{"role": "user", "content": program.process_prompt(program.start(e), "answer")}] for e in rows]

    def ends_with_period(completions, **_):
        return [float(c[-1]["content"].strip().endswith(".")) for c in completions]

    args = AsyncGRPOConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=%(batch)d, num_generations=%(group)d,
                           max_completion_length=%(tokens)d, learning_rate=2e-4, logging_steps=1, report_to=[],
                           use_cpu=True, vllm_server_timeout=60, max_staleness=1)
    trainer = AsyncGRPOTrainer(model=path, reward_funcs=ends_with_period, args=args,
                               train_dataset=Dataset.from_dict({"prompt": prompts}),
                               peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    started = time.perf_counter()
    trainer.train()
    print(f"TRL_DONE {steps} steps in {time.perf_counter() - started:.1f} s")
""")


def try_trl_async(steps: int, work: Path, timeout_s: float) -> str:
    """What TRL's AsyncGRPOTrainer did on the same model and batch: its time, or its last error line."""
    from trainer.models import ensure_smollm2

    script = work / "trl_async.py"
    script.write_text(TRL_CHILD % {"batch": EXAMPLES * GROUP, "group": GROUP, "tokens": NEW_TOKENS})
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    try:
        done = subprocess.run([sys.executable, str(script), str(ensure_smollm2()), str(work / "trl-out"), str(steps)],
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as expired:
        tail = (expired.stderr or b"")[-400:]
        return f"no step within {timeout_s:.0f} s; its last words: {tail.decode(errors='replace') if isinstance(tail, bytes) else tail}"
    finished = [line for line in done.stdout.splitlines() if line.startswith("TRL_DONE")]
    if finished:
        return finished[0]
    lines = done.stderr.splitlines()
    errors = [line for line in lines if "Error" in line or "error" in line]
    frames = [line.strip() for line in lines if line.strip().startswith("File ") and "site-packages/trl/" in line]
    where = f" (raised under {frames[-1]})" if frames else ""
    return (errors[-1] + where) if errors else done.stderr[-400:]


SCREENSHOT_RUN = """
from django.contrib.auth import get_user_model
from webapp.runs.launch.check import launch_check
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Task
from webapp.runs.services import run_create
user = get_user_model().objects.create_superuser("researcher", password="{password}")
task = Task.objects.get(name="toy_format")
values = config_defaults(task, model="builtin:smollm2-135m-instruct")
values.update(steps={steps}, eval_every=0, checkpoint_every=0, learning_rate=2e-4, backend="vllm", max_staleness=1,
              examples_per_step={examples}, group_size={group}, rollouts_per_example={group}, max_new_tokens={tokens})
run = run_create(launch_check(user, task=task, values=values), name="SmolLM2 toy_format, max_staleness 1")
print("RUN=" + str(run.pk))
"""
RUN_STATE = """
from webapp.runs.models import Run
print("STATE=" + Run.objects.get(pk={run}).state)
"""
PASSWORD = "async-pipeline-screenshot"


def screenshot_timeline(path: Path, steps: int, work: Path) -> str:
    """A real k = 1 run trained by the embedded stack's worker, and its run page's timeline."""
    from benchmarks.dashboard import screenshot
    from benchmarks.servers import Stack, wait_until

    stack = Stack(work / "stack", Path.home() / ".cache" / "cohort", env={"COHORT_WORKER_CONCURRENCY": "1"})
    stack.start()
    try:
        out = stack.manage_shell(SCREENSHOT_RUN.format(password=PASSWORD, steps=steps, examples=EXAMPLES, group=GROUP,
                                                       tokens=NEW_TOKENS))
        run_id = int(next(line[4:] for line in out.splitlines() if line.startswith("RUN=")))

        def ended():
            state = next(line[6:] for line in stack.manage_shell(RUN_STATE.format(run=run_id)).splitlines()
                         if line.startswith("STATE="))
            return state if state in ("succeeded", "failed", "cancelled") else None

        state = wait_until(ended, 1800, "the screenshot's run", every_s=10)
        if state != "succeeded":
            return f"the screenshot's run {state}:\n{stack.tail()}"
        screenshot(stack.url, "researcher", PASSWORD, f"{stack.url}/runs/{run_id}/", path, selector="#timeline-panel",
                   ready="() => Number(document.getElementById('timeline')?.dataset.lanes) >= 3")
        return f"run {run_id}: {state}; its timeline is in {path}"
    finally:
        stack.stop()


def summary(runs: list[dict]) -> dict:
    by_k: dict[int, list[dict]] = {}
    for r in runs:
        by_k.setdefault(r["k"], []).append(r)
    sync = by_k[0]
    base = statistics.median(s for r in sync for s in r["step_s"])
    sampling = statistics.median(s for r in sync for s in r["sampling_s"])
    rest = statistics.median(s - a for r in sync for s, a in zip(r["step_s"], r["sampling_s"], strict=True))
    ideal = max(sampling, rest)
    out = {"sync_step_s": base, "sampling_s": sampling, "training_s": rest, "ideal_step_s": ideal, "k": {}}
    for k, rs in sorted(by_k.items()):
        step = statistics.median(s for r in rs for s in r["step_s"])
        points = min(len(r["clock"]) for r in rs)
        out["k"][k] = {
            "step_s": step, "over_sync": step / base, "over_ideal": step / ideal,
            "trainer_wait": statistics.mean(r["trainer_wait"] for r in rs),
            "sampler_wait": statistics.mean(r["sampler_wait"] for r in rs),
            "last_reward": {r["seed"]: r["reward"][-1] for r in rs},
            "max_staleness_seen": max(max(r["staleness"]) for r in rs), "dropped": sum(r["dropped"] for r in rs),
            "reward_vs_clock": [(statistics.mean(r["clock"][i] for r in rs), statistics.mean(r["reward"][i] for r in rs))
                                for i in range(points)],
        }
    return out


def report(result: dict, trl: str | None) -> str:
    s = result["summary"]
    lines = [f"SmolLM2-135M-Instruct on toy_format, {EXAMPLES} examples x {GROUP} samples x {NEW_TOKENS} new tokens a step, "
             f"{result['steps']} steps, seeds {result['seeds']}; vLLM CPU engine on one core, the trainer on the other",
             f"k = 0 phases (median): sampling {s['sampling_s']:.2f} s, the rest of the step {s['training_s']:.2f} s; "
             f"ideal pipelined step (the slower alone) {s['ideal_step_s']:.2f} s",
             "",
             f"{'k':>2} {'step s':>7} {'/ k=0':>6} {'/ ideal':>8} {'trainer wait':>13} {'sampler wait':>13} "
             f"{'staleness max':>14} {'dropped':>8}  reward at the last step per seed"]
    for k, r in s["k"].items():
        rewards = ", ".join(f"{seed}: {v:.3f}" for seed, v in sorted(r["last_reward"].items()))
        lines.append(f"{k:>2} {r['step_s']:7.2f} {r['over_sync']:6.2f} {r['over_ideal']:8.2f} {r['trainer_wait']:13.2f} "
                     f"{r['sampler_wait']:13.2f} {r['max_staleness_seen']:14.0f} {r['dropped']:8.0f}  {rewards}")
    lines += ["", "reward (mean over seeds) against seconds since the first step ended:"]
    for k, r in s["k"].items():
        lines.append(f"  k = {k}: " + "  ".join(f"{t:.0f}s {v:.2f}" for t, v in r["reward_vs_clock"]))
    if trl is not None:
        lines += ["", f"TRL AsyncGRPOTrainer on the same model and batch: {trl}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-trl", action="store_true", help="skip TRL's AsyncGRPOTrainer")
    parser.add_argument("--trl-timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    parser.add_argument("--screenshot", type=Path, default=None, help="a real k = 1 run's timeline, as a PNG here")
    parser.add_argument("--only-screenshot", action="store_true", help="skip the measured runs")
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(0)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.screenshot:
            print(screenshot_timeline(args.screenshot.resolve(), args.steps, work), flush=True)
        if args.only_screenshot:
            return 0
        for seed in args.seeds:  # k inside seed: a slow spell of the machine touches every k alike
            for k in args.ks:
                started = time.perf_counter()
                runs.append(one_run(k, seed, args.steps, work))
                print(f"  k = {k}, seed {seed}: {runs[-1]['state']} in {time.perf_counter() - started:.0f} s", flush=True)
        trl = None if args.no_trl else try_trl_async(min(args.steps, 4), work, args.trl_timeout)
    result = {"steps": args.steps, "seeds": args.seeds, "runs": runs, "summary": summary(runs), "trl_async": trl}
    print(report(result, trl))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
