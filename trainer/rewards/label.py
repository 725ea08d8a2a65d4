"""Label match for classification tasks (Banking77 intents, HoVer SUPPORTED / NOT_SUPPORTED)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trainer.rewards.base import Reward, gold_value, prediction_text

__all__ = ["LabelMatch", "normalize_label"]

_SEPARATORS = re.compile(r"[\s_\-]+")
_EDGE_JUNK = re.compile(r"^[\W_]+|[\W_]+$")


def normalize_label(text: str) -> str:
    """Case-fold, trim surrounding punctuation/quotes, and unify word separators to ``_``.

    Models write a label as ``card_arrival``, ``"Card Arrival"`` or ``card-arrival.``; these are the
    same label. Separators are unified, not removed, so ``NOT_SUPPORTED`` never becomes ``SUPPORTED``.

    Example: ``normalize_label(' "Card Arrival". ') == "card_arrival"``,
    ``normalize_label("not supported") == "not_supported"``.
    """
    text = _EDGE_JUNK.sub("", text.strip().casefold())
    return _SEPARATORS.sub("_", text)


@dataclass(frozen=True)
class LabelMatch(Reward):
    """1.0 when the predicted label equals the gold label, else 0.0.

    ``strict=False`` (default) compares ``normalize_label`` forms; ``strict=True`` compares the stripped
    strings exactly. Example: gold ``"card_arrival"``: ``"Card arrival"`` scores 1.0 (0.0 when strict),
    ``"card_linking"`` 0.0; a missing prediction scores 0.0 and a missing gold label gives ``None``.
    """

    name = "label_match"
    value_range = (0.0, 1.0)

    gold_field: str = "label"
    prediction_field: str | None = None
    strict: bool = False

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        gold = gold_value(example, self.gold_field)
        if isinstance(gold, bool) or not isinstance(gold, (str, int)):
            return None
        text = prediction_text(prediction, self.prediction_field)
        if text is None:
            return 0.0
        if self.strict:
            return float(text.strip() == str(gold).strip())
        return float(normalize_label(text) == normalize_label(str(gold)))
