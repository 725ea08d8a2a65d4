"""The common shape of every reward function.

A reward is a callable ``(example, prediction, trajectory) -> float | None``:

- ``example`` is the dataset row (a dict), where the reward finds its gold value under ``gold_field``;
- ``prediction`` is the program's final output (a string, a number, a dict, or an object with
  attributes; ``prediction_field`` picks one field of a dict/object);
- ``trajectory`` is the program's trace: only ``trajectory.calls`` is used, a list of call objects with
  ``module``, ``invocation_index``, ``completion``, ``parsed_ok`` and ``parsed``.

``None`` means "not applicable / could not be computed" (the gold value is missing or unusable); the
advantage code leaves it out of means and stds. A malformed or missing *prediction* is never ``None``:
it is a wrong answer and gets the reward's lowest value, so the policy is pushed away from it.

Every reward class declares ``name`` and ``value_range`` (min, max) so the UI can show them; a reward
whose range depends on its parameters overrides ``value_range`` on the instance.

Rewards from other packages (entry point group ``cohort.rewards``, registry name = entry point
name) come in two shapes:

- a ``Reward`` subclass, as the built-ins: a frozen dataclass whose fields (each with a default)
  are its parameters;
- a plain callable ``reward(example, output, trajectory) -> float | None`` (``None``: not
  applicable), optionally with keyword-only parameters that have defaults; those become the
  reward's parameters, which a task sets and ``reward_defaults`` lists. A ``value_range``
  attribute on the function gives its range (default ``(0, 1)``). For example::

      def within_limit(example, output, trajectory, *, limit: int = 20) -> float | None:
          return float(len(str(output)) <= limit)

      within_limit.value_range = (0.0, 1.0)

  The registry wraps it in a generated ``CallableReward`` subclass: ``get_reward(name, limit=5)``
  checks the parameter names like a built-in's and returns an object with ``.name``, ``.params``
  and ``.value_range`` that calls the function with those parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "CallableReward",
    "Reward",
    "RewardFn",
    "calls_of",
    "gold_value",
    "prediction_text",
    "prediction_value",
    "whitespace_token_count",
]

RewardFn = Callable[[dict, Any, Any], "float | None"]


def whitespace_token_count(text: str) -> int:
    """Count whitespace-separated tokens, the default ``count_tokens`` of length-based rewards.

    Example: ``whitespace_token_count("  a b\\n c ") == 3``.
    """
    return len(text.split())


def prediction_value(prediction: Any, field: str | None) -> Any:
    """Return ``prediction`` itself, or its ``field`` (dict key first, then attribute) when given.

    Example: ``prediction_value({"answer": "x"}, "answer") == "x"``; a missing field gives ``None``.
    """
    if field is None:
        return prediction
    if isinstance(prediction, Mapping):
        return prediction.get(field)
    return getattr(prediction, field, None)


def prediction_text(prediction: Any, field: str | None = None) -> str | None:
    """The prediction as text: strings as they are, numbers through ``str``, anything else ``None``.

    Example: ``prediction_text(18) == "18"``, ``prediction_text({"a": "x"}, "a") == "x"``,
    ``prediction_text([1, 2]) is None`` (a list is not an answer string).
    """
    value = prediction_value(prediction, field)
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return None


def gold_value(example: Any, field: str) -> Any:
    """Read the gold value ``example[field]``; ``None`` when the example has no such field."""
    if isinstance(example, Mapping):
        return example.get(field)
    return getattr(example, field, None)


def calls_of(trajectory: Any, module: str | None = None) -> list[Any]:
    """The trajectory's calls, optionally only those of ``module``; ``[]`` for a missing trajectory.

    Only ``trajectory.calls`` and ``call.module`` are read, so any object with that shape works.
    """
    calls = getattr(trajectory, "calls", None)
    if not isinstance(calls, Iterable):
        return []
    return [c for c in calls if module is None or getattr(c, "module", None) == module]


@dataclass(frozen=True)
class Reward:
    """Base class: a frozen dataclass whose fields are the reward's parameters.

    Subclasses set the class variables ``name`` (the registry key) and ``value_range``, and implement
    ``__call__``. ``params`` gives the parameter values (for logging and the UI).
    """

    name: ClassVar[str] = ""
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        raise NotImplementedError

    @property
    def params(self) -> dict[str, Any]:
        """The parameters this reward was built with, by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}

    def _set_range(self, low: float, high: float) -> None:
        # Frozen dataclass: instances whose range depends on parameters shadow the class default.
        object.__setattr__(self, "value_range", (float(low), float(high)))


@dataclass(frozen=True)
class CallableReward(Reward):
    """A plain reward callable as a ``Reward``: the registry generates one subclass per callable,
    with the callable's keyword-only parameters as dataclass fields and the callable as
    ``function``. The result is a float, or ``None`` (not applicable)."""

    function: ClassVar[Callable[..., Any]]

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        value = type(self).function(example, prediction, trajectory, **self.params)
        return None if value is None else float(value)
