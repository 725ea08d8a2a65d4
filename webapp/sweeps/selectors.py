"""Reading sweeps: who may see one (the members of its project, as for runs; staff every one)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from webapp.projects.selectors import readable_project_ids
from webapp.runs.charts.sources import source_id
from webapp.runs.selectors import run_list_for_user
from webapp.sweeps.models import Sweep


def sweep_list_for_user(user) -> QuerySet[Sweep]:
    if not user.is_authenticated:
        return Sweep.objects.none()
    sweeps = Sweep.objects.select_related("task", "owner", "project")
    projects = readable_project_ids(user)
    return sweeps if projects is None else sweeps.filter(project_id__in=projects)


def sweep_get_for_user(user, sweep_id) -> Sweep:
    """The one scoped getter: a sweep the user may not read is as absent as a missing one (404)."""
    sweep = sweep_list_for_user(user).filter(pk=sweep_id).first()
    if sweep is None:
        raise Http404("No such sweep.")
    return sweep


def sweeps_of(runs) -> list[Sweep]:
    """The sweeps these runs are trials of (the caller could see the runs, so it may see them)."""
    runs = list(runs)
    return list(Sweep.objects.filter(trials__members__run__in=runs, project_id__in={r.project_id for r in runs})
                .distinct().select_related("task"))


def runs_sweeps_context(runs) -> dict:
    """What the run page and the compare page show of their sweeps: a link to each."""
    return {"sweeps": sweeps_of(runs)}


def sweep_runs_for_user(user, sweep_id: str) -> list:
    """The compare page's `sweep` source (webapp/runs/charts/sources.py): the sweep's runs the user may read,
    trial by trial and seed by seed, so its configurations show as seed groups with their bands. Http404
    for a sweep they may not see; ValueError for a value that is no id."""
    sweep = sweep_get_for_user(user, source_id(sweep_id, "a sweep"))
    return list(run_list_for_user(user).filter(sweep_member__trial__sweep=sweep)
                .select_related(None).prefetch_related("task__program").defer("prompt_optimization")
                .order_by("sweep_member__trial__number", "sweep_member__seed"))
