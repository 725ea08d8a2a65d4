"""Length reward and conditioned length reward (GDPO Section 4.2 and Eq. 8).

GDPO 4.2 (math reasoning, l = 4000 tokens)::

    R_length = 1 if response length <= l else 0

and Section 4.2.1 replaces it by the conditioned variant (an instance of Eq. 8,
``r_k = r_k if r_l >= t else 0``, with r_k = R_length, r_l = R_correct, t = 1)::

    R~_length = 1 if response length <= l and R_correct = 1 else 0

"Response length" is what the policy generated: by default the total over the trajectory's module calls'
completions (optionally one module's), or the prediction text with ``source="prediction"``. Length is
measured by ``count_tokens`` (default: whitespace split; pass a tokenizer's ``len(tok.encode(s))`` for
real tokens or ``len`` for characters).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.rewards.base import Reward, calls_of, prediction_text, whitespace_token_count
from trainer.rewards.registry import get_reward

__all__ = ["ConditionedLength", "Length", "length_within", "response_length"]

_SOURCES = ("completions", "prediction")


def length_within(
    text: str, limit: int, count_tokens: Callable[[str], int] = whitespace_token_count
) -> float:
    """GDPO 4.2: 1.0 if ``count_tokens(text) <= limit`` else 0.0 (the limit itself is within).

    Example: ``length_within("a b c", 3) == 1.0``, ``length_within("a b c d", 3) == 0.0``,
    ``length_within("abcd", 3, count_tokens=len) == 0.0`` (characters).
    """
    return float(count_tokens(text) <= limit)


def response_length(
    prediction: Any,
    trajectory: Any,
    *,
    count_tokens: Callable[[str], int] = whitespace_token_count,
    source: str = "completions",
    module: str | None = None,
    prediction_field: str | None = None,
) -> int | None:
    """Length of the response; ``None`` when there is nothing to measure.

    ``source="completions"``: sum of ``count_tokens(call.completion)`` over the trajectory's calls (of
    ``module`` only, when given); ``None`` if there is no such call. ``source="prediction"``:
    ``count_tokens`` of the prediction text; ``None`` if the prediction is not text.

    Example: calls with completions ``"a b"`` and ``"c"`` -> 3.
    """
    if source == "prediction":
        text = prediction_text(prediction, prediction_field)
        return None if text is None else count_tokens(text)
    calls = calls_of(trajectory, module)
    if not calls:
        return None
    return sum(
        count_tokens(c) for c in (getattr(call, "completion", "") for call in calls) if isinstance(c, str)
    )


@dataclass(frozen=True)
class Length(Reward):
    """GDPO 4.2 length reward R_length in {0, 1}: 1 when the response length is <= ``limit``.

    Default ``limit=4000`` is the paper's l (4000 tokens); with the default whitespace counter it is
    4000 words. Example: ``Length(limit=3, source="prediction")({}, "a b c", None) == 1.0``.
    """

    name = "length"
    value_range = (0.0, 1.0)

    limit: int = 4000
    count_tokens: Callable[[str], int] = whitespace_token_count
    source: str = "completions"
    module: str | None = None
    prediction_field: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0:
            raise ValueError(f"limit must be a non-negative int, got {self.limit!r}")
        if self.source not in _SOURCES:
            raise ValueError(f"source must be one of {_SOURCES}, got {self.source!r}")
        if not callable(self.count_tokens):
            raise ValueError("count_tokens must be a callable str -> int")

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        n = response_length(
            prediction,
            trajectory,
            count_tokens=self.count_tokens,
            source=self.source,
            module=self.module,
            prediction_field=self.prediction_field,
        )
        return None if n is None else float(n <= self.limit)


@dataclass(frozen=True)
class ConditionedLength(Reward):
    """GDPO 4.2.1 conditioned length reward R~_length in {0, 1} (Eq. 8 applied per rollout).

    1.0 when the response is within ``limit`` and the ``condition`` reward (a registry name, default
    ``"numeric_match"``, built with ``condition_params``) is >= ``threshold`` (default 1, i.e. correct);
    else 0.0. ``None`` when either the condition or the length cannot be computed.

    Example with ``limit=5, source="prediction"`` and ``example = {"answer": "18"}``: ``"#### 18"`` -> 1.0;
    ``"#### 17"`` -> 0.0 (wrong, so no length reward); a correct but 6-word answer -> 0.0.
    """

    name = "conditioned_length"
    value_range = (0.0, 1.0)

    condition: str = "numeric_match"
    condition_params: Mapping[str, Any] | None = None
    threshold: float = 1.0
    limit: int = 4000
    count_tokens: Callable[[str], int] = whitespace_token_count
    source: str = "completions"
    module: str | None = None
    prediction_field: str | None = None
    _condition: Any = field(init=False, repr=False, compare=False, default=None)
    _length: Length = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.condition == self.name:
            raise ValueError("conditioned_length cannot be conditioned on itself")
        object.__setattr__(
            self, "_condition", get_reward(self.condition, **dict(self.condition_params or {}))
        )
        object.__setattr__(
            self,
            "_length",
            Length(
                limit=self.limit,
                count_tokens=self.count_tokens,
                source=self.source,
                module=self.module,
                prediction_field=self.prediction_field,
            ),
        )

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        gate = self._condition(example, prediction, trajectory)
        if gate is None or math.isnan(gate):
            return None
        within = self._length(example, prediction, trajectory)
        if within is None:
            return None
        return float(within == 1.0 and gate >= self.threshold)
