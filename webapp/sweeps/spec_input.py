"""A sweep's settings as the API's JSON and `launch_run --sweep`'s TOML write them, into a SweepSpec:

    {"space": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": true}, "group_size": [4, 8]},
     "method": "tpe", "seeds": 2, "n_trials": 8, "parallel": 2, "objective": "", "mode": "last",
     "direction": "maximize", "pruner": "median", "sampler_seed": 0, "options": {"startup_trials": 2}}

Only the shape is checked here, and what would otherwise reach the database or Optuna as a crash (a
number too large for a column, a seed Optuna refuses, an option that is not a number); what the
values mean is `sweep_plan`'s to judge. Errors are keyed as SweepRefused keys them (`sweep_<setting>`,
a swept field by its RunConfig name, None for the sweep as a whole), so every entry point shows them
the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.run.events import INT32_MAX
from webapp.nul_guard import holds_nul
from webapp.sweeps.plan import SweepRefused, SweepSpec
from webapp.sweeps.space import dimension, field_kind

SPEC_KEYS = tuple(f.name for f in dataclasses.fields(SweepSpec))


def spec_from_mapping(settings: Any) -> SweepSpec:
    """The SweepSpec of a JSON or TOML table; SweepRefused for a shape no check further on could read."""
    if not isinstance(settings, dict):
        raise SweepRefused({None: 'The sweep\'s settings are an object, e.g. {"space": {"group_size": [4, 8]}, '
                                  '"method": "tpe", "n_trials": 8}.'})
    if holds_nul(settings):  # PostgreSQL text and jsonb cannot store it
        raise SweepRefused({None: "The sweep's settings hold a NUL character (\\u0000), which no setting accepts."})
    errors: dict[str | None, str] = {}
    unknown = sorted(set(settings) - set(SPEC_KEYS))
    if unknown:
        errors[None] = f"Unknown sweep setting(s) {', '.join(map(repr, unknown))}; a sweep takes {', '.join(SPEC_KEYS)}."
    options = settings.get("options", {})
    if not isinstance(options, dict) or any(isinstance(v, bool) or not isinstance(v, int) for v in options.values()):
        errors["sweep_options"] = 'The options are an object of whole numbers, e.g. {"startup_trials": 2}.'
    elif any(abs(v) > INT32_MAX for v in options.values()):
        errors["sweep_options"] = f"An option is at most {INT32_MAX:,}."
    seed = settings.get("sampler_seed", 0)
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed <= INT32_MAX:
        errors["sweep_sampler_seed"] = f"The sweep's seed is a whole number from 0 to {INT32_MAX:,}."
    space = settings.get("space", {})
    if isinstance(space, dict):
        errors.update(space_input_errors(space))
    if errors:
        raise SweepRefused(errors)
    given = {key: settings[key] for key in SPEC_KEYS if key in settings}
    return SweepSpec(**{**given, "space": space})  # no space: refused by sweep_plan, with what to write


def space_input_errors(space: dict[str, Any]) -> dict[str | None, str]:
    """The swept values no column can store: text with a NUL, an integer setting's values beyond the
    launch form's bound (a run's steps is a database integer), any number beyond a float's range.
    Entries that are otherwise wrong are left to `sweep_plan`, which names the reason."""
    errors: dict[str | None, str] = {}
    for name, entry in space.items():
        if holds_nul(entry) or holds_nul(name):
            errors[str(name)] = "A swept value holds a NUL character (\\u0000), which no setting accepts."
            continue
        if _holds_huge_int(entry):
            errors[str(name)] = f"A swept number is at most {INT32_MAX:,} in size."
            continue
        try:
            found = dimension(str(name), entry)
        except (ValueError, OverflowError):
            continue
        numbers = found.values if found.kind == "values" else (found.low, found.high)
        if field_kind(found.name) == "int" and any(abs(v) > INT32_MAX for v in numbers):
            errors[found.name] = f"{found.name} is at most {INT32_MAX:,}."
    return errors


def _holds_huge_int(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) > INT32_MAX
    if isinstance(value, dict):
        return any(_holds_huge_int(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_huge_int(v) for v in value)
    return False
