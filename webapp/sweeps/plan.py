"""What a sweep is asked to do (SweepSpec), and everything checked before anything is queued
(`sweep_plan`): its settings, its search space, each configuration it may reach against RunConfig and
the per-run launch limits, and its size against the owner's active and queued limits. Every refusal
names the field to show it beside (SweepRefused)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.config import ConfigError, RunConfig
from trainer.run.events import INT32_MAX
from webapp.limits.services import limits_for_user
from webapp.runs.launch.limits import limits_check_launch
from webapp.runs.models import Run
from webapp.sweeps.models import Sweep
from webapp.sweeps.space import SpaceError, config_with, grid, parse_space
from webapp.sweeps.study import DEFAULT_OPTIONS

MAX_TRIALS = 1000
MAX_SEEDS = 10
MAX_PARALLEL = 32


@dataclass
class SweepSpec:
    """What a sweep is asked to do, before it is checked (the form, the API and `launch_run --sweep`)."""

    space: dict[str, Any]
    method: str = Sweep.Method.TPE
    seeds: int = 1
    n_trials: int | None = None  # None: a grid's size, else 10
    parallel: int = 1
    objective: str = ""  # "": default_objective
    mode: str = Sweep.Mode.LAST
    direction: str = Sweep.Direction.MAXIMIZE
    pruner: str = Sweep.Pruner.NONE
    sampler_seed: int = 0
    options: dict[str, int] = field(default_factory=dict)


class SweepRefused(Exception):
    """The sweep cannot be launched; `errors` is field -> message (None: the sweep as a whole). Space
    fields are named by their RunConfig name, so the form shows each beside its field."""

    def __init__(self, errors: dict[str | None, str]):
        super().__init__("The sweep was not launched: " + "; ".join(f"{k}: {v}" if k else v for k, v in errors.items()))
        self.errors = errors


def _check_settings(spec: SweepSpec) -> dict[str | None, str]:
    errors: dict[str | None, str] = {}
    choices = {"method": Sweep.Method.values, "mode": Sweep.Mode.values, "direction": Sweep.Direction.values,
               "pruner": Sweep.Pruner.values}
    for name, allowed in choices.items():
        if getattr(spec, name) not in allowed:
            errors[f"sweep_{name}"] = f"Choose one of {', '.join(allowed)} (not {getattr(spec, name)!r})."
    bounds = {"seeds": (1, MAX_SEEDS), "parallel": (1, MAX_PARALLEL), "n_trials": (1, MAX_TRIALS)}
    for name, (low, high) in bounds.items():
        value = getattr(spec, name)
        if name == "n_trials" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            errors[f"sweep_{name}"] = f"{name} is a whole number from {low} to {high} (got {value!r})."
    options = spec.options if isinstance(spec.options, dict) else None
    if options is None:
        errors["sweep_options"] = 'The options are an object of whole numbers, e.g. {"startup_trials": 2}.'
    elif set(options) - set(DEFAULT_OPTIONS):
        errors["sweep_options"] = (f"Unknown option(s) {', '.join(sorted(map(str, set(options) - set(DEFAULT_OPTIONS))))}; "
                                   f"known: {', '.join(DEFAULT_OPTIONS)}.")
    elif bad := sorted(k for k, v in options.items() if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= INT32_MAX):
        errors["sweep_options"] = f"Options are whole numbers from 0 to {INT32_MAX:,}: not {', '.join(bad)}."
    elif options.get("grid_points", 3) < 2 or options.get("reduction_factor", 3) < 2:
        errors["sweep_options"] = "grid_points and reduction_factor are at least 2."
    if not isinstance(spec.objective, str) or len(spec.objective) > 200 or "\x00" in spec.objective:
        errors["sweep_objective"] = "The objective is a step metric's name, e.g. eval/reward/mean."
    if not isinstance(spec.sampler_seed, int) or isinstance(spec.sampler_seed, bool) or not 0 <= spec.sampler_seed <= INT32_MAX:
        errors["sweep_sampler_seed"] = f"The sweep's seed is a whole number from 0 to {INT32_MAX:,}."
    return errors


def sweep_plan(owner, config: RunConfig, spec: SweepSpec) -> tuple[list, int]:
    """(the checked dimensions, the number of trials): everything refused before anything is queued.
    SweepRefused with the reasons: bad space entries beside their fields, bad settings, a grid whose
    configurations RunConfig or the launch limits refuse, a sweep bigger than the owner's limits."""
    errors = _check_settings(spec)
    try:
        dimensions = parse_space(spec.space, config)
    except SpaceError as exc:
        errors.update(exc.errors)
        dimensions = []
    if errors:
        raise SweepRefused(errors)
    n_trials = spec.n_trials or 10
    if spec.method == Sweep.Method.GRID:
        combos = grid(dimensions, int(spec.options.get("grid_points", DEFAULT_OPTIONS["grid_points"])))
        if len(combos) > MAX_TRIALS:
            raise SweepRefused({None: f"The grid has {len(combos):,} configurations; a sweep tries at most {MAX_TRIALS}."})
        n_trials = min(spec.n_trials or len(combos), len(combos))
    else:  # each value, and each range's ends, one at a time: what a proposal may reach
        combos = [{d.name: v} for d in dimensions for v in (d.values if d.kind == "values" else (d.low, d.high))]
    for combo in combos:  # checked now, not when its turn comes: a refused sweep queues nothing
        errors.update(_point_errors(owner, config, combo))
        if errors:
            raise SweepRefused(errors)
    errors.update(_limits_errors(owner, config, n_trials * spec.seeds, min(spec.parallel, n_trials) * spec.seeds))
    if errors:
        raise SweepRefused(errors)
    return dimensions, n_trials


def _point_errors(owner, config: RunConfig, combo: dict[str, Any]) -> dict[str | None, str]:
    """Why one configuration of the space is refused: by RunConfig, or by a per-run launch limit (the
    token budget, the context length, the model allow-list), beside the swept field that causes it."""
    described = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in combo.items())
    try:
        point = config_with(config, {k: int(v) if isinstance(v, float) and isinstance(getattr(config, k), int)
                                     and v.is_integer() else v for k, v in combo.items()})
    except ConfigError as exc:
        return {exc.field if exc.field in combo else next(iter(combo)): f"The configuration {described} is refused: {exc}"}
    except ValueError as exc:
        return {next(iter(combo)): f"The configuration {described} is refused: {exc}"}
    refused = [e for e in per_run_limit_errors(owner, point) if e.field is not None]
    if not refused:
        return {}
    field = next((e.field for e in refused if e.field in combo), next(iter(combo)))
    return {field: f"The configuration {described} is over a launch limit: " + " ".join(e.message for e in refused)}


def per_run_limit_errors(owner, config: RunConfig) -> list:
    """The launch limits of one run that do not count runs (those name a field)."""
    return [e for e in limits_check_launch(owner, config) if e.field is not None]


def room_for_runs(owner) -> tuple[int, str]:
    """How many more runs the owner may queue now under the active and queued limits, and how full
    they are (staff: no limit)."""
    if owner.is_staff:
        return MAX_TRIALS * MAX_SEEDS, ""
    limits = limits_for_user(owner)
    active = Run.objects.filter(owner=owner, state__in=Run.ACTIVE_STATES).count()
    queued = Run.objects.filter(owner=owner, state=Run.State.QUEUED).count()
    return (min(limits["active_runs"] - active, limits["queued_runs"] - queued),
            f"{active} active of {limits['active_runs']}, {queued} queued of {limits['queued_runs']}")


def _limits_errors(owner, config: RunConfig, total_runs: int, at_once: int) -> dict[str | None, str]:
    """The launch limits as a whole sweep meets them: every run passes the per-run ones, and the runs
    it keeps queued at once fit the owner's active and queued limits."""
    refused = per_run_limit_errors(owner, config)
    if refused:
        return {e.field: e.message for e in refused}
    room, usage = room_for_runs(owner)
    if at_once > room:
        return {"sweep_parallel": (
            f"This sweep queues {at_once} runs at once (configurations at once x seeds); your launch limits "
            f"leave room for {max(room, 0)} now ({usage}). Lower 'at once' or the seeds. It would train "
            f"{total_runs} runs in all.")}
    return {}
