"""The clipped GRPO objective with a k3 KL penalty (MMGRPO Eq. 1 / Eq. 5, GDPO Eq. 3).

Shapes: B = sequences in a (micro-)batch, C = padded completion width. Log-prob tensors are
completion-aligned, (B, C).
"""

from __future__ import annotations

import torch
from torch import Tensor

AGGREGATIONS = ("token", "sequence", "dr_grpo")


def clipped_policy_loss(
    logp_new: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    beta: float = 0.0,
    logp_ref: Tensor | None = None,
    aggregation: str = "token",
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    max_len: float | None = None,
    is_weight: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss (to minimize) of the clipped GRPO objective, MMGRPO Eq. 1 / Eq. 5, GDPO Eq. 3.

    Per token t of completion i, with ratio w = exp(logp_new - logp_old):

        l_{i,t} = -min(w * A_i, clip(w, 1 - eps_low, 1 + eps_high) * A_i) + beta * KL_{i,t}
        KL_{i,t} = exp(ref - new) - (ref - new) - 1          (k3 estimator, >= 0; DeepSeekMath)

    `is_weight` (B, C), when given, multiplies the clipped surrogate before the KL term is added:
    the truncated importance-sampling correction for a sampler whose policy differs from the
    trainer's (`trainer.policy.logprobs.importance_weights`; TRL applies it at the same place).

    Asymmetric clipping ("clip-higher", eps_high > eps_low) is DAPO's; GDPO's math runs use
    0.2 / 0.28 (GDPO App. E). The papers state one eps: pass eps_low = eps_high for that.

    Aggregation over the mask (the three papers differ here):
      - "sequence": mean over each completion's tokens, then mean over completions. This is the
        1/G sum_i 1/|o_i| sum_t of GRPO as written in MMGRPO Eq. 1/5 and GDPO Eq. 3.
      - "token": sum over all tokens / number of tokens in the whole batch (DAPO's token-level loss;
        GDPO Section 5 uses it for its math runs; TRL's default "dapo"). No length bias.
      - "dr_grpo": sum over all tokens / (number of completions * a constant max length) (Dr. GRPO).
    Under gradient accumulation pass the global `num_tokens` / `num_sequences` / `max_len` of the
    whole batch so the micro-batch losses add up to the full-batch loss; they default to this batch's
    mask sum, B, and C.

    Shapes: logp_new, logp_old, logp_ref, mask: (B, C); advantages: (B,) one per completion (outcome
    supervision, MMGRPO Eq. 2) or (B, C) per token. Returns the scalar loss and detached stats:
    clip_low / clip_high (fraction of tokens where the clipped term is the active one, at the low or
    high bound), ratio (mean w), kl (mean KL, when logp_ref is given), tokens (mask sum).

    Worked example: one token, logp_new = logp_old, A = 1, beta = 0 -> w = 1, loss = -1.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if beta != 0.0 and logp_ref is None:
        raise ValueError("beta != 0 needs logp_ref (log-probs under the reference policy)")
    keep = mask.bool()  # (B, C)
    weight = keep.to(logp_new.dtype)
    adv = advantages.to(logp_new.dtype)
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv  # (B, 1) or (B, C)

    # Zero the log-ratio on padding before exp: padded log-probs may be -inf or garbage, and a NaN
    # there would leak into the gradient even through a mask multiply.
    log_ratio = torch.where(keep, logp_new - logp_old.detach(), torch.zeros_like(logp_new))  # (B, C)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)  # (B, C)
    if is_weight is not None:
        per_token = per_token * is_weight.detach()

    kl = None
    if logp_ref is not None:
        delta = torch.where(keep, logp_ref.detach() - logp_new, torch.zeros_like(logp_new))  # (B, C)
        kl = torch.exp(delta) - delta - 1.0
        if beta != 0.0:
            per_token = per_token + beta * kl
    per_token = per_token * weight

    batch, width = keep.shape
    if aggregation == "token":
        denom = num_tokens if num_tokens is not None else weight.sum().clamp(min=1.0)
        loss = per_token.sum() / denom
    elif aggregation == "sequence":
        lengths = weight.sum(dim=1).clamp(min=1.0)  # (B,)
        loss = (per_token.sum(dim=1) / lengths).sum() / (
            num_sequences if num_sequences is not None else batch
        )
    else:  # dr_grpo
        seqs = num_sequences if num_sequences is not None else batch
        loss = per_token.sum() / (seqs * (max_len if max_len is not None else width))

    with torch.no_grad():
        n = weight.sum().clamp(min=1.0)
        stats = {
            "clip_low": (((ratio < 1.0 - eps_low) & (adv < 0)) & keep).sum() / n,
            "clip_high": (((ratio > 1.0 + eps_high) & (adv > 0)) & keep).sum() / n,
            "ratio": (ratio * weight).sum() / n,
            "kl": (kl * weight).sum() / n if kl is not None else torch.zeros((), device=ratio.device),
            "tokens": weight.sum(),
        }
    return loss, stats
