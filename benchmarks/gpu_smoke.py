"""One command for whoever has a GPU: a few training steps of each GPU path, timed, and a non-zero
exit on any failure. Runs as is on one H100 in a few minutes, with no network: the model is a random
Qwen2.5-1.5B-shaped one built locally (`trainer/models/shaped.py`), the task the toy program.

Cases, each `python -m trainer train` in its own process (as a worker runs a run):
- `hf-bf16-checkpointing`: the HF backend, bf16 weights, gradient checkpointing on;
- `fsdp-one-process`: `sharding = "fsdp"` on one process (FSDP2 over the decoder layers);
- `nvml-telemetry`: the same run's NVML metrics (GPU utilisation, power) must be there;
- `vllm-sleep-mode`: `backend = "vllm"` with `vllm_enable_sleep_mode`, where vLLM is installed
  and has sleep mode (CUDA); skipped with the reason where it is not;
- `token-details-all` / `token-details-off`: the first case's run with `token_details = "all"` (every
  call's per-token details; the default, so the cases above have them too) and `"off"`: the calls
  must carry tokens with the trainer's log-probs and entropies, and the tokens/... metrics must be
  there; the last line compares the two's step time and peak GPU memory.

For each it prints the median step time, update tokens/s and peak GPU memory (torch's
max_memory_allocated, from the run's own system metrics).

    .venv/bin/python benchmarks/gpu_smoke.py                         # on a GPU
    .venv/bin/python benchmarks/gpu_smoke.py --device cpu --hidden-size 48 --num-layers 2 --steps 2 --max-new-tokens 8
"""

from __future__ import annotations

import argparse
import importlib.util
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


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--shape", default="qwen2.5-1.5b")
    p.add_argument("--hidden-size", type=int, default=None, help="narrow the shape (a CPU check)")
    p.add_argument("--num-layers", type=int, default=None)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--work-dir", type=Path, default=None)
    return p.parse_args(argv)


def vllm_skip_reason(device: str) -> str | None:
    """Why the vLLM case cannot run here, or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install 'cohort[vllm]')"
    if device != "cuda":
        return "vLLM's sleep mode needs CUDA (vLLM: \"Sleep mode is not supported on current platform\")"
    return None


def cases(args) -> list[tuple[str, dict, str | None]]:
    """(name, RunConfig changes, reason to skip or None)."""
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    base = {"dtype": dtype, "device": args.device}
    return [
        ("hf-bf16-checkpointing", {**base, "gradient_checkpointing": "on"}, None),
        ("fsdp-one-process", {**base, "sharding": "fsdp"}, None),
        ("nvml-telemetry", {**base}, None if args.device == "cuda" else "NVML reads a GPU"),
        ("vllm-sleep-mode", {**base, "backend": "vllm", "vllm_enable_sleep_mode": True}, vllm_skip_reason(args.device)),
        ("token-details-all", {**base, "gradient_checkpointing": "on", "token_details": "all"}, None),
        ("token-details-off", {**base, "gradient_checkpointing": "on", "token_details": "off"}, None),
    ]


def run_case(name: str, changes: dict, model: Path, args, work: Path) -> dict:
    config = {"program": "toy", "model": str(model), "steps": args.steps, "examples_per_step": 4, "group_size": 4,
              "rollouts_per_example": 4, "max_new_tokens": args.max_new_tokens,
              "max_context_length": args.max_new_tokens + 256, "micro_batch_size": 8, "learning_rate": 1e-5,
              "rewards": [{"name": "char_f1"}], "eval_every": 0, "checkpoint_every": 0, **changes}
    run_dir = work / name
    config_path = work / f"{name}.json"
    config_path.write_text(json.dumps(config))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "trainer", "train", "--config", str(config_path), "--run-dir",
                           str(run_dir), "--quiet"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}\n{done.stderr[-3000:]}")
    from trainer.run.reporting import read_events

    events = [e for e in read_events(run_dir / "events.jsonl") if e.get("type") == "step"]
    steps = [e["metrics"] for e in events]
    if len(steps) != args.steps:
        raise RuntimeError(f"{len(steps)} steps logged, {args.steps} expected")
    if name == "token-details-all":
        check_token_details(events)
    if name == "nvml-telemetry" and not all("system/gpu_util" in m for m in steps):
        raise RuntimeError("no NVML metrics (system/gpu_util) in the steps: is nvidia-ml-py installed?")
    timed = steps[1:] or steps  # the first step pays for warm-up
    return {"step_s": statistics.median(m["time/step_s"] for m in timed),
            "tokens_per_s": statistics.median(m.get("tokens_per_s", 0.0) for m in timed),
            "peak_gpu_gb": max((m.get("system/gpu_mem_peak_gb", 0.0) for m in steps), default=0.0),
            "wall_s": time.perf_counter() - started}


def check_token_details(events: list[dict]) -> None:
    """Every call of every step carries its tokens (pieces, trainer log-probs, entropies of one length),
    and every step its tokens/... metrics."""
    for event in events:
        for call in (c for r in event["rollouts"] for c in r["calls"]):
            tokens = call.get("tokens") or {}
            if not tokens.get("pieces") or not len(tokens["pieces"]) == len(tokens.get("trainer", [])) == len(
                    tokens.get("entropy", [])):
                raise RuntimeError(f"step {event['step']}: a call without complete token details: {sorted(tokens)}")
        if "tokens/entropy/mean" not in event["metrics"]:
            raise RuntimeError(f"step {event['step']}: no tokens/entropy/mean metric")


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from trainer.models.shaped import build_shaped_model

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU: torch sees no CUDA device (use --device cpu for a small CPU check)", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="gpu-smoke-"))
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = build_shaped_model(work / "model", args.shape, hidden_size=args.hidden_size, num_layers=args.num_layers,
                               dtype=dtype, seed=0)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print(f"{args.shape} (width {args.hidden_size or 'full'}, layers {args.num_layers or 'full'}) on {args.device}: "
          f"{args.steps} steps of 4 examples x 4 rollouts x {args.max_new_tokens} new tokens per case")
    print(f"{'case':24s} {'result':8s} {'step s':>8s} {'tokens/s':>10s} {'peak GPU GB':>12s}")
    failed = 0
    done: dict[str, dict] = {}
    for name, changes, skip in cases(args):
        if skip:
            print(f"{name:24s} {'skipped':8s} ({skip})")
            continue
        try:
            r = run_case(name, changes, model, args, work)
        except Exception as exc:  # report every case, then fail the whole command
            failed += 1
            print(f"{name:24s} {'FAILED':8s} {exc}")
            continue
        print(f"{name:24s} {'ok':8s} {r['step_s']:8.2f} {r['tokens_per_s']:10.1f} {r['peak_gpu_gb']:12.2f}")
        done[name] = r
    if "token-details-all" in done and "token-details-off" in done:
        on, off = done["token-details-all"], done["token-details-off"]
        print(f"token details all / off: step time {on['step_s'] / off['step_s']:.3f}x, peak GPU memory "
              f"{on['peak_gpu_gb']:.2f} vs {off['peak_gpu_gb']:.2f} GB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
