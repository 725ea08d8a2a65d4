"""Peak memory of Cohort's sampling and policy update at a real vocabulary: before and after the
change that stopped materializing vocabulary-wide logits, and against TRL 1.16's `GRPOTrainer`.

    .venv/bin/python benchmarks/memory.py                                   # CPU: width 48, float32
    .venv/bin/python benchmarks/memory.py --device cuda --hidden-size 1536  # the real 1.5B width, bf16
    .venv/bin/python benchmarks/memory.py --phases update/after,update/trl --gradient-checkpointing

Model: `build_shaped_model` (random weights, Qwen2.5-1.5B's architecture: vocabulary 151,936, 28
layers, 12 query / 2 kv heads, tied embeddings, ChatML template, full-vocabulary tokenizer). The
vocabulary makes the logits, so it is always the real one; a CPU gets width 48. LoRA r=16, alpha 64,
dropout 0.05 on all projections (`load_policy_model`); float32 on CPU, bf16 on CUDA.

Batch (every phase): --rows (16) = 4 chat prompts (system + user, 45-60 tokens) x rows/4 samples,
--new-tokens (512) each. Updates score fixed random completions of exactly --new-tokens ids with
fixed group-normalized advantages; sampling reports how many tokens it drew.

Phases, each in a fresh subprocess so that peaks never mix:
  sample/before  the hf backend's previous `_generate_chunk` (copied in memory_phases.py): generate(
                 output_logits=True) keeps every step's float32 logits, then stack, / temperature,
                 log_softmax.
  sample/after   `get_backend("hf").generate(...)`: chosen-token log-probs recorded on the fly.
  update/before  `PolicyUpdater.update` with the previous `sequence_logprobs` patched in (the model's
                 full (B, C, V) logits, upcast, gather, logsumexp); the rest is today's updater.
  update/after   `PolicyUpdater.update` as it is (micro-batch = all rows, beta 0, "token"
                 aggregation, one pass, no sampler log-probs): one train forward and backward
                 through the chunked, checkpointed lm_head, grad-norm clip, AdamW step. Like TRL, it
                 takes the old log-probs from that pass, detached (no separate pass with one pass
                 over the batch; a no-grad pass, where one runs, peaks below the training pass).
  update/details the same update with per-token details on (UpdateConfig.token_topk = 5, what
                 RunConfig.token_details = "all" sets): the training pass also takes each position's
                 entropy and top-5 from its chunk's logits, once (not again in the checkpointed
                 chunks' backward recomputation). It should peak where update/after does.
  update/trl     `GRPOTrainer` (use_vllm=False, loss_type "dapo" = Cohort's "token", and Cohort's
                 beta, epsilons, temperature, learning rate, max_grad_norm; torch AdamW; same dtype and
                 gradient checkpointing) on the same LoRA model (same weights and adapter init), a
                 zero reward, a 4-prompt dataset. Measured: `compute_loss` on the dict
                 `_generate_and_score_completions` returns (prompt_ids/mask, completion_ids/mask,
                 advantages, num_items_in_batch), backward, clip_grad_norm_, optimizer.step(). With
                 num_iterations=1, one accumulation step and no vLLM, TRL leaves old_per_token_logps
                 out and uses the current log-probs, detached, as Cohort does. TRL's log-probs come
                 from its fused LM head (online logsumexp over 4,096-token x 32,768-vocabulary tiles,
                 plus entropy): a Triton kernel over the completion positions on CUDA; on a CPU, the
                 same tiles in torch over every position, prompt included.

Measured, after setup (model, batch, updater or trainer, optimizer; a sampling warm-up):
  CPU   peak RSS minus RSS just before the phase. Before it, malloc's free memory goes back to the
        system and the kernel's high-water mark is reset to the current RSS (/proc/self/clear_refs);
        the peak is read as VmHWM, the mark getrusage().ru_maxrss reports, except that ru_maxrss
        cannot be reset and in a child also keeps the parent's RSS from before exec (~100 MiB above
        the child's pre-phase RSS here), which would hide that much growth ("slack" flags such a
        gap). MALLOC_MMAP_THRESHOLD_=1 MiB makes RSS follow live tensors, not heap fragments.
        Guard, as this machine is shared: an old path whose estimate exceeds free memory minus
        --reserve-gib is not started, and a child whose RSS passes that is stopped (its figure is
        then a lower bound, ">").
  CUDA  max_memory_allocated() after (peak stats reset) minus memory_allocated() before: tensors only.

How to read: "base" is the loaded model etc., "extra" what the phase adds on top; "x naive" divides
it by rows x new tokens x vocabulary x 4 bytes, one float32 (rows, tokens, vocab) logits tensor,
several of which the old paths held. PASS / FAIL lines, not assertions: Cohort's update within 1.2x
of TRL's; Cohort's sampling extra under 10% of the naive size. On a CPU at width 48 the updates are
mostly layer activations (without checkpointing) plus, for TRL, its CPU fallback's float32 tiles
and their torch temporaries; on CUDA at the real width, activations plus each side's log-prob
kernel, the comparison that matters for training. The default CPU run takes about 6-7 minutes on 2
shared cores, mostly generate() (a 151,936-way softmax and multinomial per step, 512 steps, twice).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.memory_phases import PROMPTS  # noqa: E402
from benchmarks.memory_probe import child, kib  # noqa: E402

PHASES = ("sample/before", "sample/after", "update/before", "update/after", "update/details", "update/trl")
SHAPE_DEFAULT = "qwen2.5-1.5b"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                   help="auto: bf16 on cuda, float32 on cpu")
    p.add_argument("--shape", default=SHAPE_DEFAULT, help="a trainer.models.shaped.SHAPES key")
    p.add_argument("--hidden-size", type=int, default=None, help="default: 48 on cpu, the shape's real width on cuda")
    p.add_argument("--num-layers", type=int, default=None, help="default: the shape's (28)")
    p.add_argument("--rows", type=int, default=16, help="completions per batch (a multiple of 4 prompts, >= 8)")
    p.add_argument("--new-tokens", type=int, default=512)
    p.add_argument("--gradient-checkpointing", action="store_true", help="both updaters recompute layer activations")
    p.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset of " + ", ".join(PHASES))
    p.add_argument("--threads", type=int, default=None, help="torch threads; default 1 on cpu, where the width-48 "
                   "model's tiny ops lose more to contention on shared cores (5x here) than big ones gain")
    p.add_argument("--reserve-gib", type=float, default=3.0, help="cpu: memory left to the rest of the machine")
    p.add_argument("--model-dir", default=None, help="where to build / reuse the shaped model")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # internal: run one phase, print JSON
    args = p.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.dtype == "auto":
        args.dtype = "bfloat16" if args.device == "cuda" else "float32"
    if args.device == "cpu":
        args.hidden_size = args.hidden_size or 48
        args.threads = args.threads or 1
    if args.rows % len(PROMPTS) or args.rows < 2 * len(PROMPTS):
        p.error(f"--rows must be a multiple of {len(PROMPTS)} and >= {2 * len(PROMPTS)} (TRL needs groups of >= 2)")
    args.phases = [s.strip() for s in args.phases.split(",") if s.strip()]
    if bad := [s for s in args.phases if s not in PHASES]:
        p.error(f"unknown phases {bad}; choose from {', '.join(PHASES)}")
    return args


# ---- The parent: build the model, run each phase in its own process, print the table -------------

# The CPU guard's estimate of the old paths' peaks, in float32 (rows, tokens, vocab) logits tensors
# (measured: 3.0, and 4.0 + the update's activations, 0.7 at width 48): not starting such a phase beats
# stopping it once it has taken the memory.
OLD_COPIES = {"sample/before": 3.1, "update/before": 4.8}


def run_phase(phase: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", phase, "--device", args.device, "--dtype", args.dtype,
           "--rows", str(args.rows), "--new-tokens", str(args.new_tokens), "--model-dir", args.model_dir,
           "--reserve-gib", str(args.reserve_gib), "--threads", str(args.threads or 0)]
    cmd += ["--gradient-checkpointing"] if args.gradient_checkpointing else []
    # Blocks of 1 MiB or more are mmapped and unmapped when freed, so RSS follows live tensors. With
    # glibc's default (a heap for blocks up to 32 MiB) the CPU sampling loop's per-step vocabulary-wide
    # tensors fragment the heap and its RSS grows by 250-500 MiB at 128 tokens, run to run. Costs ~20%.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20), "TOKENIZERS_PARALLELISM": "false",
           "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        return {"phase": phase, "error": f"child exited {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def main() -> None:
    args = parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA is not available (pass --device cpu)")
    from trainer.models.shaped import build_shaped_model, shape_config

    t0 = time.perf_counter()
    spec = shape_config(args.shape, hidden_size=args.hidden_size, num_layers=args.num_layers)
    name = f"cohort-bench-{args.shape}-h{spec['hidden_size']}-l{spec['num_hidden_layers']}-{args.dtype}"
    args.model_dir = str(build_shaped_model(args.model_dir or Path(tempfile.gettempdir()) / name, args.shape,
                                            hidden_size=args.hidden_size, num_layers=args.num_layers,
                                            dtype=getattr(torch, args.dtype)))
    vocab = spec["vocab_size"]
    naive = args.rows * args.new_tokens * vocab * 4 / 2**20  # MiB
    gpu = f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else ""
    print(f"model {args.shape}: width {spec['hidden_size']}, {spec['num_hidden_layers']} layers, vocabulary {vocab:,}, "
          f"{args.dtype} on {args.device}{gpu}, torch threads {args.threads or torch.get_num_threads()}; "
          f"LoRA r=16 on all projections; gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}")
    print(f"batch: {args.rows} rows = {len(PROMPTS)} chat prompts x {args.rows // len(PROMPTS)} samples, "
          f"{args.new_tokens} new tokens each")
    print(f"naive float32 (rows, new tokens, vocab) logits: {args.rows} x {args.new_tokens} x {vocab:,} x 4 B = "
          f"{naive:,.0f} MiB\n")

    results: dict[str, dict] = {}
    for phase in args.phases:
        spare = kib("MemAvailable", "/proc/meminfo") / 1024 - args.reserve_gib * 1024 if args.device == "cpu" else 1e30
        if phase in OLD_COPIES and OLD_COPIES[phase] * naive > spare:
            results[phase] = {"phase": phase, "skipped": f"not run: needs about {OLD_COPIES[phase] * naive:,.0f} MiB, "
                              f"the machine can spare {spare:,.0f} (try fewer --rows / --new-tokens)"}
        else:
            results[phase] = run_phase(phase, args)
        r = results[phase]
        print(f"  {phase:14s} " + (f"{r['seconds']:6.1f} s" if "seconds" in r else "skipped"), flush=True)

    def extra(phase: str) -> float | None:  # None: not run, or failed other than by memory
        return results.get(phase, {}).get("extra_mib")

    print(f"\n{'phase':14s} {'base MiB':>9s} {'extra MiB':>10s} {'x naive':>8s} {'seconds':>8s}  notes")
    for phase, r in results.items():
        notes = [r[k] for k in ("skipped", "error") if r.get(k)]
        if "tokens" in r:
            lens = f" (per row {r['min_len']}-{r['max_len']})" if "min_len" in r else ""
            notes.insert(0, f"{r['tokens']:,} completion tokens{lens}")
        if "details" in r:
            notes.append(f"details of {r['details']} rows")
        if r.get("slack_mib", 0) > 16:
            notes.append(f"slack {r['slack_mib']:.0f} MiB")
        e = extra(phase)
        shown = "-" if e is None else (">" if r.get("error") else "") + f"{e:,.0f}"
        times = f"{r['seconds']:8.1f}" if "seconds" in r else f"{'-':>8s}"
        base = f"{r['base_mib']:9,.0f}" if "base_mib" in r else f"{'-':>9s}"
        print(f"{phase:14s} {base} {shown:>10s} {'-' if e is None else f'{e / naive:.3f}':>8s} {times}  "
              + "; ".join(notes))

    print()
    for label, a, b in (("sampling, before / after", "sample/before", "sample/after"),
                        ("update, before / after", "update/before", "update/after"),
                        ("update, details on / off", "update/details", "update/after"),
                        ("update, Cohort / TRL GRPOTrainer", "update/after", "update/trl"),
                        ("update, Cohort before / TRL", "update/before", "update/trl")):
        ea, eb = extra(a), extra(b)
        if ea is None or eb is None or results[b].get("error"):
            missing = " and ".join(x for x in (a, b) if extra(x) is None or (x == b and results[b].get("error")))
            print(f"{label:33s}      -    ({missing} not measured)")
        else:
            at_least = ">=" if results[a].get("error") else "  "  # a stopped by memory used more
            print(f"{label:33s} {at_least}{ea / max(eb, 1.0):7.2f}x")
    print()
    cohort, trl, sample = extra("update/after"), extra("update/trl"), extra("sample/after")
    details = extra("update/details")
    if cohort is not None and details is not None and not results["update/details"].get("error"):
        # 64 MiB: one chunk of float32 logits (LOGITS_CHUNK_ELEMENTS), the most the details could add.
        verdict = "PASS" if details <= cohort + 64 else "FAIL"
        print(f"{verdict}  Token details add at most one chunk of logits to the update's peak: {details:,.0f} vs "
              f"{cohort:,.0f} + 64 MiB")
    if cohort is not None and trl is not None and not results["update/trl"].get("error"):
        verdict = "PASS" if cohort <= 1.2 * trl else "FAIL"
        print(f"{verdict}  Cohort's update peak within 1.2x of TRL's: {cohort:,.0f} vs 1.2 x {trl:,.0f} MiB")
    if sample is not None and not results["sample/after"].get("error"):
        verdict = "PASS" if sample < 0.1 * naive else "FAIL"
        print(f"{verdict}  Cohort's sampling extra under 10% of the naive logits: {sample:,.0f} vs {0.1 * naive:,.0f} MiB")
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s (model build included)")


if __name__ == "__main__":
    main()
