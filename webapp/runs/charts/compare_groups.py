"""Which compared runs are drawn as one curve with a band: by default, the runs whose settings are equal
except their seed (repeats of one configuration); or, on request, the runs that share one setting's
value (`group_by=learning_rate`).

Why: a sweep or an experiment repeats each configuration over seeds, and N lines per configuration
hide what the seeds say together (docs/explanation/architecture.md: runs that differ only in their seed are one group
everywhere runs are compared, a mean and a bootstrap band). A group's identity is its
settings as the configuration-differences table shows them (webapp/runs/charts/series.py
`config_differences`: the task, the program and every flattened config setting), minus the ones in
IDENTITY_IGNORED, so "equal" here means what the page says is equal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from webapp.runs.charts.series import flatten_config
from webapp.runs.models import Run

IDENTITY_IGNORED = frozenset({"seed"})  # settings whose runs are repeats of one configuration
LABEL_SETTINGS = 3  # a label names at most this many settings
# A number in a label is rounded to this many significant digits (a sweep's learning_rate=0.0017692267954532756
# reads 0.001769), more only where two groups' labels would otherwise read the same.
LABEL_DIGITS = 4
MAX_LABEL_DIGITS = 17  # a float's every digit
UNSET = ""  # config_differences' value for a setting a run does not have


class BadGrouping(ValueError):
    """The grouping asked for cannot be made (the message says why)."""


@dataclass
class RunGroup:
    """Runs drawn as one curve. `settings`: what tells this group from the others, (name, value text)."""

    id: int
    runs: list[Run]
    settings: list[tuple[str, str]] = field(default_factory=list)
    digits: int = LABEL_DIGITS  # significant digits of a number in the label

    @property
    def header(self) -> str:
        """The group's column in the differences table: its run's name, or its label and size."""
        return str(self.runs[0]) if len(self.runs) == 1 else f"{self.label} · {len(self.runs)} runs"

    @property
    def label(self) -> str:
        """The group's name in the legend and the hover: its distinguishing settings, or its run's name."""
        if len(self.runs) == 1 and not self.settings:
            return str(self.runs[0])
        if not self.settings:
            return f"{len(self.runs)} runs"
        shown = ", ".join(f"{name}={readable(value, self.digits)}" for name, value in self.settings[:LABEL_SETTINGS])
        more = len(self.settings) - LABEL_SETTINGS
        return shown + (f" (+{more} more)" if more > 0 else "")


def readable(value: str, digits: int = MAX_LABEL_DIGITS) -> str:
    """A setting's value text (JSON) as a label shows it: strings without their quotes, a fractional
    number to `digits` significant digits (`0.0017692267954532756` -> `0.001769` with 4)."""
    if value == UNSET:
        return "(unset)"
    if value.startswith('"'):
        try:
            return str(json.loads(value))
        except ValueError:
            return value
    if any(c in value for c in ".eE"):  # a fraction (JSON's true has an e: float() refuses it)
        try:
            return f"{float(value):.{digits}g}"
        except ValueError:
            return value
    return value


def _labels_told_apart(groups: list[RunGroup]) -> list[RunGroup]:
    """Rounds the groups' numbers to LABEL_DIGITS unless that makes two labels read the same; then to
    as many digits as tell them apart."""
    def distinct(digits: int) -> int:
        for group in groups:
            group.digits = digits
        return len({group.label for group in groups})

    most = distinct(MAX_LABEL_DIGITS)  # labels that name only some settings may read alike anyway
    next(digits for digits in range(LABEL_DIGITS, MAX_LABEL_DIGITS + 1) if distinct(digits) == most)
    return groups


def group_runs(runs: Sequence[Run], differences: list[tuple[str, list[str]]], *,
               group_by: str | None = None) -> list[RunGroup]:
    """The runs' groups, in the order of each group's first run. `differences` is
    config_differences(runs) (computed once by the caller: the page shows it too). With `group_by`,
    one group per value of that setting (BadGrouping if no run has it)."""
    values = dict(differences)
    if group_by and group_by not in values:
        shared = setting_value(runs[0], group_by) if runs else None
        if shared is None:
            choices = ", ".join(grouping_choices(differences)) or "(the runs differ in no setting)"
            raise BadGrouping(f"No compared run has the setting {group_by!r}; group by one of: {choices}.")
        return [RunGroup(0, list(runs), [(group_by, shared)])]  # every run has the same value
    names = [group_by] if group_by else [name for name, _ in differences if name not in IDENTITY_IGNORED]
    groups: dict[tuple, RunGroup] = {}
    for i, run in enumerate(runs):
        identity = tuple(values[name][i] for name in names)
        group = groups.get(identity)
        if group is None:
            group = groups[identity] = RunGroup(len(groups), [], list(zip(names, identity, strict=True)))
        group.runs.append(run)
    return _labels_told_apart(list(groups.values()))


def grouping_choices(differences: list[tuple[str, list[str]]]) -> list[str]:
    """The settings the page offers to group by: those in which the runs differ."""
    return [name for name, _ in differences]


def setting_value(run: Run, name: str) -> str | None:
    """The run's value text of setting `name` as config_differences writes it (None: it has none)."""
    flat = {"task": run.task.name, "program": run.task.program.name, **flatten_config(run.config)}
    return flat.get(name)


def group_differences(groups: Sequence[RunGroup], runs: Sequence[Run],
                      differences: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """The configuration differences with a column per group instead of per run: a setting its runs
    share shows its value; one that varies inside the group (its seeds) lists the distinct values."""
    position = {run.pk: i for i, run in enumerate(runs)}
    rows = []
    for name, per_run in differences:
        cells = []
        for group in groups:
            seen = list(dict.fromkeys(per_run[position[r.pk]] for r in group.runs))
            cells.append(seen[0] if len(seen) == 1 else ", ".join(v or "(unset)" for v in seen))
        rows.append((name, cells))
    return rows
