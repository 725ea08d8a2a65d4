"""The body of a run's creation (`cohort.init`'s arguments), checked as the server checks it.

`init` raises a ValueError at once for what the server would refuse, instead of the background upload
stopping with a 400 after the training has started. The limits are the server's
(webapp/api/logging_input.py); the server checks everything again.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cohort.sdk.values import step_number
from trainer.run import events

CLIENT_ID = re.compile(events.CLIENT_ID_PATTERN)


def client_id_text(value: Any) -> str:
    if not isinstance(value, str) or not CLIENT_ID.fullmatch(value):
        raise ValueError(f"a run's client id must be 1-64 letters, digits, '_', '.' or '-', not {value!r}")
    return value


SLUG = re.compile(events.SLUG_PATTERN)
TAG = re.compile(r"[a-z0-9][a-z0-9._-]*")
MAX_PROJECT = 150  # the server's bounds are the step-event contract's (trainer/run/events.py), read at each check
PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9@.+_-]{0,149}")  # webapp/projects/models.py NAME_PATTERN


def config_dict(config: Any) -> dict[str, Any]:
    """The run's config as JSON: a dict, a dataclass or an argparse Namespace; values JSON cannot
    hold (paths, dtypes) as their text. ValueError over 64 KiB or with NaN."""
    if config is None:
        return {}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    elif not isinstance(config, Mapping) and hasattr(config, "__dict__"):
        config = vars(config)
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a dict (or a dataclass), not {type(config).__name__}")
    try:
        text = json.dumps({str(k): v for k, v in config.items()}, default=str, allow_nan=False,
                          ensure_ascii=False, separators=(",", ":"))
    except ValueError as exc:
        raise ValueError(f"config must be JSON without NaN or infinities: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > events.MAX_CONFIG_BYTES:
        raise ValueError(f"config is {size:,} bytes as JSON; at most {events.MAX_CONFIG_BYTES:,}")
    return json.loads(text)


def create_request(*, client_id: str, task: Any, name: Any, config: Any, tags: Any, notes: Any, origin: Any,
                   total_steps: Any, project: Any = None) -> dict[str, Any]:
    """The body of the run's creation, checked as the server would check its cheap parts."""
    if not isinstance(task, str) or not SLUG.fullmatch(task) or len(task) > events.MAX_TASK:
        raise ValueError(f"task must be the name of a Cohort task (letters, digits, - and _; a new name "
                         f"makes a new task), not {task!r}")
    if not isinstance(name, str) or len(name) > events.MAX_NAME_CHARS:
        raise ValueError(f"name must be a string of at most {events.MAX_NAME_CHARS} characters")
    if project is not None and (not isinstance(project, str) or not PROJECT.fullmatch(project)):
        raise ValueError(f"project must be a Cohort project's name (letters, digits and @ . + - _, starting with a "
                         f"letter or digit, at most {MAX_PROJECT} characters), not {project!r}")
    if not isinstance(notes, str) or len(notes) > events.MAX_NOTES_CHARS:
        raise ValueError(f"notes must be a string of at most {events.MAX_NOTES_CHARS:,} characters")
    if not isinstance(origin, str) or not SLUG.fullmatch(origin) or len(origin) > events.MAX_ORIGIN or origin == "cohort":
        raise ValueError(f"origin must be the trainer's short name, like 'sdk' or 'trl' (not 'cohort', "
                         f"Cohort's own worker), not {origin!r}")
    if isinstance(tags, str) or not isinstance(tags, Iterable):
        raise ValueError(f"tags must be a list of strings, not {tags!r}")
    tags = list(tags)
    if not all(isinstance(t, str) for t in tags):
        raise ValueError(f"tags must be a list of strings, not {tags!r}")
    tags = list(dict.fromkeys(t.strip().lower() for t in tags))
    bad = [t for t in tags if not TAG.fullmatch(t) or len(t) > events.MAX_TAG_CHARS]
    if bad or len(tags) > events.MAX_TAGS:
        raise ValueError(f"tags are at most {events.MAX_TAGS} labels of letters, digits and . _ - (at most "
                         f"{events.MAX_TAG_CHARS} characters, starting with a letter or digit): not {bad or tags}")
    body = {"client_id": client_id_text(client_id), "task": task, "name": name, "config": config_dict(config),
            "tags": tags, "notes": notes, "origin": origin, "total_steps": _total_steps(total_steps)}
    if project:
        body["project"] = project
    return body


def _total_steps(value: Any) -> int:
    if step_number(value, "total_steps (0: unknown)") > events.MAX_TOTAL_STEPS:
        raise ValueError(f"total_steps is at most {events.MAX_TOTAL_STEPS:,}, not {value!r}")
    return int(value)
