"""Numeric answer match (GSM8K; GDPO Section 4.2's binary correctness reward for math).

GDPO 4.2: "R_correct in {0, 1} indicates whether the final answer extracted from the model's response
matches the ground truth." ``extract_final_number`` is that extraction; the comparison is numeric with
a tolerance, so ``"18.0"`` matches ``18``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainer.rewards.base import Reward, gold_value, prediction_text

__all__ = ["NumericMatch", "extract_final_number", "numbers_match", "parse_number"]

# A number not glued to a preceding word character or dot: "5-3" yields 5 and 3, never -3; thousands
# commas only in groups of three ("1,234,567"); the trailing period of a sentence is not a decimal.
_NUMBER = re.compile(
    r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
    r"|(?<![\w.])[-+]?\.\d+"
)
_FRAC = re.compile(r"([-+]?)\s*\\[dt]?frac\s*\{\s*([-+]?\d+(?:\.\d+)?)\s*\}\s*\{\s*([-+]?\d+(?:\.\d+)?)\s*\}")
_SLASH_FRAC = re.compile(r"^\s*([-+]?\d+)\s*/\s*(\d+)\s*$")
_HASHES = "####"
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:|=)", re.IGNORECASE)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-"})


def parse_number(token: str) -> float | None:
    """Parse one number token: thousands commas, sign, decimals, exponent; ``None`` if not a number.

    Example: ``parse_number("1,234.5") == 1234.5``, ``parse_number("-.5") == -0.5``,
    ``parse_number("abc") is None``.
    """
    try:
        value = float(token.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _first_number(segment: str) -> float | None:
    frac = _FRAC.search(segment)
    if frac is not None:
        sign, num, den = frac.groups()
        if float(den) != 0:
            return float(Fraction(f"{sign}1") * Fraction(num) / Fraction(den))
    slash = _SLASH_FRAC.match(segment)
    if slash is not None:
        num, den = slash.groups()
        if float(den) != 0:
            return float(Fraction(num) / Fraction(den))
    match = _NUMBER.search(segment)
    return parse_number(match.group()) if match else None


def _boxed_content(text: str, start: int) -> str:
    # Brace matching, so "\boxed{\frac{1}{2}}" yields "\frac{1}{2}"; an unclosed box runs to the end.
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start : i - 1] if depth == 0 else text[start:]


def extract_final_number(text: str) -> float | None:
    """Extract the final numeric answer of a model output; ``None`` when there is none.

    The last explicit answer marker wins: ``#### x`` (GSM8K), ``\\boxed{x}`` (math), or
    ``answer is x`` / ``answer: x``; a ``####`` or ``\\boxed`` marker with no number after it gives
    ``None`` (the model committed to a non-number), while "answer is" without a number on its line is
    ignored. Without a marker, the last number in the text is taken.

    Examples: ``"so 3 + 15 = 18\\n#### 18" -> 18.0``, ``"The answer is 1,234." -> 1234.0``,
    ``"\\boxed{18}" -> 18.0``, ``"\\boxed{\\frac{3}{4}}" -> 0.75``, ``"it costs -3.50." -> -3.5``,
    ``"pages 5-7" -> 7.0``, ``"no idea" -> None``.
    """
    if not isinstance(text, str):
        return None
    text = text.translate(_MINUS_SIGNS)
    markers: list[tuple[int, str, bool]] = []
    hashes = text.rfind(_HASHES)
    if hashes >= 0:
        markers.append((hashes, text[hashes + len(_HASHES) :].split("\n", 1)[0], True))
    boxes = list(_BOXED.finditer(text))
    if boxes:
        markers.append((boxes[-1].start(), _boxed_content(text, boxes[-1].end()), True))
    for found in reversed(list(_ANSWER_IS.finditer(text))):
        segment = text[found.end() :].split("\n", 1)[0]
        if _first_number(segment) is not None:
            markers.append((found.start(), segment, False))
            break
    if markers:
        _, segment, _ = max(markers, key=lambda m: m[0])
        return _first_number(segment)
    numbers = _NUMBER.findall(text)
    return parse_number(numbers[-1]) if numbers else None


def numbers_match(a: float, b: float, *, rel_tol: float = 1e-9, abs_tol: float = 1e-6) -> bool:
    """``math.isclose`` with an absolute floor, so ``18.0000001`` matches ``18`` but ``17.99`` does not."""
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def _gold_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return extract_final_number(value)
    return None


@dataclass(frozen=True)
class NumericMatch(Reward):
    """1.0 when the final number of the prediction equals the gold number within tolerance, else 0.0.

    The gold value may be a number or a string (GSM8K ``answer`` is ``"18"``; a full ``"... #### 18"``
    solution also works). Example: gold ``"1234"``, prediction ``"The answer is 1,234."``: 1.0; a
    prediction with no number: 0.0; an unparseable gold value: ``None``.
    """

    name = "numeric_match"
    value_range = (0.0, 1.0)

    gold_field: str = "answer"
    prediction_field: str | None = None
    rel_tol: float = 1e-9
    abs_tol: float = 1e-6

    def __post_init__(self) -> None:
        if self.rel_tol < 0 or self.abs_tol < 0:
            raise ValueError("rel_tol and abs_tol must be >= 0")

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        gold = _gold_number(gold_value(example, self.gold_field))
        if gold is None:
            return None
        text = prediction_text(prediction, self.prediction_field)
        predicted = extract_final_number(text) if text is not None else None
        if predicted is None:
            return 0.0
        return float(numbers_match(predicted, gold, rel_tol=self.rel_tol, abs_tol=self.abs_tol))
