"""DSPy metrics as Cohort rewards.

A DSPy metric is ``metric(example, prediction, trace=None)`` over a ``dspy.Example`` and returns a
bool, a number, a ``dspy.Prediction`` with a ``score`` (GEPA's feedback metrics), or, for several
criteria at once, a dict of components. ``dspy_metric`` turns one into Cohort's reward contract
``reward(example, output, trajectory) -> float | None``; GDPO then takes several of them (or several
components of one) as its rewards and normalizes each on its own (paper 002, Eq. 4-6).

Register the result under ``cohort.rewards`` in your package's entry points::

    answer_em = dspy_metric(my_metric, component="em")
    answer_format = dspy_metric(my_metric, component="format")
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dspy

__all__ = ["dspy_metric", "metric_score"]


def metric_score(result: Any, component: str | None = None, *, metric_name: str = "metric") -> float | None:
    """The number a DSPy metric's ``result`` stands for (``component`` of a dict result).

    >>> metric_score(True), metric_score(0.5), metric_score({"em": 1, "f1": 0.5}, "f1")
    (1.0, 0.5, 0.5)
    >>> metric_score(dspy.Prediction(score=0.25, feedback="close"))
    0.25
    """
    if component is not None:
        if isinstance(result, Mapping) or hasattr(result, "keys"):
            if component not in result.keys():
                raise ValueError(f"{metric_name} returned no component {component!r}; it has {sorted(result.keys())}")
            result = result[component]
        else:
            raise ValueError(f"{metric_name} returned {type(result).__name__}, not a dict with component {component!r}")
    elif hasattr(result, "score") and not isinstance(result, numbers.Number):
        result = result.score
    if result is None:
        return None
    if isinstance(result, bool | numbers.Real):
        value = float(result)
        return value if not math.isnan(value) else None
    raise TypeError(
        f"{metric_name} returned {result!r} ({type(result).__name__}); a metric returns a bool, a number, "
        "a Prediction with a score, or a dict of those"
    )


def dspy_metric(
    metric: Callable[..., Any],
    *,
    component: str | None = None,
    inputs: Sequence[str] | None = None,
    value_range: tuple[float, float] = (0.0, 1.0),
) -> Callable[[dict, Any, Any], float | None]:
    """A Cohort reward calling DSPy ``metric`` with ``dspy.Example(**example)`` and the prediction.

    ``component`` picks one value of a metric that returns a dict. ``inputs`` marks the example's input
    fields (``with_inputs``) for metrics that look at ``example.inputs()``. The trace argument is
    ``None``: Cohort scores finished rollouts, not bootstrapping traces.
    """
    label = getattr(metric, "__name__", type(metric).__name__) + (f"[{component!r}]" if component else "")

    def reward(example: dict, output: Any, trajectory: Any = None) -> float | None:
        dspy_example = dspy.Example(**example)
        if inputs:
            dspy_example = dspy_example.with_inputs(*inputs)
        return metric_score(metric(dspy_example, output, None), component, metric_name=label)

    reward.__name__ = label
    reward.__doc__ = f"DSPy metric {label} as a Cohort reward."
    reward.value_range = tuple(value_range)
    return reward
