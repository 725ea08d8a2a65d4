"""The TRL callback's per-token details (cohort/trl.py): each `_logs` entry of TRL's GRPOTrainer paired
with the row of its buffered batch it was trained on, and that row's tokens, sampler log-probs and the
loss pass's entropies, rounded to DECIMALS. How the pairing works, and what TRL 1.16 has, is in
cohort/trl.py's docstring."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.run import events

DECIMALS = 4  # per-token numbers are sent rounded: 1e-4 nats is finer than the server keeps (float16)
MAX_CAPTURES = 64  # forward passes of one optimizer step whose entropies are held until it ends


def text_of(value: Any) -> str:
    """A completion as text: TRL gives a string, or chat messages for conversational datasets."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(m.get("content", "")) if isinstance(m, Mapping) else str(m) for m in value)
    return str(value)



@dataclass
class _Row:
    """One completion of TRL's buffered batch, as trained on."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    logprobs: list[float] | None
    entropies: list[float] | None

    def __post_init__(self):
        self.key = hash((tuple(self.prompt_ids), tuple(self.completion_ids)))  # rows alike are interchangeable


def trl_token_details(trainer: Any, prompts: Sequence[Any], completions: Sequence[Any], advantages: Sequence[Any], *,
                      captures: Sequence[tuple[Any, Any]] = (), pieces: dict[int, str] | None = None
                      ) -> list[dict[str, list] | None]:
    """Per entry of TRL's `_logs` (its prompts, completions, advantages): {"tokens", "logprobs"?,
    "entropies"?} from the row of `trainer._buffered_inputs` it pairs with, or None (see the module's
    docstring). `captures`: (input ids, entropies) of the loss's forward passes over those rows."""
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    pieces = {} if pieces is None else pieces
    rows = _buffered_rows(trainer, tokenizer, captures)
    # (completion text, advantage) -> row key -> the rows not taken yet: rows of one key are alike
    # (same prompt and completion ids), so which of them an entry takes does not matter.
    unused: dict[tuple[str, float], dict[int, list[int]]] = {}
    for index, row in enumerate(rows):
        text = tokenizer.decode(row.completion_ids, skip_special_tokens=True)
        unused.setdefault((text, row.advantage), {}).setdefault(row.key, []).append(index)
    details: list[dict[str, list] | None] = []
    for prompt, completion, advantage in zip(prompts, completions, advantages, strict=True):
        alike = unused.get((text_of(completion), float(advantage)), {})
        keys = list(alike)
        if len(keys) > 1:  # that text twice, different: the row whose prompt holds this entry's
            needle = _prompt_needle(prompt)
            keys = [key for key in keys if needle and needle in tokenizer.decode(rows[alike[key][0]].prompt_ids,
                                                                                 skip_special_tokens=True)]
        if len(keys) != 1:  # none, or still two different completions of this text: neither is sent
            details.append(None)
            continue
        index = alike[keys[0]].pop(0)
        if not alike[keys[0]]:
            del alike[keys[0]]
        details.append(_detail(rows[index], tokenizer, pieces))
    return details


def _buffered_rows(trainer: Any, tokenizer: Any, captures: Sequence[tuple[Any, Any]]) -> list[_Row]:
    """Every row of TRL's buffered batch, with the sampler's log-probs and the captured entropies."""
    import torch  # TRL's

    pad = getattr(tokenizer, "pad_token_id", None)
    rows = []
    for batch in getattr(trainer, "_buffered_inputs", None) or ():
        prompt_ids, prompt_mask = batch["prompt_ids"].cpu(), batch["prompt_mask"].cpu()
        completion_ids, completion_mask = batch["completion_ids"].cpu(), batch["completion_mask"].cpu()
        width = completion_ids.size(1)
        sampler = batch.get("sampling_per_token_logps")
        sampler = sampler.detach().double().cpu() if sampler is not None else None
        full = torch.cat([prompt_ids, completion_ids], dim=1)
        entropy = next((e for ids, e in captures if ids.shape == full.shape and torch.equal(ids, full)), None)
        entropy = entropy[:, -width:].double() if entropy is not None and entropy.size(1) >= width else None
        for r in range(completion_ids.size(0)):
            ids = completion_ids[r].tolist()
            length = int(completion_mask[r].sum())
            masked = length == 0  # TRL masks a truncated completion whole (mask_truncated_completions)
            if masked:
                length = len(ids)
                while length and ids[length - 1] == pad:
                    length -= 1
            rows.append(_Row(
                prompt_ids=prompt_ids[r][prompt_mask[r].bool()].tolist(), completion_ids=ids[:length],
                advantage=float(batch["advantages"][r]),
                logprobs=_rounded(sampler[r, :length], high=0.0) if sampler is not None else None,
                entropies=_rounded(entropy[r, :length], low=0.0) if entropy is not None and not masked else None))
    return rows


def _rounded(values: Any, *, low: float = -math.inf, high: float = math.inf) -> list[float] | None:
    """A row's per-token numbers (a float64 tensor) rounded, or None when one is NaN or out of bounds
    beyond rounding (an entropy of -1e-7 is 0; a log-prob of 1e-7 is 0)."""
    import torch

    if not bool(torch.isfinite(values).all()):
        return None
    if values.numel() and (float(values.min()) < low - 1e-3 or float(values.max()) > high + 1e-3):
        return None
    return [v + 0.0 for v in torch.round(values, decimals=DECIMALS).clamp(min=low, max=high).tolist()]  # no -0.0


def _detail(row: _Row, tokenizer: Any, pieces: dict[int, str]) -> dict[str, list] | None:
    if not row.completion_ids or len(row.completion_ids) > events.MAX_TOKENS:
        return None
    for token in row.completion_ids:
        if token not in pieces:
            pieces[token] = tokenizer.decode([token], skip_special_tokens=False)
    texts = [pieces[token] for token in row.completion_ids]
    if any(len(text) > events.MAX_PIECE for text in texts):
        return None
    detail: dict[str, list] = {"tokens": texts}
    if row.logprobs is not None:
        detail["logprobs"] = row.logprobs
    if row.entropies is not None:
        detail["entropies"] = row.entropies
    return detail


def _prompt_needle(prompt: Any) -> str:
    """What the decoded prompt must hold: the text prompt, or its last message's text."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        return text_of(prompt[-1].get("content", ""))
    return text_of(prompt)
