"""Time one GRPO-like training step (sample G completions + one LoRA policy update) and its peak memory.

    python benchmarks/train_step.py                       # tiny local Llama on CPU (< 1 min)
    python benchmarks/train_step.py --model-size 0.5b     # random ~0.5B Qwen2 on CUDA in bf16

Nothing is downloaded. The tiny model is built with `trainer.models.build_tiny_model`; the 0.5b
model is a random-initialized Qwen2 from a config shaped like Qwen2.5-0.5B (24 layers, width 896,
vocabulary 151,936, tied embeddings) and reuses the tiny tokenizer to encode prompts: the random
model rarely samples EOS, so every completion runs to --max-new-tokens, which is what a timing wants
(ids beyond the tiny vocabulary decode to nothing; training uses the sampled ids, not the text).

Each step: the hf backend samples G completions of one prompt, a toy reward (share of distinct
tokens) is normalized within the group (GRPO, MMGRPO Eq. 2), and `PolicyUpdater.update` recomputes
the old log-probs and takes one optimizer step. The first step is a warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from trainer.backends.hf import HFBackend  # noqa: E402
from trainer.models import build_tiny_model  # noqa: E402
from trainer.policy import PolicyExample, PolicyUpdater, UpdateConfig, wrap_with_lora  # noqa: E402

PROMPTS = [
    "Question: A shop sells 12 apples and then 5 more. How many apples? Answer:",
    "Rewrite the request without personal data: my name is Sara and my e-mail is sara@example.com.",
    "Claim: The film was released in 1994. Is it supported? Verdict:",
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-size", choices=("tiny", "0.5b"), default="tiny")
    parser.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="measured steps (after one warm-up step)")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--device", default=None, help="default: cpu for tiny, cuda for 0.5b")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: 1 for the tiny model on CPU, whose ops are too small to "
        "gain from threads and lose a lot to contention on shared cores; torch's default otherwise)",
    )
    parser.add_argument("--model-dir", default=None, help="where to build/reuse the tiny model")
    return parser.parse_args()


def group_advantages(rewards: list[float], eps: float = 1e-4) -> list[float]:
    """(r - mean) / (std + eps) within one group; unbiased std; a constant group gets 0 (docs/explanation/architecture.md)."""
    mean = statistics.fmean(rewards)
    std = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
    return [0.0 if std == 0.0 else (r - mean) / (std + eps) for r in rewards]


def build_model(args: argparse.Namespace, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    model_dir = args.model_dir or os.path.join(tempfile.gettempdir(), "cohort-bench-tiny-llama")
    tiny_path = build_tiny_model(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    if args.model_size == "tiny":
        base = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32).to(device)
        return base, tokenizer, torch.float32
    config = Qwen2Config(
        vocab_size=151_936,
        hidden_size=896,
        intermediate_size=4_864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32_768,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        base = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return base, tokenizer, dtype


def main() -> None:
    args = parse_args()
    device = torch.device(args.device or ("cpu" if args.model_size == "tiny" else "cuda"))
    threads = args.threads or (1 if args.model_size == "tiny" and device.type == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(
            "CUDA is not available: --model-size 0.5b is meant for a GPU (pass --device cpu to force it)"
        )

    base, tokenizer, dtype = build_model(args, device)
    model = wrap_with_lora(base)  # MMGRPO Section 5 adapter
    n_params = sum(p.numel() for p in model.parameters())
    n_lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    backend = HFBackend(model, tokenizer, batch_size=args.group_size)
    updater = PolicyUpdater(
        model,
        tokenizer,
        UpdateConfig(learning_rate=1e-5, micro_batch_size=args.micro_batch_size, max_grad_norm=1.0),
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    sample_times, update_times, tokens_per_s = [], [], []
    for step in range(args.steps + 1):
        prompt = PROMPTS[step % len(PROMPTS)]
        _sync(device)
        t0 = time.perf_counter()
        (group,) = backend.generate([prompt], args.group_size, max_new_tokens=args.max_new_tokens, seed=step)
        _sync(device)
        t1 = time.perf_counter()
        rewards = [len(set(s.token_ids)) / max(len(s.token_ids), 1) for s in group]
        examples = [
            PolicyExample(prompt, s.text, a, completion_ids=s.token_ids)
            for s, a in zip(group, group_advantages(rewards), strict=True)
        ]
        stats = updater.update(examples)
        _sync(device)
        t2 = time.perf_counter()
        if step > 0:  # step 0 warms up allocators and kernels
            sample_times.append(t1 - t0)
            update_times.append(t2 - t1)
            tokens_per_s.append(stats["tokens_per_s"])

    completion_tokens = int(stats["completion_tokens"])
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    print(
        f"model {args.model_size}: {n_params / 1e6:.2f}M params ({n_lora / 1e6:.3f}M LoRA), "
        f"{dtype}, device {device}, torch threads {torch.get_num_threads()}"
    )
    print(
        f"G={args.group_size} completions x {args.max_new_tokens} new tokens max "
        f"({completion_tokens} completion tokens in the last step), {args.steps} measured steps + 1 warm-up"
    )
    med_s, med_u = statistics.median(sample_times), statistics.median(update_times)
    print(f"sampling   median {med_s:8.3f} s   (min {min(sample_times):.3f})")
    print(
        f"update     median {med_u:8.3f} s   (min {min(update_times):.3f}), {statistics.median(tokens_per_s):.0f} tok/s"
    )
    print(f"step       median {med_s + med_u:8.3f} s")
    print(f"peak RSS   {rss_mib:8.0f} MiB (whole process)")
    if device.type == "cuda":
        print(f"CUDA max allocated {torch.cuda.max_memory_allocated(device) / 2**20:8.0f} MiB")
    else:
        print("CUDA max allocated n/a (CPU run)")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
