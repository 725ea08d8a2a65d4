"""Run creation through the API (`POST /api/runs/`): the JSON body becomes the launch form's data, so
a run created by a script passes exactly the checks of a run launched from the page (the task and
program fit, every RunConfig value, the owner's launch limits, the model allow-list) and gets the same
field-by-field errors.

    {"task": "toy-task", "program": "toy", "name": "", "tags": ["sweep"], "notes": "", "preset": null,
     "config": {"steps": 20, "group_size": 4, "learning_rate": 1e-5}}

Only `task` is required. The config starts from the values the page would start from (the program's
suggestions, the task's rewards, the preset) and the body's `config` overrides them key by key.
`program_state` is a DSPy program's saved state (the JSON its `save()` writes: prompt-optimized
instructions and demos); it is stored where the workers read it and becomes the run's `program_state`,
so the server trains the program as the client optimized it (cohort.dspy.MMGRPO with a client).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from django import forms

from webapp.limits.user_paths import program_states_folder
from webapp.nul_guard import holds_nul
from webapp.projects.selectors import projects_for_user
from webapp.runs.forms import CONFIG_FIELDS, RunLaunchForm
from webapp.runs.launch import config_defaults
from webapp.runs.models import EXTERNAL_PROGRAM, Task
from webapp.runs.params import BadParam

BODY_KEYS = ("task", "project", "program", "name", "tags", "notes", "preset", "config", "program_state")
CONFIG_NAMES = frozenset(f.name for f in CONFIG_FIELDS)


class LaunchRefused(Exception):
    """The body named values the form refused: `errors` is field -> messages (config fields by name)."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("The run was not created: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def launch_form(user, body: Any) -> RunLaunchForm:
    """The bound, validated launch form for `body`; BadParam for a body that is not an object of the
    known keys, LaunchRefused with the form's errors."""
    if not isinstance(body, dict):
        raise BadParam("The body must be a JSON object, e.g. {\"task\": \"toy-task\", \"config\": {\"steps\": 20}}.")
    if holds_nul(body):  # PostgreSQL text and jsonb cannot store it (webapp/nul_guard.py does the URL)
        raise BadParam("The body holds a NUL character (\\u0000), which no field accepts.")
    unknown = sorted(set(body) - set(BODY_KEYS))
    if unknown:
        raise BadParam(f"Unknown key(s) {', '.join(map(repr, unknown))}; the body takes {', '.join(BODY_KEYS)}.")
    config = body.get("config") or {}
    if not isinstance(config, dict):
        raise BadParam("'config' must be an object of run settings, e.g. {\"steps\": 20}.")
    errors = {key: [f"Unknown run setting {key!r}: use a launch form field name, e.g. steps, group_size, "
                    "learning_rate, model."] for key in sorted(set(config) - CONFIG_NAMES)}
    task = _task(body.get("task"), errors)
    project = _project(user, body.get("project"), errors)
    program = body.get("program")
    if program is not None and not isinstance(program, str):  # a list was a 500 (found by the sweeps' fuzz)
        errors["program"] = ["'program' must be a program's name."]
    program = program if isinstance(program, str) and program else (task.program.name if task else "")
    texts = {key: _text(body, key, errors) for key in ("name", "notes", "preset")}
    tags = body.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        errors["tags"] = ["'tags' must be a list of strings."]
    if errors:
        raise LaunchRefused(errors)
    try:
        values = config_defaults(task, program_name=program, preset=texts["preset"] or None)
    except ValueError as exc:
        raise LaunchRefused({"preset": [str(exc)]}) from None
    values.update(config)
    if body.get("program_state") is not None:
        values["program_state"] = str(_store_program_state(user, body["program_state"]))
    data = {"task": task.pk, "program": program, "name": texts["name"], "notes": texts["notes"],
            "tags": ", ".join(tags), "project": project.pk if project is not None else ""}
    form = RunLaunchForm(data=data, user=user)
    # The form reads `data` when validated: each config value is put in as its field writes it on the page.
    for name in CONFIG_NAMES:
        _put(data, name, form.fields[name], values.get(name), errors)
    if errors:
        raise LaunchRefused(errors)
    if not form.is_valid():
        raise LaunchRefused({field: list(messages) for field, messages in form.errors.items()})
    return form


def _store_program_state(user, state: Any) -> Path:
    """The state's file in the user's own folder, named by its content's hash (the same state is stored
    once)."""
    if not isinstance(state, dict) or not state:
        raise LaunchRefused({"program_state": ["'program_state' must be the JSON object a DSPy program's "
                                               "save() writes."]})
    text = json.dumps(state, sort_keys=True, ensure_ascii=False)
    folder = program_states_folder(user)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    if not path.exists():
        staged = path.with_suffix(f".tmp-{os.getpid()}")
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, path)  # a reader never sees half a file
    return path


def _task(value: Any, errors: dict[str, list[str]]) -> Task | None:
    if not isinstance(value, str | int) or isinstance(value, bool) or value == "":
        errors["task"] = ["'task' is required: a task's name (or id), as the launch form lists them."]
        return None
    tasks = Task.objects.select_related("program", "dataset")
    task = tasks.filter(pk=value).first() if isinstance(value, int) else tasks.filter(name=value).first()
    if task is None:
        errors["task"] = [f"No task {value!r}."]
    elif task.program.name == EXTERNAL_PROGRAM:
        errors["task"] = [f"Task {task.name!r} holds only runs trained elsewhere and logged through the API: "
                          "Cohort's workers have no program to train it with."]
    return task


def _project(user, value: Any, errors: dict[str, list[str]]):
    """The project named in the body (None: the default, see RunCreateSerializer); one the user does not
    read is as unknown as a missing one."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        errors["project"] = ["'project' must be a project's name."]
        return None
    project = projects_for_user(user).filter(name__iexact=value).first()
    if project is None:
        errors["project"] = [f"No project {value!r} of yours: see your projects at /projects/."]
    return project


def _text(body: dict, key: str, errors: dict[str, list[str]]) -> str:
    value = body.get(key) or ""
    if not isinstance(value, str):
        errors[key] = [f"'{key}' must be a string."]
        return ""
    return value


def _put(data: dict, name: str, field: forms.Field, value: Any, errors: dict[str, list[str]]) -> None:
    """The form's text for one config value (a checkbox is present only when on)."""
    if isinstance(field, forms.BooleanField):
        if not isinstance(value, bool):
            errors[name] = [f"'{name}' must be true or false."]
        elif value:
            data[name] = "on"
        return
    data[name] = "" if value is None else field.prepare_value(value)
