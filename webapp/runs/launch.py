"""What a new run of a task starts from, for the launch form and `manage.py launch_run`.

Layers, later ones winning: RunConfig's defaults, the program's suggested settings (e.g. the toy
task's small batch that learns on a CPU), the task's rewards, then a paper preset if one is chosen.
The result is a plain dict of RunConfig fields; validation is RunConfig's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.config import PRESETS, RunConfig, preset_values
from trainer.programs import PROGRAMS, program_info
from webapp.runs.models import Task


def config_defaults(task: Task, *, program_name: str | None = None, preset: str | None = None) -> dict[str, Any]:
    """The RunConfig fields a new run of `task` starts from (ValueError for an unknown preset)."""
    program_name = program_name or task.program.name
    values = {f.name: _default(f) for f in dataclasses.fields(RunConfig)}
    if program_name in PROGRAMS:  # an unavailable plugin suggests nothing; the form says why
        values.update(program_info(program_name)["suggested_config"])
    values["program"] = program_name
    if task.rewards:
        values["rewards"] = [dict(r) for r in task.rewards]
    if preset:
        values.update(preset_values(preset))
    return values


def preset_choices() -> list[tuple[str, str]]:
    return [(name, values["_title"]) for name, values in PRESETS.items()]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    value = f.default_factory()
    # Rewards default to RewardSpec objects; the form and the JSON column want plain dicts.
    return [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value] if isinstance(value, list) else value
