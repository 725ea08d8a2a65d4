"""Step metrics of per-token details (RunConfig.token_details): how uncertain the policy is at the
tokens it sampled, and how far the sampler's log-probs are from the trainer's.

Every scored completion token of a step counts (not only the calls whose details are stored):

- `tokens/entropy/mean`, `/p10`, `/p50`, `/p90`: the entropy H = -sum_v p_v log p_v (nats) of the
  policy's next-token distribution p = softmax(logits / temperature) at each completion position;
- `tokens/entropy/best`, `/worst`: over the groups whose members' rewards differ, the mean of the
  mean token entropy of each group's highest-reward member, and of its lowest-reward member;
- `tokens/mismatch/share`: among the tokens with both log-probs, the share where
  |log p_sampler - log p_trainer| > MISMATCH_NATS; `tokens/mismatch/max`: the largest such gap.
  log p_trainer is the update's pass without dropout, the one `mismatch/abs_logprob_diff` (the
  mean gap) comes from (trainer.policy.updater), so dropout's noise is never counted as a mismatch;
- `tokens/prob/mean`: the mean probability of the sampled tokens, exp(sampler log-prob), or the
  trainer's where the sampler reported none.

With more than one module each metric is also given per module, its name followed by "/<module>"
(like `group_var/<module>`). Forks, where the details keep the top-k alternatives, are the tokens
whose entropy is at least `fork_threshold`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

MISMATCH_NATS = 0.1  # a gap in log-prob larger than this counts as a mismatched token


@dataclass(frozen=True)
class ScoredTokens:
    """One scored completion's per-token values over its n scored tokens."""

    module: str
    entropy: np.ndarray
    """(n,) entropy in nats of the policy's token distribution at each position."""
    trainer: np.ndarray
    """(n,) the trainer's log-probs of the sampled tokens."""
    sampler: np.ndarray | None = None
    """(n,) the sampler's log-probs of the same tokens (NaN where missing); None when it reported none."""


@dataclass(frozen=True)
class GroupExtremes:
    """A group with differing rewards: its highest- and lowest-reward members' scored tokens."""

    module: str
    best: ScoredTokens
    worst: ScoredTokens


def fork_threshold(entropies: Iterable[np.ndarray], share: float) -> float:
    """The entropy at or above which a token is a fork: the (1 - share) quantile of every entropy
    given (numpy's linear interpolation, torch.quantile's too, as TRL's high-entropy mask uses), so
    about `share` of the tokens are forks. +inf when there is no token (no fork).

    Example::

        >>> fork_threshold([np.array([0.0, 1.0, 2.0]), np.array([3.0, 4.0])], 0.25)
        3.0
        >>> fork_threshold([], 0.1)
        inf
    """
    values = [np.asarray(e, dtype=np.float64).reshape(-1) for e in entropies]
    flat = np.concatenate(values) if values else np.zeros(0)
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return math.inf
    return float(np.quantile(flat, 1.0 - share))


def token_metrics(scored: Sequence[ScoredTokens], extremes: Sequence[GroupExtremes] = (), *,
                  per_module: bool = False) -> dict[str, float]:
    """The step's `tokens/...` metrics (module docstring) from every scored completion and the
    groups' extremes. A metric with nothing to measure is left out (no sampler log-probs: no
    mismatch metrics).

    Example (two completions, the sampler's log-probs for the first only)::

        >>> a = ScoredTokens("m", np.array([0.5, 1.5]), np.log([0.5, 0.25]), np.log([0.5, 0.5]))
        >>> b = ScoredTokens("m", np.array([1.0]), np.log([0.8]))
        >>> out = token_metrics([a, b], [GroupExtremes("m", best=b, worst=a)])
        >>> {k: round(v, 4) for k, v in out.items()}  # doctest: +NORMALIZE_WHITESPACE
        {'tokens/entropy/mean': 1.0, 'tokens/entropy/p10': 0.6, 'tokens/entropy/p50': 1.0, 'tokens/entropy/p90': 1.4,
         'tokens/entropy/best': 1.0, 'tokens/entropy/worst': 1.0, 'tokens/mismatch/share': 0.5,
         'tokens/mismatch/max': 0.6931, 'tokens/prob/mean': 0.6}
    """
    out = _metrics(scored, extremes, suffix="")
    if per_module:
        for module in dict.fromkeys(s.module for s in scored):
            mine = [s for s in scored if s.module == module]
            out.update(_metrics(mine, [g for g in extremes if g.module == module], suffix=f"/{module}"))
    return out


def _metrics(scored: Sequence[ScoredTokens], extremes: Sequence[GroupExtremes], *, suffix: str) -> dict[str, float]:
    out: dict[str, float] = {}
    entropy = _concat([s.entropy for s in scored])
    entropy = entropy[np.isfinite(entropy)]
    if entropy.size:
        p10, p50, p90 = np.quantile(entropy, [0.1, 0.5, 0.9])
        out.update({"tokens/entropy/mean": float(entropy.mean()), "tokens/entropy/p10": float(p10),
                    "tokens/entropy/p50": float(p50), "tokens/entropy/p90": float(p90)})
    best = [m for m in (_mean(g.best.entropy) for g in extremes) if not math.isnan(m)]
    worst = [m for m in (_mean(g.worst.entropy) for g in extremes) if not math.isnan(m)]
    if best:
        out["tokens/entropy/best"] = float(np.mean(best))
    if worst:
        out["tokens/entropy/worst"] = float(np.mean(worst))
    trainer = _concat([s.trainer for s in scored])
    sampler = _concat([s.sampler if s.sampler is not None else np.full(len(s.trainer), np.nan) for s in scored])
    gap = np.abs(sampler - trainer)
    both = np.isfinite(gap)
    if both.any():
        out["tokens/mismatch/share"] = float(np.mean(gap[both] > MISMATCH_NATS))
        out["tokens/mismatch/max"] = float(gap[both].max())
    chosen = np.where(np.isfinite(sampler), sampler, trainer)  # the sampler's where it reported one
    chosen = chosen[np.isfinite(chosen)]
    if chosen.size:
        out["tokens/prob/mean"] = float(np.exp(chosen).mean())
    return {f"{k}{suffix}": v for k, v in out.items()}


def _concat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    parts = [np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays]
    return np.concatenate(parts) if parts else np.zeros(0)


def _mean(values: np.ndarray) -> float:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan
