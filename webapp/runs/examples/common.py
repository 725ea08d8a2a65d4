"""What the across-runs view and the part-ways table share: when an example counts as *right*, and
which runs may be compared at all.

An example is right at a visit (a step that drew it) when its best rollout's total reward reaches the
*solved* threshold. By default that is the sum of the run's positive reward weights: the total when
every reward scores its maximum of 1 (Cohort's rewards are in [0, 1]); a run that names no rewards
(an external run whose client sent none) uses 1.0. `?solved=` overrides it, for a task whose rewards
are graded rather than pass/fail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from webapp.runs.models import Run
from webapp.runs.params import BadParam

DEFAULT_SOLVED = 1.0
_NUMBER = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")  # 1, -0.5, .5, 2e-3


class ExamplesRefused(Exception):
    """Runs or an example that cannot be compared; the message says why, for the page or the API."""


def solved_threshold(run: Run) -> float:
    """The total reward at which an example counts as right in `run` (see the module docstring)."""
    config = run.config if isinstance(run.config, dict) else {}
    weights = []
    for reward in config.get("rewards") or []:
        weight = reward.get("weight", 1.0) if isinstance(reward, dict) else None
        if isinstance(weight, int | float) and not isinstance(weight, bool) and math.isfinite(weight) and weight > 0:
            weights.append(float(weight))
    return sum(weights) if weights else DEFAULT_SOLVED


def same_task(runs: Sequence[Run]) -> None:
    """Refuses runs of different tasks: their examples share ids by chance, not by meaning."""
    tasks = {run.task_id for run in runs}
    if len(tasks) > 1:
        names = ", ".join(sorted({f"{run.task.name} (run {run.pk})" for run in runs}))
        raise ExamplesRefused(f"These runs train different tasks ({names}); answers compare only within one task.")


def parse_solved(raw: str | None, *, blank_is_absent: bool = True) -> float | None:
    """`solved=`: a finite number; absent (or blank on the page, whose form sends its empty fields) is None."""
    if raw is None or (blank_is_absent and raw.strip() == ""):
        return None
    if not _NUMBER.fullmatch(raw.strip()):  # digits, not Python's "1_0", "nan" or "infinity"
        raise BadParam(f"'solved' must be a number (the total reward that counts as right), not {raw[:40]!r}.")
    value = float(raw)
    if not math.isfinite(value):
        raise BadParam(f"'solved' must be a finite number, not {raw[:40]!r}.")
    return value
