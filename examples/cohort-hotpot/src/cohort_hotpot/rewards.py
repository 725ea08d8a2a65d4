"""The plugin's rewards, in the two shapes Cohort accepts: a DSPy metric and plain callables."""

from __future__ import annotations

import re
import string
from collections import Counter

import dspy

from trainer.dspy import dspy_metric
from trainer.dspy.adapters import uses_field_markers

# DSPy's own metric, unchanged, as a reward.
answer_em = dspy_metric(dspy.evaluate.answer_exact_match)


def _words(text: str) -> list[str]:
    text = "".join(ch for ch in str(text).lower() if ch not in string.punctuation)
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def answer_f1(example, output, trajectory, *, min_words: int = 1) -> float | None:
    """Token F1 of the predicted answer against the gold answer; None without a gold answer.

    ``min_words``: an answer shorter than this scores 0 (a parameter the launch form offers)."""
    gold = example.get("answer")
    if not gold:
        return None
    predicted = _words(getattr(output, "answer", "") or "")
    if len(predicted) < min_words:
        return 0.0
    common = sum((Counter(predicted) & Counter(_words(gold))).values())
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(_words(gold))
    return 2 * precision * recall / (precision + recall)


def marker_format(example, output, trajectory) -> float:
    """Share of the rollout's module calls whose completion used DSPy's field markers."""
    calls = list(getattr(trajectory, "calls", []) or [])
    if not calls:
        return 0.0
    return sum(uses_field_markers(call.completion) for call in calls) / len(calls)
