"""What the launch form's script (static/js/launch-form.js) needs from the server: which fields each
choice shows, which programs are DSPy programs, and the reward registry for the reward editor.

Nothing here decides what may be launched: every value is still posted and validated by RunConfig.
"""

from __future__ import annotations

import json
import math
from typing import Any

from trainer.config import PROGRAM_OPTIMIZES_PROMPTS, RunConfig
from trainer.programs import PROGRAMS, program_info
from trainer.rewards import list_rewards, unavailable_rewards
from webapp.runs.hooks import most_gpus_per_worker

# Settings that apply only on a worker with at least this many GPUs: the form leaves them out of view
# (posted as they are, hidden) where no worker has them.
GPUS_NEEDED = {"sampler_gpus": 2}


def shown_when(field_name: str) -> str | None:
    """The `data-shown-when` JSON of a field's wrapper (`{"strategy": ["mmgrpo"]}`), None for a field
    that is always read. Keys are form field names, or PROGRAM_OPTIMIZES_PROMPTS for the chosen
    program's own property (its `<option data-optimizes-prompts>`)."""
    condition = RunConfig.field_conditions().get(field_name)
    return json.dumps(condition) if condition else None


def fields_out_of_reach() -> set[str]:
    """The settings of GPUS_NEEDED that no worker of this lab has the GPUs for (none when no app counts
    the workers' GPUs)."""
    most = most_gpus_per_worker()
    return set() if most is None else {name for name, need in GPUS_NEEDED.items() if most < need}


def optimizes_prompts(program_name: str) -> bool:
    """Whether `program_name` is a DSPy program (prompt optimization, a saved program_state)."""
    return program_name in PROGRAMS and bool(program_info(program_name).get("optimizes_prompts"))


def program_option_attrs(program_name: str) -> dict[str, str]:
    """The program `<option>`'s attributes the conditions read, as PROGRAM_OPTIMIZES_PROMPTS names them."""
    attribute = "data-" + PROGRAM_OPTIMIZES_PROMPTS.removeprefix("program.").replace("_", "-")
    return {attribute: "true" if optimizes_prompts(program_name) else "false"}


def reward_registry() -> dict[str, Any]:
    """The rewards the editor offers (`json_script`): every usable one with its parameters' defaults,
    and the unavailable plugin rewards with their errors (listed, never choosable)."""
    rewards = [{
        "name": reward["name"],
        "builtin": reward["distribution"] == "cohort",
        "distribution": reward["distribution"],
        "value_range": [_json_number(v) for v in reward["value_range"]],
        "description": reward["description"],
        "params": [_param(name, default) for name, default in reward["params"].items()],
    } for reward in list_rewards()]
    unavailable = [{"name": u.name, "distribution": u.distribution, "error": u.error} for u in unavailable_rewards()]
    return {"rewards": rewards, "unavailable": unavailable}


def _param(name: str, default: Any) -> dict[str, Any]:
    """A reward parameter for the editor: its `type` picks the input ("number", "bool", "str", "json"
    for a list or dict, "optional" for a None default: empty means null; "code" for a default that is
    a Python object, e.g. a token counter, which a task cannot set and the editor only names)."""
    if isinstance(default, bool):
        return {"name": name, "type": "bool", "default": default}
    if isinstance(default, int | float):
        return {"name": name, "type": "number", "default": _json_number(default),
                "integer": isinstance(default, int)}
    if isinstance(default, str):
        return {"name": name, "type": "str", "default": default}
    if default is None:
        return {"name": name, "type": "optional", "default": None}
    try:
        return {"name": name, "type": "json", "default": json.loads(json.dumps(default, allow_nan=False))}
    except (TypeError, ValueError):
        return {"name": name, "type": "code", "default": getattr(default, "__name__", type(default).__name__)}


def _json_number(value: float) -> float | str:
    # JSON has no infinity (json_script would write `-Infinity`, which JSON.parse refuses).
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
