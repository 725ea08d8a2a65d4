"""SQuAD answer normalization, token F1 and exact match, and the rewards built on them.

``normalize_answer`` and ``token_f1`` are the official SQuAD evaluation functions (Rajpurkar et al.
2016, ``evaluate-v2.0.py``), which HotpotQA's evaluation and the MHGPO paper (EM / F1 on HotpotQA)
use. ``trainer.algorithms.metrics`` shares them (intra-group similarity is mean pairwise token F1).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainer.rewards.base import Reward, gold_value, prediction_text

__all__ = [
    "CharF1",
    "ExactMatch",
    "TokenF1",
    "char_f1",
    "exact_match",
    "gold_answers",
    "normalize_answer",
    "token_f1",
]

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop ASCII punctuation, drop articles a/an/the, collapse spaces.

    The steps run in SQuAD's order (lower -> punctuation -> articles -> whitespace), so
    ``normalize_answer("The  Eiffel-Tower!") == "eiffeltower"`` (the hyphen is removed, not spaced)
    and ``normalize_answer("An apple, a day") == "apple day"``. Non-ASCII punctuation is kept, as in
    SQuAD.
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token-level F1 between two strings after ``normalize_answer``.

    F1 = 2 P R / (P + R) with P = common / |pred tokens|, R = common / |gold tokens|, where common counts
    shared tokens with multiplicity. When either side normalizes to no tokens, F1 is 1.0 if both do and
    0.0 otherwise (SQuAD v2 convention: two empty answers agree). Symmetric in its arguments.

    Example: ``token_f1("the cat sat", "a cat sat down")``: tokens [cat, sat] vs [cat, sat, down],
    common 2, P = 1, R = 2/3, F1 = 0.8.
    """
    return f1_tokens(normalize_answer(prediction).split(), normalize_answer(gold).split())


def f1_tokens(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    """Token F1 of two already-normalized token lists (see ``token_f1``); symmetric.

    Example: ``f1_tokens(["cat", "sat"], ["cat", "sat", "down"]) == 0.8``.
    """
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def char_f1(prediction: str, gold: str) -> float:
    """F1 over the characters (with multiplicity) of the normalized strings, spaces ignored.

    Partial credit for near misses: a dense reward for tasks where exact match is almost never hit
    at the start (the toy task on a random model). Example: ``char_f1("appl", "apple")``: common 4,
    P = 1, R = 4/5, F1 = 0.889 (rounded).
    """
    return f1_tokens(list(normalize_answer(prediction).replace(" ", "")),
                     list(normalize_answer(gold).replace(" ", "")))


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when both strings are equal after ``normalize_answer``, else 0.0.

    Example: ``exact_match("The Beatles.", "beatles") == 1.0``.
    """
    return float(normalize_answer(prediction) == normalize_answer(gold))


def gold_answers(value: Any) -> list[str] | None:
    """Gold answer(s) as a list of strings: one string, a number, or a list of aliases; else ``None``.

    Example: ``gold_answers(["NYC", "New York"]) == ["NYC", "New York"]``, ``gold_answers(18) == ["18"]``,
    ``gold_answers([]) is None`` (no gold, so the reward is not applicable).
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, Sequence):
        answers = [str(v) for v in value if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
        return answers or None
    return None


def _best_over_golds(score, example: dict, prediction: Any, gold_field: str, prediction_field: str | None):
    golds = gold_answers(gold_value(example, gold_field))
    if golds is None:
        return None
    text = prediction_text(prediction, prediction_field)
    if text is None:
        return 0.0
    return max(score(text, gold) for gold in golds)


@dataclass(frozen=True)
class ExactMatch(Reward):
    """Exact match after SQuAD normalization, maximized over gold aliases; in {0, 1}.

    Example: with ``example = {"answer": "Paris"}``, the prediction ``"paris."`` scores 1.0 and
    ``"Paris, France"`` 0.0; an example without ``answer`` gives ``None``.
    """

    name = "exact_match"
    value_range = (0.0, 1.0)

    gold_field: str = "answer"
    prediction_field: str | None = None

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        return _best_over_golds(exact_match, example, prediction, self.gold_field, self.prediction_field)


@dataclass(frozen=True)
class CharF1(Reward):
    """Character F1 against the gold answer (see ``char_f1``), maximized over gold aliases; in [0, 1]."""

    name = "char_f1"
    value_range = (0.0, 1.0)

    gold_field: str = "answer"
    prediction_field: str | None = None

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        return _best_over_golds(char_f1, example, prediction, self.gold_field, self.prediction_field)


@dataclass(frozen=True)
class TokenF1(Reward):
    """SQuAD token F1 against the gold answer, maximized over gold aliases; in [0, 1].

    This is the shared reward the MHGPO paper propagates (Appendix B: "answers serve as golden labels
    for reward computation based on the F1 score"). Example: gold ``"a cat sat down"``, prediction
    ``"the cat sat"`` scores 0.8.
    """

    name = "token_f1"
    value_range = (0.0, 1.0)

    gold_field: str = "answer"
    prediction_field: str | None = None

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        return _best_over_golds(token_f1, example, prediction, self.gold_field, self.prediction_field)
