"""Module credit: per module and step, the numbers that say where a multi-module run put its
learning signal (issue 57, item 3). Every number is read from what the trainer stored; nothing is
recomputed from texts except the change (`webapp.runs.credit.change`).

Definitions, per module m and step s (the newest attempt that stored s):

- **share** of the advantage mass: ``sum |A|`` over the trained members of the step's groups whose
  call is one of m's (``GroupMember`` rows, padding copies left out: MMGRPO's PadGroups ``fill``
  copies no new sample), divided by the same sum over every module. The shares add up to 1 over the
  modules at a step where any advantage is nonzero; at a step whose advantages are all 0 (every group
  flat) they are undefined (None). The advantages are the trainer's own: GRPO/GDPO within the groups
  (MHGPO Eq. 5, MMGRPO Algorithm 2).
- **variance**: the mean, over m's groups at the step, of the group's reward variance
  (``Group.reward_var``, the unbiased variance of the rewards the group normalized,
  ``trainer.algorithms.metrics.group_reward_variance``); 0 means no signal.
- **correlation**: Pearson's r, over the step's rollouts, between m's local reward in the rollout and
  the rollout's final reward (``Rollout.total_reward``). The local reward of a call is what m was
  trained on: under MHGPO the shared reward propagated backward to it (Eq. 4, ``propagated_reward``)
  plus its agent-specific reward (Eq. 5's ``R_k,i = R^shared_k,i + R^spe_k``, ``specific_reward``);
  under MMGRPO (and GRPO) every module is trained on the final reward itself (no propagated reward is
  stored), so r is 1 by construction, or undefined when the final rewards are all equal. r is None
  (shown as "—") where either side is constant or fewer than two pairs exist. A call shared by several
  MHGPO forks is stored under each of them, so each rollout contributes one pair per call of m.

Over a run the page reads a window of the newest `WINDOW_STEPS` steps that hold rollouts, in a fixed
number of aggregate queries (no call is loaded into Python); the per-module summary is the mean of
the per-step values over the window's steps where they are defined.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Avg, Count, ExpressionWrapper, F, FloatField, Max, Min, Q, Sum
from django.db.models.functions import Abs, Coalesce

from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run

WINDOW_STEPS = 200  # the run page's window: the newest stored steps; a constant number of queries over it


@dataclass
class ModuleStep:
    """The credit of one module at one step (see the module docstring for each number)."""

    module: str
    step: int
    mass: float = 0.0  # sum of |advantage| over its trained members
    members: int = 0  # trained members with an advantage stored
    share: float | None = None
    variance: float | None = None
    groups: int = 0
    correlation: float | None = None
    pairs: int = 0  # (local reward, final reward) pairs the correlation is over
    final_reward: bool = False  # no propagated reward stored: its local reward is the final reward (MMGRPO)
    correlation_note: str = ""  # why the correlation is what it is (a title on the page)


@dataclass
class ModuleSummary:
    """One module over the window: means of its per-step numbers, and its change (`change.py`)."""

    module: str
    share: float | None
    variance: float | None
    correlation: float | None
    steps: int  # window steps where the module has credit numbers
    final_reward: bool
    correlation_note: str
    change: object = None  # webapp.runs.credit.change.ModuleChange, filled by the caller


@dataclass
class StepCredit:
    """Per-step, per-module credit over a window of steps."""

    steps: list[int]
    modules: list[str]
    cells: dict[tuple[str, int], ModuleStep] = field(default_factory=dict)
    advantages_stored: bool = False

    def of(self, module: str, step: int) -> ModuleStep | None:
        return self.cells.get((module, step))

    def summary(self) -> list[ModuleSummary]:
        rows = []
        for module in self.modules:
            cells = [c for s in self.steps if (c := self.cells.get((module, s))) is not None]
            final = bool(cells) and all(c.final_reward for c in cells)
            rows.append(ModuleSummary(
                module=module, share=_mean(c.share for c in cells), variance=_mean(c.variance for c in cells),
                correlation=_mean(c.correlation for c in cells), steps=len(cells), final_reward=final,
                correlation_note=_summary_note(cells, final)))
        return rows


def _mean(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _summary_note(cells: list[ModuleStep], final: bool) -> str:
    if final:
        return ("Trained on the final reward itself (MMGRPO/GRPO: no propagated reward stored), so the "
                "correlation is 1 wherever the final rewards differ.")
    undefined = sum(1 for c in cells if c.correlation is None)
    if cells and undefined == len(cells):
        return "Undefined at every step: its local reward or the final reward was constant (or fewer than two rollouts)."
    if undefined:
        return f"Mean over the steps where it is defined; undefined at {undefined} step(s) (a constant side)."
    return "Pearson's r between its local reward and the final reward, averaged over steps."


def window_start(run: Run, *, steps: int | None = None) -> int:
    """The oldest step of the window: the `steps`-th (default `WINDOW_STEPS`) newest step that holds
    rollouts (groups come with them; a run that stored no groups is bounded all the same), 0 when fewer
    do (1 query)."""
    steps = steps or WINDOW_STEPS
    older = (Rollout.objects.filter(run=run).values_list("step", flat=True).distinct()
             .order_by("-step")[steps - 1:steps])
    found = list(older)
    return found[0] if found else 0


def step_credit(run: Run, *, first: int, last: int, attempt: int | None = None) -> StepCredit:
    """The credit of every module at every step in [first, last] (each step's newest attempt, or
    `attempt` when given): three aggregate queries, whatever the number of calls."""
    where = Q(step__gte=first, step__lte=last) & (Q(attempt=attempt) if attempt is not None else Q())
    groups = list(Group.objects.filter(where, run=run).values("attempt", "step", "module")
                  .annotate(variance=Avg("reward_var"), n=Count("id")).order_by())
    newest: dict[int, int] = {}
    for row in groups:
        newest[row["step"]] = max(newest.get(row["step"], 0), row["attempt"])

    member_where = Q(group__step__gte=first, group__step__lte=last, group__run=run, padded=False)
    if attempt is not None:
        member_where &= Q(group__attempt=attempt)
    masses = list(GroupMember.objects.filter(member_where)
                  .values("group__attempt", "group__step", "call__module")
                  .annotate(mass=Sum(Abs("advantage")), members=Count("advantage")).order_by())

    local = Coalesce(F("propagated_reward"), F("rollout__total_reward")) + F("specific_reward")
    call_where = Q(rollout__run=run, rollout__step__gte=first, rollout__step__lte=last,
                   rollout__total_reward__isnull=False)
    if attempt is not None:
        call_where &= Q(rollout__attempt=attempt)
    moments = list(
        ModuleCall.objects.filter(call_where)
        .annotate(x=_float(local), y=_float(F("rollout__total_reward")))
        .filter(x__isnull=False)
        .values("rollout__attempt", "rollout__step", "module")
        .annotate(n=Count("id"), propagated=Count("propagated_reward"), sx=Sum("x"), sy=Sum("y"),
                  sxx=Sum(_float(F("x") * F("x"))), syy=Sum(_float(F("y") * F("y"))),
                  sxy=Sum(_float(F("x") * F("y"))), x_low=Min("x"), x_high=Max("x"), y_low=Min("y"), y_high=Max("y"))
        .order_by())

    # Steps stored by calls but no groups (a run that stored no advantages) still have correlations.
    by_calls: dict[int, int] = {}
    for row in moments:
        by_calls[row["rollout__step"]] = max(by_calls.get(row["rollout__step"], 0), row["rollout__attempt"])
    for step, newest_attempt in by_calls.items():
        newest.setdefault(step, newest_attempt)

    credit = StepCredit(steps=sorted(newest), modules=[])
    modules: dict[str, None] = {}

    def cell(module: str, step: int) -> ModuleStep:
        modules.setdefault(module, None)
        found = credit.cells.get((module, step))
        if found is None:
            found = credit.cells[(module, step)] = ModuleStep(module=module, step=step)
        return found

    for row in groups:
        if row["attempt"] == newest[row["step"]]:
            c = cell(row["module"], row["step"])
            c.variance, c.groups = row["variance"], row["n"]
    totals: dict[int, float] = defaultdict(float)
    for row in masses:
        step = row["group__step"]
        if row["group__attempt"] != newest.get(step) or not row["members"]:
            continue
        c = cell(row["call__module"], step)
        c.mass, c.members = float(row["mass"] or 0.0), row["members"]
        totals[step] += c.mass
        credit.advantages_stored = True
    for c in credit.cells.values():
        total = totals.get(c.step, 0.0)
        c.share = c.mass / total if total > 0 else None
    for row in moments:
        step = row["rollout__step"]
        if row["rollout__attempt"] != newest[step]:
            continue
        _correlate(cell(row["module"], step), row)
    credit.modules = sorted(modules)
    return credit


def _float(expression):
    return ExpressionWrapper(expression, output_field=FloatField())


def _correlate(c: ModuleStep, row: dict) -> None:
    """Pearson's r from the aggregate moments; None where a side is constant (min = max) or n < 2."""
    n = row["n"]
    c.pairs = n
    c.final_reward = row["propagated"] == 0
    if n < 2:
        c.correlation_note = "Fewer than two rollouts at this step."
        return
    if row["x_low"] == row["x_high"] or row["y_low"] == row["y_high"]:
        side = "final reward" if row["y_low"] == row["y_high"] else "local reward"
        c.correlation_note = f"Undefined: the {side} is the same in every rollout of this step."
        return
    if c.final_reward:  # its local reward is the final reward: r is 1 exactly, not 1 up to rounding
        c.correlation = 1.0
        c.correlation_note = "Trained on the final reward itself (no propagated reward stored): r = 1."
        return
    cov = row["sxy"] - row["sx"] * row["sy"] / n
    var_x = row["sxx"] - row["sx"] ** 2 / n
    var_y = row["syy"] - row["sy"] ** 2 / n
    if var_x <= 0 or var_y <= 0:  # min < max guarantees a spread; rounding can still cancel it
        c.correlation_note = "Undefined: a side's spread is below rounding."
        return
    c.correlation = max(-1.0, min(1.0, cov / math.sqrt(var_x * var_y)))
    c.correlation_note = (f"Pearson's r over {n} rollouts between its local reward (propagated + "
                          f"agent-specific, MHGPO Eq. 4-5) and the final reward.")
