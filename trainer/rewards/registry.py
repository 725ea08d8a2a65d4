"""Registry of reward functions by stable name, for configs, the run form and the UI.

``REWARDS[name]`` is the reward class (its constructor is the factory; its ``value_range`` class
attribute is the default range); ``get_reward(name, **params)`` builds one with validated parameters.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.rewards.base import Reward
from trainer.rewards.label import LabelMatch
from trainer.rewards.length import ConditionedLength, Length
from trainer.rewards.mhgpo import AnswererPenalty, RerankerPenalty, RewriterPenalty
from trainer.rewards.numeric import NumericMatch
from trainer.rewards.retrieval import TitleRecall
from trainer.rewards.text import CharF1, ExactMatch, TokenF1
from trainer.rewards.toolrl import ToolRLCorrectness, ToolRLFormat

__all__ = ["REWARDS", "get_reward", "reward_defaults"]

REWARDS: dict[str, type[Reward]] = {
    cls.name: cls
    for cls in (
        ExactMatch,
        TokenF1,
        CharF1,
        LabelMatch,
        TitleRecall,
        NumericMatch,
        ToolRLFormat,
        ToolRLCorrectness,
        Length,
        ConditionedLength,
        RewriterPenalty,
        RerankerPenalty,
        AnswererPenalty,
    )
}


def _reward_class(name: str) -> type[Reward]:
    try:
        return REWARDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}") from None


def reward_defaults(name: str) -> dict[str, Any]:
    """The parameters of reward ``name`` and their default values (for forms and the UI).

    Example: ``reward_defaults("exact_match") == {"gold_field": "answer", "prediction_field": None}``.
    """
    fields = [f for f in dataclasses.fields(_reward_class(name)) if f.init]
    return {f.name: f.default for f in fields}


def get_reward(name: str, **params: Any) -> Reward:
    """Build reward ``name`` with ``params`` (the rest keep their defaults).

    Raises ``ValueError`` for an unknown name (listing the known ones), an unknown parameter (listing
    the accepted ones) or an invalid value. Example: ``get_reward("length", limit=512).value_range ==
    (0.0, 1.0)``.
    """
    cls = _reward_class(name)
    accepted = reward_defaults(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for reward {name!r}; "
            f"accepted: {', '.join(accepted) or '(none)'}"
        )
    return cls(**params)
