"""Cohort's built-in rewards, registered by name (the table in ``trainer.rewards``)."""

from __future__ import annotations

from trainer.rewards.label import LabelMatch
from trainer.rewards.length import ConditionedLength, Length
from trainer.rewards.mhgpo import AnswererPenalty, RerankerPenalty, RewriterPenalty
from trainer.rewards.numeric import NumericMatch
from trainer.rewards.pattern import RegexMatch
from trainer.rewards.registry import register_builtin_rewards
from trainer.rewards.retrieval import TitleRecall
from trainer.rewards.text import CharF1, ExactMatch, TokenF1
from trainer.rewards.toolrl import ToolRLCorrectness, ToolRLFormat

BUILTIN_REWARDS = (
    ExactMatch,
    TokenF1,
    CharF1,
    RegexMatch,
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

register_builtin_rewards(BUILTIN_REWARDS)
