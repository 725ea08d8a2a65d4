"""The Studies page's rows: the sweeps and experiments a user may read, newest first, each with its
state and counts. Both are studies over many runs, and a researcher looks for "that search I started
on Tuesday" without remembering which kind it was. The sweeps app sits above the experiments app
(it reads experiments; they never read sweeps), so the page lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, IntegerField, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse

from webapp.experiments.selectors import experiment_list_for_user
from webapp.runs.models import Run
from webapp.sweeps.models import Trial, TrialRun
from webapp.sweeps.selectors import sweep_list_for_user

STUDIES_SHOWN = 200  # of each kind; the page says when there are more


@dataclass(frozen=True)
class Study:
    kind: str  # "sweep" | "experiment"
    pk: int
    name: str
    url: str
    state: str
    task: str
    project: str
    owner: str
    created_at: datetime
    counts: str  # e.g. "7 of 20 trials (5 complete) · 21 runs"


def _count(queryset, outer: str):
    """A correlated COUNT (one per row of the outer query, with no join that multiplies its rows)."""
    return Coalesce(Subquery(queryset.filter(**{outer: OuterRef("pk")}).order_by().values(outer)
                             .annotate(n=Count("pk")).values("n"), output_field=IntegerField()), 0)


def studies_for_user(user) -> tuple[list[Study], bool]:
    """(the newest sweeps and experiments the user reads, merged newest first; whether some were left out)."""
    sweeps = list(sweep_list_for_user(user).annotate(
        trial_count=_count(Trial.objects.all(), "sweep"),
        complete_count=_count(Trial.objects.filter(state=Trial.State.COMPLETE), "sweep"),
        run_count=_count(TrialRun.objects.all(), "trial__sweep"),
    ).order_by("-created_at", "-pk")[:STUDIES_SHOWN + 1])
    experiments = list(experiment_list_for_user(user).annotate(
        run_count=Count("members"),
        active_count=Count("members", filter=Q(members__run__state__in=Run.ACTIVE_STATES)),
        failed_count=Count("members", filter=Q(members__run__state__in=[Run.State.FAILED, Run.State.CANCELLED])),
    ).order_by("-created_at", "-pk")[:STUDIES_SHOWN + 1])
    more = len(sweeps) > STUDIES_SHOWN or len(experiments) > STUDIES_SHOWN
    rows = [_sweep_row(s) for s in sweeps[:STUDIES_SHOWN]] + [_experiment_row(e) for e in experiments[:STUDIES_SHOWN]]
    rows.sort(key=lambda r: r.created_at, reverse=True)
    return rows, more


def _sweep_row(sweep) -> Study:
    counts = (f"{sweep.trial_count} of {sweep.n_trials} trials ({sweep.complete_count} complete) · "
              f"{sweep.run_count} run{'s' if sweep.run_count != 1 else ''}")
    return Study("sweep", sweep.pk, str(sweep), reverse("sweeps:detail", args=[sweep.pk]), sweep.state,
                 sweep.task.name, sweep.project.name, sweep.owner.get_username(), sweep.created_at, counts)


def _experiment_row(experiment) -> Study:
    if experiment.active_count:
        state = "running"
    elif experiment.failed_count:
        state = "finished, with failures"
    else:
        state = "finished"
    counts = f"{experiment.seeds} seed{'s' if experiment.seeds != 1 else ''} · {experiment.run_count} runs"
    if experiment.active_count:
        counts += f" ({experiment.active_count} active)"
    return Study("experiment", experiment.pk, str(experiment), reverse("experiments:detail", args=[experiment.pk]),
                 state, experiment.task.name, experiment.project.name, experiment.owner.get_username(),
                 experiment.created_at, counts)
