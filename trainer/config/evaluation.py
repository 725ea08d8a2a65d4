"""The "eval" group of `RunConfig`'s fields: evaluation, checkpoints, the seed and rollout retention."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config.fields import _meta


@dataclass
class EvalFields:
    """Evaluation, checkpoints, seed and retention; a base of `RunConfig`. Their whole numbers are
    checked with every field's in `RunConfig._check_numbers`."""

    eval_every: int = field(default=10, metadata=_meta("Evaluate on the dev split every N steps (0 = never).", "eval"))
    eval_size: int = field(default=64, metadata=_meta("Dev examples per evaluation.", "eval"))
    eval_before: bool = field(default=False, metadata=_meta(
        "Also evaluate before the first step (after phase 1, when prompts are optimized first), stored as "
        "step 0: the program as it was before its weights trained (the Experiment page's baselines).", "eval"))
    checkpoint_every: int = field(default=10, metadata=_meta(
        "Write a resumable checkpoint every N steps (and at the end).", "eval"))
    seed: int = field(default=0, metadata=_meta("Seed of data order, sampling and initialization.", "eval"))
    keep_rollouts_last_steps: int = field(default=0, metadata=_meta(
        "Retention: keep the rollout text (rollouts, module calls, groups) of only the newest N steps; "
        "older steps keep every metric. 0 keeps everything.", "eval"))
    keep_rollouts_every: int = field(default=0, metadata=_meta(
        "Retention: also keep the rollouts of every k-th step (step % k == 0) however old (0: none).", "eval"))
