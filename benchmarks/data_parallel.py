"""Rollouts per second of one against two training processes (issue 15), through the real CLI.

The toy task on the tiny model, the same global batch (examples_per_step x rollouts_per_example) and
the same steps; `num_processes = 1` against `num_processes = 2` (torch.distributed.run, gloo on the
CPU), each process single-threaded (OMP_NUM_THREADS=1, what torchrun sets), so the ratio measures the
data parallelism and not a thread pool. Rollouts per second = rollouts of a step / that step's wall
time, over the steps after the first (which pays for model loading and warm-up); the whole run's
wall time, start-up included, is printed beside it.

    .venv/bin/python benchmarks/data_parallel.py [--steps 6] [--examples 8] [--rollouts 8]

What it cannot show here: many-GPU speed. The machines lent to this project have one GPU, so the
NCCL path is measured nowhere; on a CPU, two processes share the memory bandwidth of one host.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.run.reporting import read_events  # noqa: E402


def train(processes: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    run_dir = work / f"np{processes}"
    config = {"program": "toy", "steps": args.steps, "examples_per_step": args.examples,
              "rollouts_per_example": args.rollouts, "group_size": args.rollouts, "num_processes": processes,
              "eval_every": 0, "checkpoint_every": 0, "seed": 0}
    config_path = work / f"np{processes}.json"
    config_path.write_text(json.dumps(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COHORT_MODEL_CACHE": str(work / "models")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trainer", "train", "--config", str(config_path), "--run-dir",
                           str(run_dir), "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"num_processes={processes} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    steps = [e for e in read_events(run_dir / "events.jsonl") if e.get("type") == "step"]
    timed = steps[1:] or steps
    step_s = statistics.fmean(e["metrics"]["time/step_s"] for e in timed)
    sampling_s = statistics.fmean(e["metrics"]["time/sampling_s"] for e in timed)
    rollouts = statistics.fmean(len(e["rollouts"]) for e in timed)
    return {"processes": processes, "rollouts_per_step": rollouts, "step_s": step_s, "sampling_s": sampling_s,
            "rollouts_per_s": rollouts / step_s, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--examples", type=int, default=8, help="examples per step (the global batch)")
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per example")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cohort-dp-") as tmp:
        work = Path(tmp)
        one, two = train(1, args, work), train(2, args, work)
    print(f"toy task, tiny model, {args.examples} examples x {args.rollouts} rollouts per step, {args.steps} steps, "
          "one thread per process")
    print(f"{'processes':>9} {'rollouts/step':>13} {'step s':>8} {'sampling s':>10} {'rollouts/s':>10} {'run wall s':>10}")
    for row in (one, two):
        print(f"{row['processes']:>9} {row['rollouts_per_step']:>13.0f} {row['step_s']:>8.2f} {row['sampling_s']:>10.2f} "
              f"{row['rollouts_per_s']:>10.1f} {row['wall_s']:>10.1f}")
    print(f"2 processes / 1 process: {two['rollouts_per_s'] / one['rollouts_per_s']:.2f}x rollouts per second "
          f"({one['wall_s'] / two['wall_s']:.2f}x on the whole run's wall time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
