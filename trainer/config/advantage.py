"""The "advantage" group of `RunConfig`'s fields: how rewards become advantages (GRPO, GDPO)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config.fields import ConfigError, Estimator, _meta


@dataclass
class AdvantageFields:
    """The advantage estimator; a base of `RunConfig`, whose `__post_init__` calls `_check_estimator`
    (MHGPO's own limit on the estimator is checked with the strategy, `StrategyFields`)."""

    estimator: Estimator = field(default="grpo", metadata=_meta(
        "'grpo': group-normalize the weighted reward sum; 'grpo_batch_std': divide by the batch "
        "std; 'grpo_no_std': no division (Dr. GRPO); 'gdpo': normalize each reward in its group, "
        "weight, sum, then batch-normalize (GDPO Eq. 4-7).", "advantage"))
    gdpo_batch_norm: bool = field(default=True, metadata=_meta(
        "GDPO Eq. 6: batch-wise normalization of the summed advantages.", "advantage",
        when={"estimator": ("gdpo",)}))

    def _check_estimator(self):
        if self.estimator == "gdpo" and len(self.rewards) < 2:
            raise ConfigError("estimator", 
                "estimator 'gdpo' decouples the normalization of several rewards; with one reward it equals "
                "GRPO with batch normalization. Add a second reward or choose estimator 'grpo'."
            )
