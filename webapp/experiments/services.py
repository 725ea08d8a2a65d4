"""Launching the MMGRPO paper's Table 1 for a task: its four arms, N seeds, through the fair queue.

The four arms are measured by two kinds of run per seed, each evaluated before training (step 0, on
the dev set) and after its last step, by the trainer's one evaluation code:

- unadapted program: the `weights` run at step 0 (nothing trained or optimized yet);
- prompt-optimized (PO): the `both` run at step 0 (after its phase 1, before its weights train);
- MMGRPO: the `weights` run after its last step;
- BetterTogether (PO, then MMGRPO): the `both` run after its last step.

Two runs per seed measure what four would, with half the sampling and training: the unadapted and PO
programs are exactly the starting points of the two training runs.
"""

from __future__ import annotations

import dataclasses

from django.db import transaction

from trainer.config import RunConfig
from trainer.programs import PROGRAMS, program_info
from webapp.experiments.models import Experiment, ExperimentRun
from webapp.projects.services import personal_project_ensure
from webapp.runs.launch.check import Launch, LaunchRefused, launch_check
from webapp.runs.models import Run, Task
from webapp.runs.services import run_create

MAX_SEEDS = 10
DEFAULT_PROMPT_OPTIMIZER = "mipro_light"


class ExperimentRefused(Exception):
    """The experiment cannot be launched (the message says why); nothing was queued."""


def experiment_offered(task: Task) -> bool:
    """Whether the launch form offers an experiment for `task`: its program must be a DSPy program (the
    arms compare prompt optimization with weight training)."""
    return task.program.name in PROGRAMS and bool(program_info(task.program.name).get("optimizes_prompts"))


def experiment_configs(config: RunConfig, seeds: int) -> list[tuple[str, int, RunConfig]]:
    """(kind, seed, config) of every run: seeds from the config's seed up, each arm's settings."""
    optimizer = config.prompt_optimizer if config.prompt_optimizer != "none" else DEFAULT_PROMPT_OPTIMIZER
    runs = []
    for seed in range(config.seed, config.seed + seeds):
        common = {"seed": seed, "eval_before": True, "eval_every": config.eval_every or config.steps}
        runs.append((ExperimentRun.Kind.WEIGHTS, seed, dataclasses.replace(config, prompt_optimizer="none", **common)))
        runs.append((ExperimentRun.Kind.BOTH, seed, dataclasses.replace(config, prompt_optimizer=optimizer, **common)))
    return runs


def experiment_create(base: Launch, *, seeds: int, name: str = "") -> Experiment:
    """Queues the experiment's 2 x `seeds` runs of a checked launch in its project (None: the owner's
    personal project), each through the launch check, all or none (ExperimentRefused with the reason)."""
    owner, task, config = base.owner, base.task, base.config
    if not 1 <= seeds <= MAX_SEEDS:
        raise ExperimentRefused(f"Choose between 1 and {MAX_SEEDS} seeds.")
    if not program_info(config.program).get("optimizes_prompts"):
        raise ExperimentRefused(f"Program {config.program!r} is not a DSPy program: an experiment compares "
                                "prompt optimization with weight training, which needs one.")
    planned = experiment_configs(config, seeds)
    with transaction.atomic():
        project = base.project or personal_project_ensure(owner)
        experiment = Experiment.objects.create(owner=owner, project=project, task=task, name=name, seeds=seeds,
                                               config=config.to_dict())
        for index, (kind, seed, run_config) in enumerate(planned, start=1):
            try:  # counts the runs queued just before this one
                launch = launch_check(owner, task=task, program=config.program, values=run_config.to_dict(),
                                      project=project)
            except LaunchRefused as refused:
                first = next(iter(refused.errors.values()))[0]
                raise ExperimentRefused(f"run {index} of {len(planned)} ({kind}, seed {seed}): {first}") from None
            run = run_create(launch, name=f"{experiment} · {kind} · seed {seed}", tags=["experiment", f"exp-{experiment.pk}"])
            ExperimentRun.objects.create(experiment=experiment, run=run, kind=kind, seed=seed)
    return experiment


def experiment_runs(experiment: Experiment) -> list[Run]:
    return [member.run for member in experiment.members.select_related("run")]
