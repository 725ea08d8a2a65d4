"""Per-token log-probs of completions, with memory that grows with tokens, not tokens x vocabulary.

A real vocabulary is large (Qwen2.5: 151,936 tokens): the (B, C, V) float32 logits of 64
completions of 1,024 tokens are 40 GB. So `sequence_logprobs` never builds them. It runs the
model's decoder to its last hidden states, keeps the C positions that predict completion tokens,
and applies the output head to a bounded chunk of those positions at a time. Only the chunk's
logits exist at once (in the model's dtype, upcast to float32 inside the chunk). Under autograd
each chunk is checkpointed: the backward pass recomputes the chunk's logits instead of keeping
every chunk's alive. Padded positions are skipped.

`sequence_logprobs_with_details` also returns, from the same chunks, each position's entropy and
top-k tokens (the per-token details a run stores): computed without grad from the chunk's logits
that exist anyway, once per chunk (a checkpointed chunk's backward recomputation skips them), so
neither the peak memory nor the number of forward passes grows.

Shapes: B sequences, C padded completion width, H hidden size, V vocabulary, N real completion
tokens (N <= B * C).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from trainer.policy.batching import PolicyBatch

# Elements of one chunk's logits (float32): 2**24 = 64 MiB. 110 positions of a 151,936 vocabulary.
LOGITS_CHUNK_ELEMENTS = 2**24


def _base_model(model: torch.nn.Module) -> Any:
    get_base = getattr(model, "get_base_model", None)  # a PEFT wrapper: LoRA layers live inside
    return get_base() if callable(get_base) else model


def _head_is_plain_linear(base: Any) -> bool:
    """Whether logits are exactly `lm_head(last hidden state)` (no soft-capping or scaling, as in
    Gemma 2 or Cohere), so the chunked path computes what the model's own forward would."""
    config = getattr(base, "config", None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    return (isinstance(head, torch.nn.Linear) and hasattr(base, "get_decoder")
            and not getattr(config, "final_logit_softcapping", None) and getattr(config, "logit_scale", None) in (None, 1.0)
            and getattr(config, "logits_scaling", None) in (None, 1.0))


def token_details_from_logits(logits: Tensor, lse: Tensor, topk: int) -> tuple[Tensor, Tensor, Tensor]:
    """Entropy and top-k of the policy's token distribution p = softmax(z) at each row, z the
    (temperature-scaled, float32) logits and `lse` = logsumexp(z) already computed. No grad.

    Entropy (nats): H = -sum_v p_v log p_v = sum_v p_v (lse - z_v) = lse * sum_v p_v - sum_v p_v z_v
    (sum_v p_v is 1 up to rounding; keeping it makes H exactly -sum p log p of the rounded p).
    Memory: one (n, V) tensor, p, made in place from z - lse, the size of the temporary logsumexp
    itself makes; once its sum and top-k are taken, p * z is formed in place in it for the row sums
    (a batched dot product, bmm, would need no buffer either, but accumulates 150,000 float32
    products in order on a CPU: 2e-3 nats off where this sum is 2e-6 off).
    (n, V), (n,) -> entropy (n,), top-k ids (n, k) long, top-k probabilities (n, k), descending.
    """
    with torch.no_grad():
        z, lse = logits.detach(), lse.detach()
        p = (z - lse.unsqueeze(-1)).exp_()  # (n, V)
        total = p.sum(-1)
        k = min(topk, z.shape[-1])
        if k > 0:
            probs, ids = p.topk(k, dim=-1)
        else:
            probs, ids = z.new_zeros(z.shape[0], 0), torch.zeros(z.shape[0], 0, dtype=torch.long, device=z.device)
        entropy = (lse * total - p.mul_(z).sum(-1)).clamp_(min=0.0)
        del p
    return entropy, ids, probs


def _chunk_logprobs(hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, temperature: float,
                    details: list | None = None, topk: int = 0) -> Tensor:
    """log softmax(hidden @ W^T / temperature)[target] for one chunk. (n, H) -> (n,)

    With a `details` list, also appends this chunk's (entropy, top-k ids, top-k probs) to it, the
    first time only: under checkpointing the backward pass calls this function again to recompute
    the logits, and the details were taken already (they carry no gradient)."""
    logits = F.linear(hidden, weight, bias).float()  # (n, V): the only vocabulary-wide tensor
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    if details is not None and not details:
        details.append(token_details_from_logits(logits, lse, topk))
    return chosen


def chosen_token_logprobs(hidden: Tensor, head: torch.nn.Linear, targets: Tensor, *, temperature: float = 1.0,
                          chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> Tensor:
    """Log-probs of `targets` under softmax(head(hidden) / temperature), a chunk of rows at a time.
    (N, H), (N,) -> (N,) float32. Extra memory: one chunk's logits (about `chunk_elements` floats)."""
    return _chunked_logprobs(hidden, head, targets, temperature, chunk_elements, None)[0]


def _chunked_logprobs(hidden: Tensor, head: torch.nn.Linear, targets: Tensor, temperature: float,
                      chunk_elements: int, topk: int | None) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor] | None]:
    """`chosen_token_logprobs`, plus each row's (entropy, top-k ids, top-k probs) when `topk` is not None."""
    rows = max(1, chunk_elements // head.out_features)
    pieces, boxes = [], []
    for start in range(0, hidden.shape[0], rows):
        box: list | None = [] if topk is not None else None  # filled by the chunk's first call only
        args = (hidden[start:start + rows], head.weight, head.bias, targets[start:start + rows], temperature,
                box, topk or 0)
        if torch.is_grad_enabled() and hidden.requires_grad:
            pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(*args))
        boxes.append(box)
    chosen = torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    if topk is None:
        return chosen, None
    if not boxes:
        return chosen, _empty_details(0, topk, hidden.device)
    return chosen, tuple(torch.cat([box[0][i] for box in boxes]) for i in range(3))


def _empty_details(n: int, topk: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    return (torch.zeros(n, device=device), torch.zeros(n, topk, dtype=torch.long, device=device),
            torch.zeros(n, topk, device=device))


def completion_hidden_states(base: Any, batch: PolicyBatch) -> Tensor:
    """The decoder's last hidden states at the positions that predict completion tokens. -> (B, C, H)

    Row layout (PolicyBatch): the prompt ends at column P - 1 and position P - 1 + t predicts
    completion token t."""
    out = base.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                             position_ids=batch.position_ids, use_cache=False)
    width, start = batch.completion_ids.shape[1], batch.prompt_width - 1
    return out.last_hidden_state[:, start:start + width]


def sequence_logprobs(model: torch.nn.Module, batch: PolicyBatch, *, temperature: float = 1.0,
                      chunk_elements: int = LOGITS_CHUNK_ELEMENTS) -> Tensor:
    """Per-token log-probs of the completion tokens: log softmax(logits / temperature)[token]. -> (B, C)

    The log-probs of the distribution the sampler drew from (before top-k / top-p truncation), so the
    ratio of MMGRPO Eq. 1 / Eq. 5 (GDPO Eq. 3) compares like with like. Padded positions hold 0;
    use `completion_mask`. Memory: hidden states plus one chunk of logits (module docstring).
    """
    return _sequence_logprobs(model, batch, temperature, chunk_elements, None)[0]


def sequence_logprobs_with_details(model: torch.nn.Module, batch: PolicyBatch, *, temperature: float = 1.0,
                                   chunk_elements: int = LOGITS_CHUNK_ELEMENTS,
                                   topk: int = 5) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`sequence_logprobs` and, from the same pass, the per-token details of the policy's token
    distribution p = softmax(logits / temperature) at each completion position:

    - log-probs (B, C): log p[token], the ratio's log-probs (MMGRPO Eq. 1), with their autograd graph;
    - entropy (B, C): H(p) = -sum_v p_v log p_v in nats (`token_details_from_logits`), no grad;
    - top-k ids (B, C, k) and probabilities (B, C, k): the k most likely tokens under p, descending.

    Padded positions hold 0. Memory: the same peak as `sequence_logprobs` (module docstring); under
    autograd the details are taken in the forward pass only, not again when the checkpointed chunks
    are recomputed for the backward pass.
    """
    logprobs, details = _sequence_logprobs(model, batch, temperature, chunk_elements, topk)
    return (logprobs, *details)


def _sequence_logprobs(model: torch.nn.Module, batch: PolicyBatch, temperature: float, chunk_elements: int,
                       topk: int | None) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor] | None]:
    base = _base_model(model)
    keep = batch.completion_mask.bool()  # (B, C)
    if not _head_is_plain_linear(base) or _is_fsdp_root(base):
        # Sharded weights (trainer.policy.sharding) are gathered by the model's own forward, never when the
        # decoder and the head's weight are reached directly as below.
        return _logprobs_from_full_logits(model, batch, keep, temperature, topk)
    hidden = completion_hidden_states(base, batch)  # (B, C, H)
    chosen, details = _chunked_logprobs(hidden[keep], base.get_output_embeddings(), batch.completion_ids[keep],
                                        temperature, chunk_elements, topk)  # (N,)
    out = torch.zeros(keep.shape, dtype=torch.float32, device=hidden.device)
    out = out.masked_scatter(keep, chosen)
    if details is None:
        return out, None
    entropy, ids, probs = details
    k = ids.shape[-1]
    full = (torch.zeros(keep.shape, device=hidden.device),
            torch.zeros((*keep.shape, k), dtype=torch.long, device=hidden.device),
            torch.zeros((*keep.shape, k), device=hidden.device))
    for target, rows in zip(full, (entropy, ids, probs), strict=True):
        target[keep] = rows
    return out, full


def _is_fsdp_root(base: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(base, FSDPModule)


def _logprobs_from_full_logits(model: torch.nn.Module, batch: PolicyBatch, keep: Tensor, temperature: float,
                               topk: int | None = None) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor] | None]:
    """For heads that are not a plain linear layer: the model's own logits (in its dtype), upcast
    one row at a time (TRL's selective log-softmax), with each row's details when `topk` is not
    None. Memory: the (B, C, V) logits in the model's dtype."""
    width = batch.completion_ids.shape[1]
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                   logits_to_keep=width + 1, use_cache=False).logits[:, :-1]  # (B, C, V)
    rows, details = [], []
    for row_logits, row_ids in zip(logits, batch.completion_ids, strict=True):
        scaled = row_logits.float() / temperature
        lse = torch.logsumexp(scaled, dim=-1)
        rows.append(scaled.gather(-1, row_ids.unsqueeze(-1)).squeeze(-1) - lse)
        if topk is not None:
            details.append(token_details_from_logits(scaled, lse, topk))
    out = torch.stack(rows) * keep
    if topk is None:
        return out, None
    mask = keep.float()
    entropy, ids, probs = (torch.stack([d[i] for d in details]) for i in range(3))
    return out, (entropy * mask, ids * keep.unsqueeze(-1), probs * mask.unsqueeze(-1))


def importance_weights(trainer_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, *, cap: float) -> Tensor:
    """Truncated importance-sampling weights (TIS; TRL's `vllm_importance_sampling_correction` in
    its token-truncate mode): w_t = min(exp(log pi_trainer - log pi_sampler), cap). The sampled
    tokens came from the sampler's policy, the loss's expectation is under the trainer's; w
    re-weights each token's clipped surrogate. Padding gets weight 1.

    Worked example: trainer and sampler agree -> w = 1; trainer 0.3 nats more likely -> w = 1.35;
    3 nats more likely -> exp(3) = 20.1, truncated to the cap 2. (B, C) -> (B, C)
    """
    delta = torch.where(mask.bool(), trainer_logprobs - sampler_logprobs, torch.zeros_like(trainer_logprobs))
    return torch.exp(delta).clamp(max=cap)


def mismatch_stats(trainer_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, *, cap: float) -> dict[str, Tensor]:
    """How far the sampler's policy is from the trainer's on the sampled tokens, summed over the
    mask (divide by `tokens`): |log pi_sampler - log pi_trainer|, the k3 estimate of
    KL(sampler || trainer) = E_sampler[r - log r - 1] with r = pi_trainer / pi_sampler (>= 0, 0 when
    they agree), the mean IS weight, the sum of its squares (for the effective sample size), its
    largest value (`is_weight_max`: a maximum, not a sum) and how many tokens the cap truncated."""
    keep = mask.bool()
    delta = torch.where(keep, trainer_logprobs - sampler_logprobs, torch.zeros_like(trainer_logprobs))  # log r
    ratio = torch.exp(delta)
    weight = ratio.clamp(max=cap) * keep
    return {
        "abs_logprob_diff": (delta.abs() * keep).sum(),
        "kl": ((torch.expm1(delta) - delta).clamp(min=0.0) * keep).sum(),  # r - log r - 1, no cancellation
        "is_weight": weight.sum(),
        "is_weight_sq": (weight * weight).sum(),
        "is_weight_max": weight.max() if weight.numel() else weight.sum(),
        "is_capped": ((ratio > cap) & keep).sum(),
        "tokens": keep.sum(),
    }


def effective_sample_share(weight_sum: float, weight_square_sum: float, count: float) -> float:
    """Kish's effective sample size of importance weights, as a share of the tokens:
    ESS / n = (sum w)^2 / (n * sum w^2), 1 when every weight is equal, 1/n when one token carries
    all the weight. Worked example: weights (1, 1) -> 1; (2, 0) -> 4 / (2 * 4) = 0.5."""
    if count <= 0 or weight_square_sum <= 0:
        return float("nan")
    # At most 1 by Cauchy-Schwarz; sums accumulated in float32 micro-batch by micro-batch land a hair above.
    return min(1.0, weight_sum * weight_sum / (count * weight_square_sum))


class MismatchTotals:
    """Sampler / trainer mismatch summed over the tokens the sampler scored, for the step metrics:
    `mismatch/...` always, `is_weight/...` where the importance-sampling correction applied."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.corrected = False

    def add(self, trainer_logprobs: Tensor, mb: PolicyBatch, *, corrected: bool, cap: float) -> None:
        stats = mismatch_stats(trainer_logprobs.detach(), mb.sampler_logprobs, mb.completion_mask, cap=cap)
        self.merge({k: float(v) for k, v in stats.items()}, corrected=corrected)

    def merge(self, sums: dict[str, float], *, corrected: bool) -> None:
        """Adds another micro-batch's (or rank's) totals: sums add up, the largest weight is the larger."""
        for k, v in sums.items():
            self.sums[k] = max(self.sums.get(k, 0.0), v) if k == "is_weight_max" else self.sums.get(k, 0.0) + v
        self.corrected = self.corrected or corrected

    def stats(self) -> dict[str, float]:
        tokens = self.sums.get("tokens")
        if not tokens:
            return {}
        out = {"mismatch/abs_logprob_diff": self.sums["abs_logprob_diff"] / tokens,
               "mismatch/kl": self.sums["kl"] / tokens}
        if self.corrected:
            out.update({"is_weight/mean": self.sums["is_weight"] / tokens,
                        "is_weight/max": self.sums["is_weight_max"],
                        "is_weight/ess_share": effective_sample_share(self.sums["is_weight"], self.sums["is_weight_sq"],
                                                                      tokens),
                        "is_weight/capped_share": self.sums["is_capped"] / tokens})
        return out
