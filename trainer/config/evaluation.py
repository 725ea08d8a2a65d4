"""The "eval" group of `RunConfig`'s fields: evaluation, checkpoints, the seed, rollout retention and
the per-token details stored with the rollouts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from trainer.config.fields import ConfigError, _meta

# The fields read only while per-token details are on.
_TOKEN_DETAILS_ON = {"token_details": ("sampled", "all")}
MAX_TOKEN_TOPK = 20


@dataclass
class EvalFields:
    """Evaluation, checkpoints, seed, retention and token details; a base of `RunConfig`. Their whole
    numbers are checked with every field's in `RunConfig._check_numbers`, which also calls
    `_check_token_details`."""

    eval_every: int = field(default=10, metadata=_meta("Evaluate on the dev split every N steps (0 = never).", "eval",
        bounds=">= 0"))
    eval_size: int = field(default=64, metadata=_meta("Dev examples per evaluation.", "eval", bounds=">= 1"))
    eval_before: bool = field(default=False, metadata=_meta(
        "Also evaluate before the first step (after phase 1, when prompts are optimized first), stored as "
        "step 0: the program as it was before its weights trained (the Experiment page's baselines).", "eval"))
    checkpoint_every: int = field(default=10, metadata=_meta(
        "Write a resumable checkpoint every N steps (and at the end).", "eval", bounds=">= 0"))
    seed: int = field(default=0, metadata=_meta("Seed of data order, sampling and initialization.", "eval",
        bounds=">= 0"))
    keep_rollouts_last_steps: int = field(default=0, metadata=_meta(
        "Retention: keep the rollout text (rollouts, module calls, groups) of only the newest N steps; "
        "older steps keep every metric. 0 keeps everything.", "eval", bounds=">= 0"))
    keep_rollouts_every: int = field(default=0, metadata=_meta(
        "Retention: also keep the rollouts of every k-th step (step % k == 0) however old (0: none).", "eval",
            bounds=">= 0"))
    token_details: Literal["off", "sampled", "all"] = field(default="all", metadata=_meta(
        "Per-token details of each completion, for the rollout inspector: every token's text, its "
        "log-prob under the sampler and under the trainer (their gap is the sampler / trainer mismatch), "
        "the entropy of the model's next-token distribution, and the likeliest alternatives where that "
        "entropy is high. 'all' stores them for every module call; 'sampled' only for the highest- and "
        "the lowest-reward member of each group; 'off' computes and stores nothing per token. Both "
        "'all' and 'sampled' add the tokens/... step metrics, computed from every scored token. Cost: "
        "no extra forward pass and no higher memory peak (the details come from the update's own "
        "log-prob pass, a little more compute over each chunk of logits); storage grows with the "
        "completion tokens kept (a piece, two log-probs and an entropy each, compressed).", "eval"))
    token_topk: int = field(default=5, metadata=_meta(
        f"Alternatives kept at a fork (0 to {MAX_TOKEN_TOPK}): the k likeliest tokens and their "
        "probabilities, at the positions whose entropy is among the step's highest (token_fork_share). "
        "Each costs a token and a number per fork.", "eval", when=_TOKEN_DETAILS_ON, bounds="0 <= x <= 20"))
    token_fork_share: float = field(default=0.1, metadata=_meta(
        "Share of the step's completion tokens that count as forks, the most uncertain ones: a position "
        "is a fork when its entropy is at least the (1 - share) quantile of every token the update scored "
        "this step. Above 0, at most 1 (1: alternatives at every token, the most storage).", "eval",
        when=_TOKEN_DETAILS_ON, bounds="0 < x <= 1"))

    def _check_token_details(self):
        topk = self.token_topk
        if not isinstance(topk, int) or isinstance(topk, bool) or not 0 <= topk <= MAX_TOKEN_TOPK:
            raise ConfigError("token_topk", f"token_topk must be a whole number from 0 to {MAX_TOKEN_TOPK} "
                              f"(alternatives kept at a fork; typical: 5), not {topk!r}.")
        share = self.token_fork_share
        if (not isinstance(share, (int, float)) or isinstance(share, bool) or not math.isfinite(share)
                or not 0 < share <= 1):
            raise ConfigError("token_fork_share", "token_fork_share must be a share above 0 and at most 1 (e.g. "
                              f"0.1: the 10% most uncertain tokens are forks), not {share!r}.")
