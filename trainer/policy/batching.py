"""From (prompt, completion, advantage) triples to padded tensors for the policy update.

Shapes: B = sequences in a (micro-)batch, P = padded prompt width, C = padded completion width.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trainer.rollouts.prompts import Prompt, encode_prompt

__all__ = ["PolicyBatch", "PolicyExample", "as_example", "encode_completion", "encode_prompt", "tokenize_examples"]


@dataclass(frozen=True)
class PolicyExample:
    """One (prompt, completion, advantage) triple of a module-level group.

    `prompt` is raw text or chat messages (a `RenderedPrompt` carries its messages); `encode_prompt`
    turns it into the very ids the sampler saw. `completion_ids` are the exact sampled tokens when
    known (preferred: re-tokenizing the text can give a different split). `sampler_logprobs` are
    the sampler's per-token log-probs of those tokens under softmax(logits / temperature), where the
    backend reports them: they feed the importance-sampling correction and the sampler / trainer
    mismatch metric, never the ratio's denominator (the trainer computes that itself).
    """

    prompt: Prompt
    completion: str
    advantage: float
    completion_ids: Sequence[int] | None = None
    sampler_logprobs: Sequence[float] | None = None


def as_example(item: Any) -> PolicyExample:
    """Accept a PolicyExample, a (prompt, completion, advantage) tuple, or any object with those fields."""
    if isinstance(item, PolicyExample):
        return item
    if isinstance(item, tuple | list):
        prompt, completion, advantage = item
        return PolicyExample(prompt, completion, float(advantage))
    return PolicyExample(
        item.prompt,
        item.completion,
        float(item.advantage),
        getattr(item, "completion_ids", None),
        getattr(item, "sampler_logprobs", None),
    )


@dataclass
class PolicyBatch:
    """Padded tensors for a list of examples.

    Layout of each row: [left padding][prompt][completion][right padding], so every prompt ends at
    column P - 1 and every completion starts at column P. That lets one forward pass keep only the
    last C + 1 logits (`logits_to_keep`) instead of all P + C.
    """

    input_ids: Tensor  # (B, P + C) long
    attention_mask: Tensor  # (B, P + C) long
    position_ids: Tensor  # (B, P + C) long, 0 at each row's first real token
    completion_ids: Tensor  # (B, C) long
    completion_mask: Tensor  # (B, C) float, 1 on real completion tokens
    advantages: Tensor  # (B,) float
    sampler_logprobs: Tensor | None  # (B, C) float when every example brought the sampler's
    num_truncated: int = 0  # examples cut to fit max_context_length

    @property
    def prompt_width(self) -> int:
        return self.input_ids.shape[1] - self.completion_ids.shape[1]

    def to(self, device: torch.device | str) -> PolicyBatch:
        moved = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in self.__dict__.items()}
        return PolicyBatch(**moved)


def encode_completion(tokenizer: Any, completion: str) -> list[int]:
    return tokenizer(completion, add_special_tokens=False)["input_ids"]


def tokenize_examples(
    tokenizer: Any,
    examples: Iterable[Any],
    *,
    max_context_length: int,
    append_eos: bool = False,
) -> PolicyBatch:
    """Tokenize triples into a PolicyBatch; prompt tokens never enter the loss (completion mask only).

    Over-long pairs are cut to `max_context_length`: the completion at the right (to at most
    max_context_length - 1 tokens, one prompt token must condition it), then the prompt from the left
    (its end is what the completion depends on most). MMGRPO instead filters such pairs out; a caller
    that wants that should drop them before this point. `append_eos` adds EOS to text-only
    completions (sampled `completion_ids` already carry the EOS the sampler emitted).
    """
    examples = [as_example(e) for e in examples]
    if not examples:
        raise ValueError("no examples to tokenize")
    if max_context_length < 2:
        raise ValueError("max_context_length must be at least 2 (one prompt and one completion token)")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    prompts, completions, olds, truncated = [], [], [], 0
    for ex in examples:
        p_ids = encode_prompt(tokenizer, ex.prompt)
        if ex.completion_ids is not None:
            c_ids = list(ex.completion_ids)
        else:
            c_ids = encode_completion(tokenizer, ex.completion)
            if append_eos and tokenizer.eos_token_id is not None:
                c_ids.append(tokenizer.eos_token_id)
        if not p_ids:
            raise ValueError(
                "an empty prompt (with no BOS token) leaves nothing to condition the completion on"
            )
        if ex.sampler_logprobs is not None and len(ex.sampler_logprobs) != len(c_ids):
            raise ValueError(
                f"sampler_logprobs has {len(ex.sampler_logprobs)} entries for {len(c_ids)} completion tokens; "
                "pass completion_ids with the sampler's log-probs"
            )
        old = list(ex.sampler_logprobs) if ex.sampler_logprobs is not None else None
        if len(p_ids) + len(c_ids) > max_context_length:
            truncated += 1
            c_ids = c_ids[: max_context_length - 1]
            old = old[: len(c_ids)] if old is not None else None
            p_ids = p_ids[-(max_context_length - len(c_ids)) :]
        prompts.append(p_ids)
        completions.append(c_ids)
        olds.append(old)

    batch = len(examples)
    p_width = max(len(p) for p in prompts)
    c_width = max(1, max(len(c) for c in completions))
    input_ids = torch.full((batch, p_width + c_width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, p_width + c_width), dtype=torch.long)
    completion_mask = torch.zeros((batch, c_width), dtype=torch.float32)
    sampler_logprobs = torch.zeros((batch, c_width), dtype=torch.float32)
    for i, (p_ids, c_ids) in enumerate(zip(prompts, completions, strict=True)):
        start = p_width - len(p_ids)
        input_ids[i, start:p_width] = torch.tensor(p_ids, dtype=torch.long)
        input_ids[i, p_width : p_width + len(c_ids)] = torch.tensor(c_ids, dtype=torch.long)
        attention_mask[i, start : p_width + len(c_ids)] = 1
        completion_mask[i, : len(c_ids)] = 1.0
        if olds[i] is not None:
            sampler_logprobs[i, : len(c_ids)] = torch.tensor(olds[i], dtype=torch.float32)
    # Positions count real tokens only, so a left-padded row sees the same positions as unpadded.
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return PolicyBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        completion_ids=input_ids[:, p_width:].clone(),
        completion_mask=completion_mask,
        advantages=torch.tensor([ex.advantage for ex in examples], dtype=torch.float32),
        sampler_logprobs=sampler_logprobs if all(o is not None for o in olds) else None,
        num_truncated=truncated,
    )
