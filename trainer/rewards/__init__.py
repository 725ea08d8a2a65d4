"""Reward functions for Cohort: one contract, ``(example, prediction, trajectory) -> float | None``.

``None`` means "not applicable / could not be computed" (the advantage code leaves it out of means);
malformed model output is scored, never an exception. See ``trainer.rewards.base`` for the contract
and ``trainer.rewards.registry`` for the names:

==========================  ==========================================  ===============
name                        what                                        range
==========================  ==========================================  ===============
exact_match                 SQuAD-normalized exact match                [0, 1]
token_f1                    SQuAD token F1                              [0, 1]
char_f1                     character F1 (partial credit)               [0, 1]
regex_match                 output matches a regular expression         [0, 1]
label_match                 classification label match                  [0, 1]
title_recall                recall of gold titles among retrieved docs  [0, 1]
numeric_match               final number matches gold (GSM8K)           [0, 1]
toolrl_format               GDPO App. C format reward (Eq. 9)           [0, 1]
toolrl_correctness          GDPO App. C tool-call correctness           [-3, 3]
length                      GDPO 4.2 length reward                      [0, 1]
conditioned_length          GDPO 4.2.1 conditioned length (Eq. 8)       [0, 1]
mhgpo_penalty_rewriter      MHGPO App. B: > 4 queries -> -0.5           (-inf, 0] sum
mhgpo_penalty_reranker      MHGPO App. B: duplicate / out-of-range      (-inf, 0] sum
mhgpo_penalty_answerer      MHGPO App. B: too long answer -> -1.0       (-inf, 0] sum
==========================  ==========================================  ===============

Rewards of other installed packages join through the ``cohort.rewards`` entry points (a ``Reward``
subclass or a plain callable; see ``trainer.rewards.base`` and ``trainer.plugins``).
"""

from trainer.rewards import builtins as _builtins  # noqa: F401 - registers the built-in rewards
from trainer.rewards.base import CallableReward, Reward, RewardFn
from trainer.rewards.registry import (
    REWARDS,
    get_reward,
    list_rewards,
    register_reward,
    reward_defaults,
    reward_error,
    unavailable_rewards,
)

__all__ = ["REWARDS", "CallableReward", "Reward", "RewardFn", "get_reward", "list_rewards",
           "register_reward", "reward_defaults", "reward_error", "unavailable_rewards"]
