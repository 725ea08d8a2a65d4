"""Run creation through the API (`POST /api/runs/`, and a sweep's base settings): the JSON body's values
go straight to the launch check (webapp/runs/launch/check.py), so a run created by a script passes
exactly the checks of a run launched from the page (the task and program fit, every value, the owner's
launch limits, the model allow-list) and gets the same field-by-field errors.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rest_framework.response import Response

from webapp.limits.user_paths import program_states_folder
from webapp.nul_guard import holds_nul
from webapp.projects.selectors import projects_for_user
from webapp.runs.launch.check import Launch, LaunchRefused, labels_check, launch_check, task_check
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Task
from webapp.runs.params import BadParam

BODY_KEYS = ("task", "project", "program", "name", "tags", "notes", "preset", "config", "program_state", "partition",
             "time_limit")


@dataclass(frozen=True)
class LaunchBody:
    """What a launch body asks for, read but not yet checked."""

    task: Task
    project: Any
    program: str
    values: dict[str, Any]
    name: str
    tags: list[str]
    notes: str
    partition: str = ""
    time_limit: int | None = None


def launch_body(user, body: Any) -> LaunchBody:
    """The launch `body` asks for: BadParam for a body that is not an object of the known keys,
    LaunchRefused for a task, project or label it names wrongly."""
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
    errors: dict[str | None, list[str]] = {}
    task = _task(body.get("task"), errors)
    project = _project(user, body.get("project"), errors)
    program = body.get("program")
    if program is not None and not isinstance(program, str):  # a list was a 500 (found by the sweeps' fuzz)
        errors["program"] = ["'program' must be a program's name."]
    program = program if isinstance(program, str) and program else (task.program.name if task else "")
    texts = {key: _text(body, key, errors) for key in ("name", "notes", "preset")}
    partition = body.get("partition") or ""
    if not isinstance(partition, str):
        errors["partition"] = ["'partition' must be a Slurm partition's name (a string)."]
        partition = ""
    time_limit = body.get("time_limit")
    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, int)):
        errors["time_limit"] = ["'time_limit' must be a whole number of minutes, or null."]
        time_limit = None
    tags = body.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        errors["tags"] = ["'tags' must be a list of strings."]
        tags = []
    if errors:
        raise LaunchRefused(errors)
    name, tags, notes = labels_check(texts["name"], tags, texts["notes"])
    try:
        values = config_defaults(task, program_name=program, preset=texts["preset"] or None)
    except ValueError as exc:
        raise LaunchRefused({"preset": [str(exc)]}) from None
    values.update(config)
    if body.get("program_state") is not None:
        values["program_state"] = str(_store_program_state(user, body["program_state"]))
    return LaunchBody(task=task, project=project, program=program, values=values, name=name, tags=tags, notes=notes,
                      partition=partition, time_limit=time_limit)


def launch_from_body(user, asked: LaunchBody, *, project=None) -> Launch:
    """The launch check of what the body asked for, into `project` when the body named none (a token's
    default project)."""
    return launch_check(user, task=asked.task, program=asked.program, values=asked.values,
                        project=asked.project or project, partition=asked.partition, time_limit=asked.time_limit)


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


def _task(value: Any, errors: dict[str | None, list[str]]) -> Task | None:
    if not isinstance(value, str | int) or isinstance(value, bool) or value == "":
        errors["task"] = ["'task' is required: a task's name (or id), as the launch form lists them."]
        return None
    tasks = Task.objects.select_related("program", "dataset")
    task = tasks.filter(pk=value).first() if isinstance(value, int) else tasks.filter(name=value).first()
    if task is None:
        errors["task"] = [f"No task {value!r}."]
        return None
    try:
        task_check(task)  # before its defaults are read: a task of runs trained elsewhere has none
    except LaunchRefused as refused:
        errors.update(refused.errors)
    return task


def _project(user, value: Any, errors: dict[str | None, list[str]]):
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


def _text(body: dict, key: str, errors: dict[str | None, list[str]]) -> str:
    value = body.get(key) or ""
    if not isinstance(value, str):
        errors[key] = [f"'{key}' must be a string."]
        return ""
    return value


def refused_response(refused: LaunchRefused):
    """A refused launch as the API answers it: 403 for a viewer's, 400 otherwise, with the errors by
    field (the launch as a whole under "__all__", as Django names a form's own errors)."""
    errors = {field or "__all__": messages for field, messages in refused.errors.items()}
    return Response({"detail": str(refused), "errors": errors}, status=403 if refused.forbidden else 400)
