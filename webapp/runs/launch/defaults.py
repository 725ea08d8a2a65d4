"""What a new run of a task starts from, for the launch form and `manage.py launch_run`.

Layers, later ones winning: RunConfig's defaults, the program's suggested settings (e.g. the toy
task's small batch that learns on a CPU), the settings the program suggests for a chosen model (the
real SmolLM2 on `toy_format`), the task's rewards, then a paper preset if one is chosen.
The result is a plain dict of RunConfig fields; validation is RunConfig's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.config import BUILTIN_MODELS, PRESETS, RunConfig, preset_values
from trainer.programs import PROGRAMS, program_info
from webapp.runs.models import Task


def config_defaults(task: Task, *, program_name: str | None = None, preset: str | None = None,
                    model: str | None = None) -> dict[str, Any]:
    """The RunConfig fields a new run of `task` starts from (ValueError for an unknown preset, or a
    model the program suggests no settings for)."""
    program_name = program_name or task.program.name
    values = {f.name: _default(f) for f in dataclasses.fields(RunConfig)}
    if program_name in PROGRAMS:  # an unavailable plugin suggests nothing; the form says why
        values.update(program_info(program_name)["suggested_config"])
    if model:
        suggestions = model_suggestions(program_name)
        if model not in suggestions:
            raise ValueError(f"The {program_name} task has no suggested settings for model {model!r}.")
        values.update({"model": model, **suggestions[model]})
    values["program"] = program_name
    if task.rewards:
        values["rewards"] = [dict(r) for r in task.rewards]
    if preset:
        values.update(preset_values(preset))
    return values


def model_suggestions(program_name: str) -> dict[str, dict[str, Any]]:
    """Model id -> the settings the program suggests for it (none for an unavailable plugin)."""
    return program_info(program_name)["model_suggestions"] if program_name in PROGRAMS else {}


def model_suggestion_choices(task: Task) -> list[tuple[str, str]]:
    """(model id, what it is) of the models `task`'s program suggests settings for."""
    return [(model, BUILTIN_MODELS.get(model, model)) for model in model_suggestions(task.program.name)]


def preset_choices() -> list[tuple[str, str]]:
    return [(name, values["_title"]) for name, values in PRESETS.items()]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    value = f.default_factory()
    # Rewards default to RewardSpec objects; the form and the JSON column want plain dicts.
    return [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value] if isinstance(value, list) else value
