"""Reading experiments: who may see one, and its Table 1 (each arm's dev score per seed, their mean and
spread, IQM and 95% bootstrap CI), from the evaluations its runs stored (webapp/experiments/services.py
says which is which); and an experiment's runs as the compare page's `experiment` source."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from django.db.models import QuerySet
from django.http import Http404

from trainer.run.events import finite_or_none
from webapp.experiments.models import Experiment, ExperimentRun
from webapp.projects.selectors import readable_project_ids
from webapp.runs.charts.aggregates import seed_summary
from webapp.runs.charts.sources import source_id
from webapp.runs.models import Run, StepMetric
from webapp.runs.selectors import run_list_for_user

EVAL_PREFIX = "eval/reward/"
EVAL_KEY = EVAL_PREFIX + "mean"
# (arm, title, kind of run, which of its evaluations): before = step 0, after = its last step
ARMS = [
    ("unadapted", "Unadapted program", ExperimentRun.Kind.WEIGHTS, "before"),
    ("po", "Prompt-optimized (PO)", ExperimentRun.Kind.BOTH, "before"),
    ("mmgrpo", "MMGRPO", ExperimentRun.Kind.WEIGHTS, "after"),
    ("bettertogether", "BetterTogether (PO, then MMGRPO)", ExperimentRun.Kind.BOTH, "after"),
]


def experiment_list_for_user(user) -> QuerySet[Experiment]:
    """Experiments the user may see: those of the projects they read (as runs); staff every one."""
    if not user.is_authenticated:
        return Experiment.objects.none()
    experiments = Experiment.objects.select_related("task", "owner", "project")
    projects = readable_project_ids(user)
    return experiments if projects is None else experiments.filter(project_id__in=projects)


def experiment_get_for_user(user, experiment_id) -> Experiment:
    experiment = experiment_list_for_user(user).filter(pk=experiment_id).first()
    if experiment is None:
        raise Http404("No such experiment.")
    return experiment


def experiment_runs_for_user(user, experiment_id: str) -> list[Run]:
    """The compare page's `experiment` source (webapp/runs/charts/sources.py): the runs of that experiment
    the user may read, seed by seed (a run moved to a project they do not read is left out). Http404
    for an experiment they may not see; ValueError for a value that is no id."""
    experiment = experiment_get_for_user(user, source_id(experiment_id, "an experiment"))
    # What the compare page reads of them: settings, task and program (one Task and Program object for
    # all, prefetched; no phase-1 prompts decoded, which the page does not show).
    return list(run_list_for_user(user).filter(experiment_member__experiment=experiment)
                .select_related(None).prefetch_related("task__program").defer("prompt_optimization")
                .order_by("experiment_member__seed", "experiment_member__kind"))


def experiments_of(runs) -> list[Experiment]:
    """The experiments these runs belong to (the caller could see the runs, so it may see them)."""
    runs = list(runs)
    # Only in the runs' own projects: a run moved out of its experiment's project does not name it.
    return list(Experiment.objects.filter(members__run__in=runs, project_id__in={r.project_id for r in runs})
                .distinct().select_related("task"))


@dataclass
class Cell:
    value: float | None
    run_id: int
    state: str


@dataclass
class Row:
    arm: str
    title: str
    cells: list[Cell | None]  # one per seed, None where the experiment has no run
    mean: float | None
    spread: float | None  # the sample standard deviation over seeds (None with fewer than 2)
    n: int
    rewards: dict[str, float]  # each reward's dev mean over those seeds: what the score is made of
    summary: dict = field(default_factory=dict)  # aggregates.seed_summary: IQM and the 95% bootstrap CI


def evaluation_scores(run_ids: list[int]) -> dict[int, dict[int, dict[str, float]]]:
    """run -> step -> every stored dev score of that evaluation (the mean, and each reward's
    ``eval/reward/<name>``), the newest attempt's, as the charts show it."""
    found: dict[int, dict[int, dict[str, float]]] = {}
    rows = (StepMetric.objects.filter(run_id__in=run_ids).order_by("seq")
            .values_list("run_id", "step", "metrics"))
    for run_id, step, metrics in rows:
        scores = {k: float(v) for k, v in (metrics or {}).items() if k.startswith(EVAL_PREFIX) and finite_or_none(v) is not None}
        if EVAL_KEY in scores:
            found.setdefault(run_id, {})[step] = scores
    return found


def experiment_reward_means(experiment: Experiment) -> dict[str, dict[str, float]]:
    """arm -> reward name -> its dev mean over the seeds that have the arm's evaluation."""
    return {row.arm: row.rewards for row in experiment_table(experiment)[1]}


def experiment_table(experiment: Experiment) -> tuple[list[int], list[Row]]:
    """(seeds, one row per arm). A cell is empty until its run stored that evaluation; the "after" score
    counts only once the run evaluated its last step."""
    members = list(experiment.members.select_related("run"))
    seeds = sorted({m.seed for m in members})
    scores = evaluation_scores([m.run_id for m in members])
    by_kind_seed = {(m.kind, m.seed): m for m in members}
    rows = []
    for arm, title, kind, moment in ARMS:
        cells: list[Cell | None] = []
        parts: dict[str, list[float]] = {}
        for seed in seeds:
            member = by_kind_seed.get((kind, seed))
            if member is None:
                cells.append(None)
                continue
            step = 0 if moment == "before" else member.run.total_steps
            evaluation = scores.get(member.run_id, {}).get(step, {})
            cells.append(Cell(evaluation.get(EVAL_KEY), member.run_id, member.run.state))
            for key, value in evaluation.items():
                if key != EVAL_KEY:
                    parts.setdefault(key.removeprefix(EVAL_PREFIX), []).append(value)
        values = [c.value for c in cells if c is not None and c.value is not None]
        rows.append(Row(arm, title, cells, statistics.fmean(values) if values else None,
                        statistics.stdev(values) if len(values) > 1 else None, len(values),
                        {name: statistics.fmean(v) for name, v in sorted(parts.items())}, seed_summary(values)))
    return seeds, rows
