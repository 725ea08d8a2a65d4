"""Cohort's mean token entropy against TRL's, on the same prompts and completions: SmolLM2-135M-Instruct,
the `toy_format` prompts, completions sampled by Cohort's hf backend.

What each side computes, per completion token t: the entropy H = -sum_v p_v log p_v (nats) of the
policy's next-token distribution p = softmax(logits / temperature); the logged figure is the mean
over every completion token of the batch (a masked mean over tokens, not over sequences first).

- Cohort: `sequence_logprobs_with_details` (trainer/policy/logprobs.py), eval mode, no grad, the
  figure the step metric `tokens/entropy/mean` reports.
- TRL 1.16, as `GRPOTrainer` logs `entropy`: `add_fused_lm_head(model, temperature,
  outputs=("log_probs", "entropy"))` patches the model (GRPOTrainer.__init__ does this), then
  `GRPOTrainer._get_per_token_logps_and_entropies(..., compute_entropy=True)` (TRL's own method,
  unwrapped from its profiling decorator and called with the one attribute it reads,
  `accelerator.autocast`) on prompt ids left-padded and
  completion ids right-padded, the mask of the completion tokens, and `global_masked_mean`:
  sum(entropy * mask) / sum(mask); both on the whole batch, as the trainer calls it (completions
  right-padded; the toy_format prompts are all one length), and on each (prompt, completion) alone,
  unpadded. Also TRL's utility `entropy_from_logits` on the model's full logits / T.

    .venv/bin/python benchmarks/token_entropy_trl.py             # ~1.5 min on 2 CPU cores
    .venv/bin/python benchmarks/token_entropy_trl.py --examples 16 --samples 8
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=int, default=8, help="toy_format prompts")
    p.add_argument("--samples", type=int, default=4, help="completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--temperatures", default="1.0,0.7", help="sampling and scoring temperatures, comma-separated")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: steady on shared cores)")
    return p.parse_args(argv)


def sample(model, tok, prompts, args, temperature):
    """Prompt messages and sampled completion ids, one row per completion."""
    from trainer.backends.hf import HFBackend

    groups = HFBackend(model, tok).generate(prompts, args.samples, temperature=temperature,
                                            max_new_tokens=args.max_new_tokens, seed=0)
    rows = [(prompt, s.token_ids) for prompt, group in zip(prompts, groups, strict=True) for s in group]
    return [(p, ids) for p, ids in rows if ids]


def cohort_mean_entropy(model, tok, rows, temperature) -> float:
    import torch

    from trainer.policy import PolicyExample, tokenize_examples
    from trainer.policy.logprobs import sequence_logprobs_with_details

    batch = tokenize_examples(tok, [PolicyExample(p, "", 0.0, completion_ids=ids) for p, ids in rows],
                              max_context_length=4096)
    with torch.no_grad():
        _, entropy, _, _ = sequence_logprobs_with_details(model.eval(), batch, temperature=temperature, topk=0)
    mask = batch.completion_mask
    return float((entropy * mask).sum() / mask.sum())


def trl_inputs(tok, rows):
    """GRPOTrainer's layout: prompt ids left-padded, completion ids right-padded, and their masks."""
    import torch

    from trainer.rollouts.prompts import encode_prompt

    prompts = [encode_prompt(tok, p) for p, _ in rows]
    p_width, c_width = max(map(len, prompts)), max(len(ids) for _, ids in rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    prompt_ids = torch.full((len(rows), p_width), pad)
    prompt_mask = torch.zeros((len(rows), p_width), dtype=torch.long)
    completion_ids = torch.full((len(rows), c_width), pad)
    completion_mask = torch.zeros((len(rows), c_width), dtype=torch.long)
    for i, (p_ids, (_, c_ids)) in enumerate(zip(prompts, rows, strict=True)):
        prompt_ids[i, p_width - len(p_ids):], prompt_mask[i, p_width - len(p_ids):] = torch.tensor(p_ids), 1
        completion_ids[i, :len(c_ids)], completion_mask[i, :len(c_ids)] = torch.tensor(c_ids), 1
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def trl_grpo_mean_entropy(fused_model, tok, rows, *, batched: bool) -> float:
    """TRL's GRPOTrainer figure: its `_get_per_token_logps_and_entropies` and `global_masked_mean`."""
    import torch
    from trl import GRPOTrainer

    trainer_self = types.SimpleNamespace(accelerator=types.SimpleNamespace(autocast=contextlib.nullcontext))
    method = GRPOTrainer._get_per_token_logps_and_entropies.__wrapped__  # without TRL's profiling wrapper
    total = count = 0.0
    for part in ([rows] if batched else [[r] for r in rows]):
        prompt_ids, prompt_mask, completion_ids, mask = trl_inputs(tok, part)
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, mask], dim=1)
        with torch.no_grad():
            _, entropies, _ = method(
                trainer_self, fused_model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True)
        total += float((entropies * mask).sum())
        count += float(mask.sum())
    return total / count


def trl_utility_mean_entropy(model, tok, rows, temperature) -> float:
    """`trl.trainer.utils.entropy_from_logits` on the model's own full logits / T, each row unpadded."""
    import torch
    from trl.trainer.utils import entropy_from_logits

    total = count = 0.0
    for row in rows:
        prompt_ids, _, completion_ids, _ = trl_inputs(tok, [row])
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        width = completion_ids.size(1)
        with torch.no_grad():
            logits = model(input_ids=input_ids, use_cache=False).logits[:, -width - 1:-1].float() / temperature
            entropy = entropy_from_logits(logits)
        total += float(entropy.sum())
        count += width
    return total / count


def relative(cohort: float, trl: float) -> str:
    return f"{(cohort - trl) / trl:+9.2e}"


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from trainer.models import ensure_smollm2
    from trainer.policy import load_policy_model
    from trainer.programs.toy import TOY_WORDS
    from trainer.programs.toy_format import ToyFormat

    torch.set_num_threads(args.threads)
    path = ensure_smollm2()
    model, tok = load_policy_model(path, dropout=0.0)  # a fresh adapter: the base model's distribution
    program = ToyFormat(words=TOY_WORDS)  # four words (one token each: every prompt has 26 tokens)
    examples = program.generate_examples("train", seed=0)[: args.examples]
    prompts = [program.process_prompt(program.start(e), "echo") for e in examples]
    print(f"SmolLM2-135M-Instruct ({path}), toy_format: {args.examples} prompts x {args.samples} completions, "
          f"up to {args.max_new_tokens} new tokens; torch threads {torch.get_num_threads()}")
    print(f"\n{'T':>4s} {'tokens':>7s} {'Cohort':>9s} {'TRL GRPO':>9s} {'rel diff':>9s} {'TRL GRPO':>9s} "
          f"{'rel diff':>9s} {'TRL util':>9s} {'rel diff':>9s}")
    print(f"{'':4s} {'':7s} {'':9s} {'unpadded':>9s} {'':9s} {'batched':>9s} {'':9s} {'unpadded':>9s}")
    for temperature in (float(t) for t in args.temperatures.split(",")):
        rows = sample(model, tok, prompts, args, temperature)
        cohort = cohort_mean_entropy(model, tok, rows, temperature)
        base, base_tok = load_policy_model(path, dropout=0.0)  # TRL patches the forward of its own copy
        base = base.get_base_model()
        add_fused_lm_head(base, temperature=temperature, outputs=("log_probs", "entropy"))
        unpadded = trl_grpo_mean_entropy(base, base_tok, rows, batched=False)
        batched = trl_grpo_mean_entropy(base, base_tok, rows, batched=True)
        utility = trl_utility_mean_entropy(model, tok, rows, temperature)
        tokens = sum(len(ids) for _, ids in rows)

        print(f"{temperature:4.1f} {tokens:7d} {cohort:9.5f} {unpadded:9.5f} {relative(cohort, unpadded)} "
              f"{batched:9.5f} {relative(cohort, batched)} {utility:9.5f} {relative(cohort, utility)}")
    print("\nrel diff = (Cohort - TRL) / TRL, over the same completion tokens.")


if __name__ == "__main__":
    main()
