"""A format reward: does the output match a regular expression?

GDPO's tasks pair a format reward (the tool-call layout, Appendix C) with a correctness reward; this
is the generic binary form of the first: 1.0 when the whole (stripped) prediction text matches
``pattern`` (``re.fullmatch``, ``.`` also matching newlines), else 0.0. Example: with the default
pattern ``.*\\.`` (ends with a period), ``"apple."`` scores 1.0 and ``"apple"`` 0.0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trainer.rewards.base import Reward, prediction_text

__all__ = ["RegexMatch"]


@dataclass(frozen=True)
class RegexMatch(Reward):
    """1.0 when the whole stripped prediction matches ``pattern`` (``re.fullmatch``), else 0.0.

    A prediction that is not text (missing, a list) scores 0.0: a wrong format, never ``None``.
    An invalid pattern is refused when the reward is built, so a task cannot be saved with it.
    """

    name = "regex_match"
    value_range = (0.0, 1.0)

    pattern: str = r".*\."
    prediction_field: str | None = None

    def __post_init__(self):
        if not isinstance(self.pattern, str) or not self.pattern:
            raise ValueError(f"regex_match: pattern must be a non-empty regular expression, got {self.pattern!r}")
        try:
            compiled = re.compile(self.pattern, flags=re.DOTALL)
        except re.error as exc:
            raise ValueError(f"regex_match: pattern {self.pattern!r} is not a valid regular expression: {exc}") from None
        # Compiled once per reward (frozen dataclass: set past the generated __setattr__).
        object.__setattr__(self, "_compiled", compiled)

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        text = prediction_text(prediction, self.prediction_field)
        if text is None:
            return 0.0
        return float(self._compiled.fullmatch(text.strip()) is not None)
