"""Retrieval recall of gold titles (HoVer, HotpotQA supporting titles).

MMGRPO (Section 5.1, HoVer_4-HOP) scores a program that returns up to 100 passages by "whether the gold
passages are found within the returned passages using Recall@100". Passages are DSPy/ColBERTv2
``long_text`` strings ``"Title | text"``, so the title is the part before the first ``" | "``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainer.rewards.base import Reward, calls_of, gold_value, prediction_value
from trainer.rewards.text import normalize_answer

__all__ = ["TitleRecall", "normalize_title", "title_of", "title_recall"]


def normalize_title(title: str) -> str:
    """Unicode NFC, then SQuAD ``normalize_answer`` (as DSPy's ``normalize_text`` does for titles).

    Example: ``normalize_title("The Beatles") == normalize_title("beatles") == "beatles"``.
    """
    return normalize_answer(unicodedata.normalize("NFC", title))


def title_of(item: Any) -> str | None:
    """The title of one retrieved item: ``"Title | text"`` -> ``"Title"``, ``{"title": t}`` -> ``t``.

    Anything else (numbers, ``None``, lists) has no title and is skipped.
    """
    if isinstance(item, str):
        return item.split(" | ", 1)[0]
    if isinstance(item, Mapping):
        title = item.get("title")
        return title if isinstance(title, str) else None
    return None


def title_recall(retrieved: Iterable[Any], gold_titles: Iterable[str], *, k: int | None = None) -> float:
    """Fraction of distinct gold titles found among the first ``k`` retrieved items (all when ``None``).

    Recall@k = |normalize(gold) ∩ normalize(titles(retrieved[:k]))| / |normalize(gold)|.
    Example: gold ``["Miss Potter", "Chris Noonan"]``, retrieved ``["Miss Potter | a film ...",
    "Babe | ..."]`` gives 0.5; with ``k=0`` it gives 0.0. Raises ``ValueError`` on empty gold.
    """
    gold = {normalize_title(t) for t in gold_titles}
    if not gold:
        raise ValueError("title_recall needs at least one gold title")
    items = list(retrieved)
    if k is not None:
        items = items[:k]
    found = {normalize_title(t) for t in map(title_of, items) if t is not None}
    return len(gold & found) / len(gold)


def _as_items(value: Any) -> list[Any]:
    # A bare string is one passage, not a sequence of characters.
    if isinstance(value, (str, Mapping)):
        return [value]
    if isinstance(value, Iterable):
        return list(value)
    return []


@dataclass(frozen=True)
class TitleRecall(Reward):
    """Recall of the example's gold titles among the retrieved passages; in [0, 1].

    The retrieved passages come from the prediction (or its ``prediction_field``, e.g.
    ``"retrieved_docs"``) or, when ``module`` is set, from the ``parsed`` outputs of that module's calls
    in the trajectory, in call order. ``k`` truncates to Recall@k; ``all_or_nothing=True`` gives 1.0
    only when every gold title is found (DSPy's HoVer ``discrete_retrieval_eval``).

    Example: ``example = {"supporting_titles": ["A", "B"]}``, prediction ``["A | ...", "C | ..."]``:
    0.5 (0.0 with ``all_or_nothing``). No gold titles gives ``None``.
    """

    name = "title_recall"
    value_range = (0.0, 1.0)

    gold_field: str = "supporting_titles"
    prediction_field: str | None = None
    module: str | None = None
    k: int | None = None
    all_or_nothing: bool = False

    def __post_init__(self) -> None:
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0):
            raise ValueError(f"k must be a non-negative int or None, got {self.k!r}")

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        gold = gold_value(example, self.gold_field)
        if isinstance(gold, str):
            gold = [gold]
        if not isinstance(gold, Iterable):
            return None
        gold_titles = [t for t in gold if isinstance(t, str)]
        if not gold_titles:
            return None
        if self.module is not None:
            retrieved = [
                item
                for call in calls_of(trajectory, self.module)
                if getattr(call, "parsed_ok", False)
                for item in _as_items(getattr(call, "parsed", None))
            ]
        else:
            retrieved = _as_items(prediction_value(prediction, self.prediction_field))
        recall = title_recall(retrieved, gold_titles, k=self.k)
        if self.all_or_nothing:
            return float(recall == 1.0)
        return recall
