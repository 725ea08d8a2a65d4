"""What per-token details cost a real training step: SmolLM2-135M-Instruct on `toy_format`, the same run
twice in one process, `token_details = "all"` and `"off"`, their steps alternating so both see the same
machine load. Prints each side's median step and update time (the first step of each is a warm-up and
not counted), their ratios, the step event's size, and checks that the details change nothing the
run trains on (the same seed gives the same rewards and losses on both sides).

    .venv/bin/python benchmarks/token_details_step.py                  # ~4 min on 2 CPU cores
    .venv/bin/python benchmarks/token_details_step.py --steps 8 --examples 4

The model comes from the model cache `make model` fills (~/.cache/cohort); nothing is downloaded.
Step time is the loop's own `time/step_s` (sampling, rewards, update, and with details on, building
every call's tokens: decoding the pieces, the fork threshold, the tokens/... metrics).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Events:
    """A reporter that keeps nothing (the benchmark calls train_step itself)."""

    def status(self, state, **info):
        pass

    def step(self, event):
        pass

    def should_stop(self):
        return False


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6, help="measured steps per side (after one warm-up step)")
    p.add_argument("--examples", type=int, default=2, help="examples per step")
    p.add_argument("--group-size", type=int, default=8, help="rollouts per example (one group each)")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--model-cache", default=None, help="default: the trainer's model cache (~/.cache/cohort)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: on shared cores, two OpenMP "
                   "threads wait at every barrier for whichever one another process preempted; measured here, "
                   "steps of 10 s took 70-200 s while other tests ran)")
    return p.parse_args(argv)


def make_trainer(mode: str, args, work: Path):
    from trainer.config import SMOLLM2_MODEL, RunConfig
    from trainer.programs.toy_format import ToyFormat
    from trainer.run.loop import Trainer

    values = {**ToyFormat.suggested_config, **ToyFormat.model_suggestions[SMOLLM2_MODEL]}
    values.update(program="toy_format", steps=args.steps + 1, examples_per_step=args.examples,
                  group_size=args.group_size, rollouts_per_example=args.group_size, max_new_tokens=args.max_new_tokens,
                  micro_batch_size=args.examples * args.group_size, eval_every=0, checkpoint_every=0, seed=0,
                  token_details=mode)
    return Trainer(RunConfig(**values), work / mode, Events(), model_cache_dir=args.model_cache)


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch

    from trainer.rollouts.trajectory import jsonable

    torch.set_num_threads(args.threads)

    work = Path(tempfile.mkdtemp(prefix="token-details-step-"))
    started = time.perf_counter()
    sides = {mode: make_trainer(mode, args, work) for mode in ("all", "off")}
    print(f"SmolLM2-135M-Instruct on toy_format, CPU, torch threads {torch.get_num_threads()}: "
          f"{args.examples} examples x {args.group_size} rollouts x up to {args.max_new_tokens} new tokens a step; "
          f"1 warm-up + {args.steps} measured steps per side, alternating")
    results: dict[str, list[dict]] = {mode: [] for mode in sides}
    for step in range(1, args.steps + 2):
        for mode, trainer in sides.items():
            result = trainer.train_step(step)
            trainer.step = step
            event = jsonable({"step": step, "metrics": result.metrics,
                              "rollouts": [t.to_dict() for t in result.trajectories],
                              "groups": [g.to_dict() for g in result.groups]})
            results[mode].append({"metrics": result.metrics, "bytes": len(json.dumps(event))})
        print(f"  step {step}: all {results['all'][-1]['metrics']['time/step_s']:.2f} s, "
              f"off {results['off'][-1]['metrics']['time/step_s']:.2f} s", flush=True)

    def median(mode: str, key: str) -> float:
        return statistics.median(r["metrics"][key] for r in results[mode][1:])

    print(f"\n{'':24s} {'all':>9s} {'off':>9s} {'all / off':>10s}")
    for label, key in (("step, median s", "time/step_s"), ("update, median s", "time/update_s"),
                       ("sampling, median s", "time/sampling_s")):
        a, o = median("all", key), median("off", key)
        print(f"{label:24s} {a:9.3f} {o:9.3f} {a / o:9.3f}x")
    a_bytes = statistics.median(r["bytes"] for r in results["all"][1:])
    o_bytes = statistics.median(r["bytes"] for r in results["off"][1:])
    print(f"{'step event, median KiB':24s} {a_bytes / 1024:9.1f} {o_bytes / 1024:9.1f} {a_bytes / o_bytes:9.3f}x "
          "(JSON, before the store compresses it)")
    tokens = [r["metrics"]["completion_tokens"] for r in results["all"][1:]]
    print(f"completion tokens a step: median {statistics.median(tokens):.0f}")
    last = results["all"][-1]["metrics"]
    print("last step's token metrics: " + ", ".join(f"{k.removeprefix('tokens/')} {v:.4f}"
                                                     for k, v in last.items() if k.startswith("tokens/")))
    same = all(a["metrics"].get(k) == o["metrics"].get(k) for a, o in zip(results["all"], results["off"], strict=True)
               for k in ("reward/mean", "loss", "grad_norm"))
    print(("PASS" if same else "FAIL") + "  the details change nothing trained: same rewards, losses and gradient norms")
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
