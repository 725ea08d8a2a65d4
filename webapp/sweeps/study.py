"""Optuna decides; Cohort's rows remember. The study of a sweep is rebuilt from its Trial rows each time
a decision is needed (the next configuration, whether to prune), with Optuna's real samplers and
pruners, so no process holds state the database does not (docs/explanation/architecture.md "A sweep is a study").

Reproducible: the sampler of trial n is seeded from (the sweep's seed, n), so the same sweep seed and
the same history propose the same configurations, whichever process asks.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from webapp.sweeps.models import Sweep, Trial
from webapp.sweeps.objective import over_seeds
from webapp.sweeps.space import Dimension, dimension

optuna.logging.set_verbosity(logging.WARNING)  # a study is rebuilt per decision: no "trial created" lines

TRIAL_STATES = {Trial.State.RUNNING: TrialState.RUNNING, Trial.State.COMPLETE: TrialState.COMPLETE,
                Trial.State.PRUNED: TrialState.PRUNED, Trial.State.FAILED: TrialState.FAIL}
DEFAULT_OPTIONS = {"startup_trials": 5, "warmup_steps": 0, "reduction_factor": 3, "min_resource": 1,
                   "grid_points": 3}


def dimensions_of(sweep: Sweep) -> list[Dimension]:
    # By name: PostgreSQL's jsonb keeps no key order, and a sampler draws the parameters in this order
    # (the same seed must propose the same configurations on any database).
    return [dimension(name, entry) for name, entry in sorted(sweep.space.items())]


def option(sweep: Sweep, name: str) -> int:
    return int((sweep.options or {}).get(name, DEFAULT_OPTIONS[name]))


def distributions(dimensions: Sequence[Dimension]) -> dict[str, BaseDistribution]:
    """Each swept field as Optuna's distribution: values are categorical, ranges int or float."""
    found: dict[str, BaseDistribution] = {}
    for d in dimensions:
        if d.kind == "values":
            found[d.name] = CategoricalDistribution(list(d.values))
        elif d.kind == "int":
            found[d.name] = IntDistribution(int(d.low), int(d.high), log=d.log)
        else:
            found[d.name] = FloatDistribution(d.low, d.high, log=d.log)
    return found


def _sampler(sweep: Sweep, dimensions: Sequence[Dimension], number: int) -> optuna.samplers.BaseSampler:
    seed = (sweep.sampler_seed * 1_000_003 + number) % 2**32  # one seed per trial: see the module docstring
    if sweep.method == Sweep.Method.GRID:
        # The sweep's own seed: it shuffles the grid, and trial n takes grid point n of that order.
        points = option(sweep, "grid_points")
        return optuna.samplers.GridSampler({d.name: d.grid(points) for d in dimensions}, seed=sweep.sampler_seed)
    if sweep.method == Sweep.Method.RANDOM:
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=option(sweep, "startup_trials"))


def _pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    if sweep.pruner == Sweep.Pruner.MEDIAN:
        return optuna.pruners.MedianPruner(n_startup_trials=option(sweep, "startup_trials"),
                                           n_warmup_steps=option(sweep, "warmup_steps"))
    if sweep.pruner == Sweep.Pruner.HYPERBAND:
        steps = int((sweep.config or {}).get("steps", 1))
        return optuna.pruners.HyperbandPruner(min_resource=option(sweep, "min_resource"), max_resource=max(steps, 1),
                                              reduction_factor=option(sweep, "reduction_factor"))
    return optuna.pruners.NopPruner()


def frozen_trial(trial: Trial, dists: dict[str, BaseDistribution],
                 seeds: set[str] | None = None) -> optuna.trial.FrozenTrial:
    """A Trial row as Optuna's FrozenTrial (a parameter outside today's space is left out). With
    `seeds`, its intermediate values are the mean over those seeds' runs only."""
    params = {k: v for k, v in trial.params.items() if k in dists and _within(dists[k], v)}
    intermediate = (over_seeds(trial.seed_series or {}, seeds) if seeds is not None
                    else {int(k): v for k, v in (trial.intermediate or {}).items()})
    state = TRIAL_STATES[trial.state]
    value = trial.value if state == TrialState.COMPLETE else None
    if state == TrialState.COMPLETE and (value is None or not math.isfinite(value)):
        state, value = TrialState.FAIL, None
    return optuna.trial.create_trial(
        state=state, value=value, params=params, distributions={k: dists[k] for k in params},
        system_attrs=dict(trial.system_attrs or {}),
        intermediate_values={int(step): float(v) for step, v in intermediate.items() if v is not None and math.isfinite(v)})


def _within(distribution: BaseDistribution, value: Any) -> bool:
    try:
        return distribution._contains(distribution.to_internal_repr(value))
    except ValueError:  # a choice the distribution does not hold
        return False


def study_of(sweep: Sweep, trials: Sequence[Trial], *, number: int | None = None,
             seeds: set[str] | None = None) -> optuna.Study:
    """The sweep's study, every trial in it with its state, in trial-number order (so Optuna's numbers
    are Cohort's); `number` seeds the sampler for proposing that trial; `seeds` restricts every trial's
    intermediate values to those seeds (see prune_verdict)."""
    dimensions = dimensions_of(sweep)
    dists = distributions(dimensions)
    study = optuna.create_study(
        study_name=f"cohort-sweep-{sweep.pk}",  # Hyperband assigns brackets by hashing it with the trial number
        direction=sweep.direction, sampler=_sampler(sweep, dimensions, len(trials) if number is None else number),
        pruner=_pruner(sweep))
    study.add_trials(frozen_trial(t, dists, seeds) for t in sorted(trials, key=lambda t: t.number))
    return study


def propose(sweep: Sweep, trials: Sequence[Trial]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(params, Optuna's system attributes) of the next configuration: trial number len(trials)."""
    dimensions = dimensions_of(sweep)
    study = study_of(sweep, trials, number=len(trials))
    asked = study.ask(distributions(dimensions))
    frozen = study._storage.get_trial(asked._trial_id)
    params = {d.name: _plain(frozen.params[d.name]) for d in dimensions}
    return params, _plain_attrs(frozen.system_attrs)


def prune_verdict(sweep: Sweep, trials: Sequence[Trial], trial: Trial) -> tuple[str | None, dict[str, Any]]:
    """(why the pruner stops `trial` now, or None; the trial's system attributes after asking, which
    Hyperband writes its rungs into).

    Like with like: the trial is judged on the seeds it has reported so far, and every other trial's
    intermediate values are its mean over those same seeds. Seeds of one configuration train one after
    another on a single worker, and a seed's first step is sampled before any update (identical across
    learning rates): comparing one seed's curve with others' means over two seeds would prune on noise."""
    if sweep.pruner == Sweep.Pruner.NONE or not trial.seed_series:
        return None, dict(trial.system_attrs or {})
    seeds = set(trial.seed_series)
    study = study_of(sweep, trials, seeds=seeds)
    if not study.trials[trial.number].intermediate_values:
        return None, dict(trial.system_attrs or {})
    frozen = study.trials[trial.number]
    pruned = study.pruner.prune(study, frozen)
    attrs = _plain_attrs(study._storage.get_trial(frozen._trial_id).system_attrs)
    if not pruned:
        return None, attrs
    return _reason(sweep, study, frozen), attrs


def _reason(sweep: Sweep, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str:
    step = trial.last_step
    values = list(trial.intermediate_values.values())
    best = (max if sweep.direction == Sweep.Direction.MAXIMIZE else min)(values)
    if sweep.pruner == Sweep.Pruner.MEDIAN:
        others = [t.intermediate_values[step] for t in study.get_trials(states=(TrialState.COMPLETE,))
                  if step in t.intermediate_values]
        median = statistics.median(others) if others else float("nan")
        side = "below" if sweep.direction == Sweep.Direction.MAXIMIZE else "above"
        return (f"Pruned by the median pruner at step {step}: its best {sweep.objective} so far, {best:.4g}, is "
                f"{side} the median {median:.4g} of {len(others)} completed trials at that step.")
    return (f"Pruned by Hyperband (successive halving, reduction factor {option(sweep, 'reduction_factor')}) at "
            f"step {step}: its {sweep.objective} {trial.intermediate_values[step]:.4g} was not in the top of its rung.")


def _plain(value: Any) -> Any:
    """A JSON-storable value (numpy scalars from a sampler become Python numbers)."""
    if hasattr(value, "item"):
        return value.item()
    return value


def _plain_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {str(k): (list(map(_plain, v)) if isinstance(v, list | tuple) else
                     {kk: list(vv) if isinstance(vv, tuple) else vv for kk, vv in v.items()} if isinstance(v, dict)
                     else _plain(v)) for k, v in attrs.items()}
