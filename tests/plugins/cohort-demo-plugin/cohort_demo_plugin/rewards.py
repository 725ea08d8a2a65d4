"""The demo plugin's rewards, in both shapes Cohort accepts: a Reward subclass and plain callables."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from trainer.rewards.base import Reward, gold_value, prediction_text


@dataclass(frozen=True)
class DemoOverlap(Reward):
    """Character overlap (F1) of the output with the gold answer; None without a gold answer."""

    name = "demo_overlap"
    value_range = (0.0, 1.0)

    gold_field: str = "answer"

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        gold = gold_value(example, self.gold_field)
        if not isinstance(gold, str) or not gold:
            return None
        text = prediction_text(prediction) or ""
        common = sum((Counter(text) & Counter(gold)).values())
        return 2 * common / (len(text) + len(gold)) if common else 0.0


def demo_len(example, output, trajectory, *, limit: int = 20) -> float | None:
    """1 when the output has at most `limit` characters, else 0 (a plain callable reward)."""
    if output is None:
        return 0.0
    return float(len(str(output)) <= limit)


def demo_penalty(example, output, trajectory) -> float:
    """-1 for an empty output, else 0 (a plain callable with its own value range)."""
    return -1.0 if not output else 0.0


demo_penalty.value_range = (-1.0, 0.0)


def demo_inf(example, output, trajectory) -> float:
    """inf for an output with an odd number of characters, else 0: within a group of varied outputs
    the advantages, hence the loss and the gradient norm, become NaN (the alert tests' real NaN)."""
    return float("inf") if len(str(output or "")) % 2 else 0.0
