"""DSPy metrics, as DSPy users write them, turned into Cohort rewards with ``dspy_metric``."""

from __future__ import annotations

from trainer.dspy import dspy_metric


def overlap(example, pred, trace=None) -> float:
    """Share of the gold answer's characters found in the predicted answer."""
    gold, guess = set(example.answer.lower()), set((pred.answer or "").lower())
    return len(gold & guess) / len(gold) if gold else 0.0


def concise(example, pred, trace=None) -> bool:
    return len((pred.answer or "").split()) <= 3


def graded(example, pred, trace=None) -> dict[str, float]:
    """One metric, several criteria: GDPO normalizes each component on its own."""
    return {"overlap": overlap(example, pred), "concise": float(concise(example, pred))}


overlap_reward = dspy_metric(overlap)
concise_reward = dspy_metric(concise)
graded_overlap = dspy_metric(graded, component="overlap")
graded_concise = dspy_metric(graded, component="concise")
