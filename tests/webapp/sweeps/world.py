"""Sweeps built from rows, no training and no Optuna: what the sweep page reads (Sweep, Trial, TrialRun
and their Run rows), for the view, consumer and browser tests and the page's benchmark."""

from __future__ import annotations

import datetime as dt
import math

from django.utils import timezone

from tests.webapp.runs.factories import make_task
from webapp.projects.selectors import personal_project
from webapp.runs.models import Run
from webapp.sweeps.models import Sweep, Trial, TrialRun

SPACE = {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "estimator": {"values": ["grpo", "gdpo"]},
         "lora_r": {"values": [8, 16, 32]}}
RUN_STATE = {Trial.State.RUNNING: Run.State.RUNNING, Trial.State.COMPLETE: Run.State.SUCCEEDED,
             Trial.State.PRUNED: Run.State.PRUNED, Trial.State.FAILED: Run.State.FAILED}


def make_sweep(owner, *, project=None, task=None, config=None, space=None, **fields) -> Sweep:
    """A running TPE sweep of `task` (the toy factory task by default) over SPACE, 3 seeds."""
    values = {"name": "lr sweep", "method": Sweep.Method.TPE, "seeds": 3, "n_trials": 12, "parallel": 2,
              "objective": "reward/mean", **fields}
    return Sweep.objects.create(owner=owner, project=project or personal_project(owner), task=task or make_task(),
                                config=config if config is not None else {"steps": 4, "seed": 0},
                                space=space or SPACE, **values)


def params_of(number: int) -> dict:
    """Distinct parameters for trial `number` (every swept field varies)."""
    return {"learning_rate": float(f"{1e-5 * 10 ** ((number % 7) / 3):.6g}"),
            "estimator": ("grpo", "gdpo")[number % 2], "lora_r": (8, 16, 32)[number % 3]}


def value_of(params: dict) -> float:
    """A made-up objective that depends mostly on the learning rate (so importance ranks it first)."""
    return round(0.2 + 0.1 * math.log10(params.get("learning_rate", 1e-5) / 1e-5)
                 + (0.02 if params.get("estimator") == "gdpo" else 0) + 0.001 * params.get("lora_r", 8), 6)


def add_trial(sweep: Sweep, number: int, *, params=None, state=Trial.State.COMPLETE, value=None, steps: int = 4,
              seed_values=None, reason: str = "", finished_at=None) -> Trial:
    """Trial `number` with one Run per seed (its state follows the trial's; a complete trial's runs are
    succeeded, and each seed's objective is its last value in `seed_series`, as the sweep stores it)."""
    params = params or params_of(number)
    if value is None and state == Trial.State.COMPLETE:
        value = value_of(params)
    seeds = sweep.seed_values
    per_seed = seed_values or ([value + d for d in _spread(len(seeds))] if value is not None else [None] * len(seeds))
    if value is not None and seed_values is None:
        value = sum(per_seed) / len(per_seed)
    done = state != Trial.State.RUNNING
    trial = Trial.objects.create(
        sweep=sweep, number=number, params=params, state=state, value=value, reason=reason,
        intermediate={str(s): (value or 0.0) * s / steps for s in range(1, steps + 1)},
        seed_series={str(seed): {str(steps): v} for seed, v in zip(seeds, per_seed, strict=True) if v is not None},
        finished_at=(finished_at or timezone.now()) if done else None)
    for seed, seed_value in zip(seeds, per_seed, strict=True):
        run = Run.objects.create(owner=sweep.owner, task=sweep.task, project=sweep.project, state=RUN_STATE[state],
                                 config={**sweep.config, **params, "seed": seed}, total_steps=steps,
                                 current_step=steps, last_reward=seed_value,
                                 name=f"{sweep} · trial {number} · seed {seed}", tags=["sweep", f"sweep-{sweep.pk}"])
        TrialRun.objects.create(trial=trial, run=run, seed=seed)
    return trial


def _spread(n: int) -> list[float]:
    return [0.01 * (i - (n - 1) / 2) for i in range(n)]


def bulk_sweep(owner, *, trials: int = 200, seeds: int = 3, steps: int = 100, **fields) -> Sweep:
    """A finished sweep of `trials` complete trials x `seeds` runs with `steps` intermediate values each,
    made with bulk inserts (the page's benchmark and its query-count test)."""
    sweep = make_sweep(owner, seeds=seeds, n_trials=trials, state=Sweep.State.FINISHED, finished_at=timezone.now(),
                       **fields)
    now = timezone.now()
    rows = []
    for number in range(trials):
        params = params_of(number)
        value = value_of(params) + 0.001 * (number % 5)
        rows.append(Trial(sweep=sweep, number=number, params=params, state=Trial.State.COMPLETE, value=value,
                          intermediate={str(s): value * s / steps for s in range(1, steps + 1)},
                          seed_series={str(i): {str(s): (value + d) * s / steps for s in range(1, steps + 1)}
                                       for i, d in enumerate(_spread(seeds))},
                          finished_at=now - dt.timedelta(seconds=trials - number)))
    made = Trial.objects.bulk_create(rows)
    runs = Run.objects.bulk_create([
        Run(owner=owner, task=sweep.task, project=sweep.project, state=Run.State.SUCCEEDED, config=sweep.config,
            total_steps=steps, current_step=steps, last_reward=trial.value + d, name=f"trial {trial.number} seed {i}")
        for trial in made for i, d in enumerate(_spread(seeds))])
    if runs[0].pk is None:  # a backend that does not return ids from bulk inserts
        runs = list(Run.objects.filter(owner=owner).order_by("pk"))[-len(runs):]
    TrialRun.objects.bulk_create([TrialRun(trial=made[i // seeds], run=run, seed=i % seeds) for i, run in enumerate(runs)])
    return sweep
