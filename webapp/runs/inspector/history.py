"""Read side of the per-example history: one training example's rollouts across every step that
drew it (the newest attempt of each step, as the inspectors show it), with the group variance and
similarity of its module groups there.

Three queries whatever the number of visits, rollouts and groups (the tests assert it at two
sizes): per-visit aggregates in the database, then the visits' rollout rewards and their
per-module group statistics, each in one query. A long run draws an example about once an
epoch; at most `VISITS_CAP` visits are read per page, the most recent first, and `before=<step>`
pages to older ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Avg, Count, Max, Min, OuterRef, Q, Subquery
from django.http import Http404

from webapp.runs.models import Group, Rollout, Run, StepMetric

VISITS_CAP = 500


@dataclass
class ModuleStats:
    """A module's groups of this example at one visit: their mean variance and similarity."""

    groups: int
    variance: float | None
    similarity: float | None
    zero_var: int


@dataclass
class Visit:
    """One step that drew the example: its rollouts' rewards and its module groups."""

    step: int
    attempt: int
    rollouts: int
    failures: int
    mean: float | None
    low: float | None
    high: float | None
    rewards: list[tuple[int, float]] = field(default_factory=list)  # (rollout index, total reward)
    modules: dict[str, ModuleStats] = field(default_factory=dict)


@dataclass
class History:
    example_id: str
    visits: list[Visit]  # newest step first
    modules: list[str]  # the modules with groups in any visit, in the program's order
    before: int | None  # the step this page is older than (None: the newest visits)
    older_before: int | None  # `before` of the next page of older visits; None when there are none
    limit: int

    @property
    def capped(self) -> bool:
        return self.older_before is not None

    @property
    def first_step(self) -> int:
        return self.visits[-1].step

    @property
    def last_step(self) -> int:
        return self.visits[0].step


def newest_attempt(run: Run):
    """The newest attempt that stored the outer row's step (what `inspect.step_attempt` picks)."""
    return Subquery(StepMetric.objects.filter(run=run, step=OuterRef("step")).order_by("-attempt")
                    .values("attempt")[:1])


def _module_order(run: Run, found: set[str]) -> list[str]:
    declared = [m for m in (run.task.program.modules or []) if m in found]
    return declared + sorted(found - set(declared))


def example_history(run: Run, example_id: str, *, before: int | None = None, limit: int = VISITS_CAP) -> History:
    """The visits of `example_id` in `run` (steps < `before` if given), newest first, at most
    `limit` of them; 404 when the example has no rollouts there."""
    rollouts = Rollout.objects.filter(run=run, example_id=example_id, attempt=newest_attempt(run))
    if before is not None:
        rollouts = rollouts.filter(step__lt=before)
    rows = list(
        rollouts.values("step", "attempt")
        .annotate(rollouts=Count("id"), failures=Count("id", filter=Q(failed=True)), mean=Avg("total_reward"),
                  low=Min("total_reward"), high=Max("total_reward"))
        .order_by("-step")[:limit + 1])
    if not rows:
        where = f" before step {before}" if before is not None else ""
        raise Http404(f"Example {example_id!r} has no rollouts in this run{where}.")
    more = len(rows) > limit
    rows = rows[:limit]
    visits = [Visit(r["step"], r["attempt"], r["rollouts"], r["failures"], r["mean"], r["low"], r["high"]) for r in rows]
    by_step = {v.step: v for v in visits}
    oldest, newest = visits[-1].step, visits[0].step

    for step, index, reward in (rollouts.filter(step__gte=oldest, step__lte=newest, total_reward__isnull=False)
                                .order_by("step", "index").values_list("step", "index", "total_reward")):
        by_step[step].rewards.append((index, reward))

    groups = (Group.objects.filter(run=run, example_id=example_id, attempt=newest_attempt(run),
                                   step__gte=oldest, step__lte=newest)
              .values("step", "module")
              .annotate(groups=Count("id"), variance=Avg("reward_var"), similarity=Avg("similarity"),
                        zero_var=Count("id", filter=Q(reward_var=0) | Q(reward_var__isnull=True))))
    found = set()
    for g in groups:
        visit = by_step.get(g["step"])
        if visit is not None:  # a step whose groups stored this example but whose rollouts did not
            visit.modules[g["module"]] = ModuleStats(g["groups"], g["variance"], g["similarity"], g["zero_var"])
            found.add(g["module"])
    return History(example_id, visits, _module_order(run, found), before, oldest if more else None, limit)


def chart_payload(history: History, inspect_url) -> dict:
    """What static/js/example-history.js draws, oldest visit first; `inspect_url(visit)` is the
    trajectory inspector of that visit."""
    visits = list(reversed(history.visits))
    return {
        "example": history.example_id,
        "steps": [v.step for v in visits],
        "mean": [v.mean for v in visits],
        "low": [v.low for v in visits],
        "high": [v.high for v in visits],
        "rollouts": [v.rollouts for v in visits],
        "failures": [v.failures for v in visits],
        "rewards": [[r for _, r in v.rewards] for v in visits],
        "indices": [[i for i, _ in v.rewards] for v in visits],
        "urls": [inspect_url(v) for v in visits],
        "modules": [
            {"name": m,
             "variance": [v.modules[m].variance if m in v.modules else None for v in visits],
             "similarity": [v.modules[m].similarity if m in v.modules else None for v in visits]}
            for m in history.modules
        ],
    }


def module_cells(history: History) -> list[tuple[Visit, list[ModuleStats | None]]]:
    """(visit, [its stats per module of `history.modules`, None where it formed no group]) per visit."""
    return [(v, [v.modules.get(m) for m in history.modules]) for v in history.visits]

