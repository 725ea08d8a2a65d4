"""What the launch commands share (`manage.py launch_run`, and the sweeps app's `launch_sweep`): the
task, owner and project a command names, and the settings it gathers from a preset, a model's
suggestions, a TOML or JSON file and `--set key=value`. Every rule is then the launch check's."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from webapp.projects.selectors import projects_for_user
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Task


def add_launch_arguments(parser, *, what: str = "run") -> None:
    """The arguments both commands take, besides their own."""
    parser.add_argument("--task", required=True, help="Task name (see the admin, or 'toy').")
    parser.add_argument("--owner", required=True, help=f"Username that will own the {what}.")
    parser.add_argument("--name", default="", help=f"Optional {what} label.")
    parser.add_argument("--project", default="", help="The project to launch into (the owner must be a member or "
                                                      "an admin of it); default: the owner's personal project.")
    parser.add_argument("--program", help="The program to train (default: the task's), as the launch form's list names it.")
    parser.add_argument("--preset", help="A paper preset (python -m trainer presets lists them).")
    parser.add_argument("--model", help="Start from the settings the task's program suggests for this model "
                                        "(e.g. builtin:smollm2-135m-instruct), as the form's chips do.")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="Override one RunConfig field (JSON value or bare string); repeatable.")
    parser.add_argument("--partition", default="", help=f"Train the {what}'s runs as batch jobs on this Slurm partition "
                                                       "(one the server offers: COHORT_SLURM_PARTITIONS).")
    parser.add_argument("--time-limit", type=int, metavar="MINUTES", help="The Slurm job's time limit (with "
                                                                          "--partition; default: the server's).")


def assignment(text: str) -> tuple[str, Any]:
    """`--set key=value`: the value as JSON (numbers, booleans, lists, objects), else as a bare string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise CommandError(f"--set takes key=value, e.g. --set steps=20 (got {text!r}).")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare string such as a model id
    return key.strip(), value


def task_named(name: str) -> Task:
    """The task a command names; CommandError listing the known ones."""
    task = Task.objects.select_related("program", "dataset").filter(name=name).first()
    if task is None:
        known = ", ".join(Task.objects.values_list("name", flat=True)) or "none (run manage.py sync_programs)"
        raise CommandError(f"No task named {name!r}; known tasks: {known}.")
    return task


def user_named(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"No user named {username!r}.")
    return user


def project_named(user, name: str):
    """The project a command names among those `user` reads (None: the personal project); whether they
    may launch there is the launch check's."""
    if not name:
        return None
    project = projects_for_user(user).filter(name__iexact=name).first()
    if project is None:
        raise CommandError(f"{user.get_username()} is in no project named {name!r}.")
    return project


def settings_file(path: Path) -> dict[str, Any]:
    """A TOML or JSON file of settings; CommandError when it cannot be read or parsed."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None
    try:
        return json.loads(text) if Path(path).suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CommandError(f"{path} is not valid {Path(path).suffix.lstrip('.').upper() or 'TOML'}: {exc}") from None


def gathered_values(task: Task, *, program: str | None, preset: str | None, model: str | None,
                    files: list[dict[str, Any]], assignments: list[str]) -> dict[str, Any]:
    """The settings a command asks for: the defaults of the task and program (its preset, its model's
    suggestions), then each file's, then each `--set`."""
    try:
        values = config_defaults(task, program_name=program or None, preset=preset, model=model)
    except ValueError as exc:
        raise CommandError(f"The run was not created: preset: {exc}") from None
    for overrides in files:
        values.update(overrides)
    values.update(dict(assignment(item) for item in assignments))
    return values
