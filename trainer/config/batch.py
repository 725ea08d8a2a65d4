"""The "batch" group of `RunConfig`'s fields: the batch shape, G, R and B, and the number of steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config.fields import ConfigError, _meta


@dataclass
class BatchFields:
    """The batch shape; a base of `RunConfig`. Whole numbers are checked with every field's in
    `RunConfig._check_numbers`, what each strategy needs of R and G in `StrategyFields`."""

    group_size: int = field(default=8, metadata=_meta(
        "G: members of every group after padding and selection.", "batch", bounds=">= 2"))
    rollouts_per_example: int = field(default=8, metadata=_meta(
        "R: rollouts sampled per example (MMGRPO samples R and selects G diverse ones).", "batch",
            bounds=">= 1, = group_size with strategy 'grpo' or 'mhgpo'"))
    examples_per_step: int = field(default=4, metadata=_meta(
        "Training examples drawn per step (the batch size B).", "batch", bounds=">= 1"))
    steps: int = field(default=100, metadata=_meta("Training steps.", "batch", bounds=">= 1"))

    def _check_group_size(self):
        if self.group_size < 2:
            raise ConfigError("group_size", "group_size must be at least 2: a group of one has no relative advantage.")
