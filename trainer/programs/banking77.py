"""Banking77 intent classification with chain of thought (MMGRPO Section 5: a one-module program;
the model reasons, then names one of the 77 intents)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.programs.base import tagged_field
from trainer.programs.registry import register_program
from trainer.programs.single import SingleModuleProgram


@register_program
class Banking77Classifier(SingleModuleProgram):
    name = "banking77"
    title = "Banking77: intent classification with chain of thought"
    description = "One module reads a banking customer query, reasons briefly, then answers 'Label: <intent>'."
    module = "classify"
    agents = ("classify",)
    dataset_kind = "classification"
    example_fields = ("text", "label")
    default_rewards = ({"name": "label_match", "weight": 1.0, "params": {}},)
    options = ("labels",)

    def __init__(self, labels: Sequence[str] | None = None):
        self.labels: tuple[str, ...] = tuple(labels or ())

    def observe_examples(self, examples: Sequence[dict[str, Any]]) -> None:
        """Without an explicit label list, the intents are the labels seen in the training data."""
        if not self.labels:
            self.labels = tuple(sorted({str(e["label"]) for e in examples if e.get("label")}))

    def instructions(self, example: dict[str, Any]) -> str:
        intents = ", ".join(self.labels) if self.labels else "(any intent name)"
        return (f"Classify the customer's banking query into one intent.\nIntents: {intents}\n"
                "Think step by step in one or two sentences, then write 'Label: <intent>'.")

    def inputs(self, example: dict[str, Any]) -> str:
        return f"Query: {example['text']}"

    def parse(self, completion: str) -> tuple[bool, Any]:
        label = tagged_field(completion, "label")
        return (label is not None and label.strip() != ""), (label.strip() if label else None)
