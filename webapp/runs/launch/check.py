"""The one launch check: every rule a run must pass before it is queued, whichever door it comes in by
(the launch form, `POST /api/runs/`, `POST /api/sweeps/`, `manage.py launch_run` and `launch_sweep`, a
sweep's trials, an experiment's runs).

`launch_check(user, task=, program=, values=, project=)` takes the run's settings as Python values (what
JSON, TOML or a parsed form field gives) and returns a `Launch`, the only thing `run_create` queues; or
raises `LaunchRefused`, keyed by field (None: the launch as a whole), with the same words at every door.
In order: the user's role in the project, the program (registered, fitting the task), each value's type
and the storage bounds, `RunConfig` itself (with what depends on the program: its agents, phase 1's
DSPy-only settings), then the launch limits.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from trainer.config import ConfigError, RunConfig, literal_choices
from trainer.programs import PROGRAMS, program_error, program_info
from trainer.run.events import INT32_MAX, MAX_NAME_CHARS, MAX_NOTES_CHARS, MAX_TAG_CHARS, MAX_TAGS
from webapp.datasets.kinds import program_dataset_kind
from webapp.projects.models import Project, Role
from webapp.projects.selectors import role_of
from webapp.runs.hooks import placement_check
from webapp.runs.launch.limits import limits_check_launch
from webapp.runs.models import EXTERNAL_PROGRAM, Program, Task

MAX_TEXT_CHARS = 500  # a run's free-text settings (a model id, a folder), as the launch form's boxes take them
TAG = re.compile(r"[a-z0-9][a-z0-9._-]*")
CONFIG_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


class LaunchRefused(Exception):
    """A refused launch: `errors` is field -> messages (None: the launch as a whole); `forbidden` when the
    user may not launch there at all (a viewer of the project: a 403, not a 400)."""

    def __init__(self, errors: dict[str | None, list[str]], *, forbidden: bool = False):
        self.errors = {field: list(messages) for field, messages in errors.items()}
        self.forbidden = forbidden
        super().__init__(f"The run was not created: {self.reasons()}")

    def reasons(self) -> str:
        """`field: message; ...`, as every door words a refusal (after its own "The ... was not ...")."""
        return "; ".join(f"{field}: {' '.join(messages)}" if field else " ".join(messages)
                         for field, messages in self.errors.items())

    @classmethod
    def one(cls, field: str | None, message: str, *, forbidden: bool = False) -> LaunchRefused:
        return cls({field: [message]}, forbidden=forbidden)


@dataclass(frozen=True)
class Launch:
    """A launch that passed every rule: `run_create` queues exactly this. `project` None: the owner's
    personal project."""

    owner: Any
    task: Task
    config: RunConfig
    project: Project | None = None
    partition: str = ""  # a Slurm partition (webapp/scheduling/slurm); empty: this server's workers
    time_limit_min: int | None = None  # the Slurm job's, when on a partition


def launch_check(user, *, task: Task, values: dict[str, Any], program: Program | str | None = None,
                 project: Project | None = None, counts: bool = True, partition: str = "",
                 time_limit: int | None = None) -> Launch:
    """The checked launch of `task` by `user` with RunConfig `values` (program: the task's unless named);
    LaunchRefused naming the field. `counts=False` leaves the user's active and queued runs uncounted (a
    sweep's trial: its plan counts every run of the sweep). `partition`: train it as a job on that Slurm
    partition (webapp/runs/hooks.py's placement checks it against Slurm) for `time_limit` minutes."""
    role_check(user, project)
    program_row = program_check(task, program or values.get("program"))
    values = {**{name: _none_if_empty(name, value) for name, value in values.items()}, "program": program_row.name}
    errors = value_errors(values)
    if errors:
        raise LaunchRefused(errors)
    try:
        config = RunConfig.from_dict(values)
        config.check_program_agents(list(program_row.modules))
        config.check_prompt_program(optimizes_prompts=bool(program_info(program_row.name).get("optimizes_prompts")))
    except ConfigError as exc:
        raise LaunchRefused.one(exc.field if exc.field in CONFIG_FIELDS else None, str(exc)) from None
    except (ValueError, TypeError) as exc:  # a reward's own parameters, for instance
        raise LaunchRefused.one("rewards" if "reward" in str(exc) else None, str(exc)) from None
    refused = [e for e in limits_check_launch(user, config) if counts or e.field is not None]
    if refused:
        errors: dict[str | None, list[str]] = {}
        for error in refused:
            errors.setdefault(error.field, []).append(error.message)
        raise LaunchRefused(errors)
    time_limit_min = placement_checked(partition, time_limit, config.num_processes)
    return Launch(owner=user, task=task, config=config, project=project, partition=partition or "",
                  time_limit_min=time_limit_min)


def placement_checked(partition: str | None, time_limit: int | None, processes: int) -> int | None:
    """The run's Slurm time limit (None off Slurm); LaunchRefused on `partition` or `time_limit`."""
    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, int)):
        raise LaunchRefused.one("time_limit", "A time limit is a whole number of minutes.")
    if not partition:
        if time_limit is not None:
            raise LaunchRefused.one("time_limit", "A time limit applies to a run on a Slurm partition: choose one "
                                                  "under Where, or leave it empty.")
        return None
    if not isinstance(partition, str):
        raise LaunchRefused.one("partition", "A partition is named by a string.")
    minutes, errors = placement_check(partition, time_limit, processes)
    if errors:
        raise LaunchRefused(dict(errors))
    return minutes


def tags_checked(tags: list[str]) -> list[str]:
    """A run's tags: lowercased, repeats dropped, each a slug of at most MAX_TAG_CHARS, at most MAX_TAGS;
    LaunchRefused on `tags` otherwise."""
    tags = list(dict.fromkeys(t.lower() for t in tags if t))
    bad = [t for t in tags if not TAG.fullmatch(t)]
    if bad:
        raise LaunchRefused.one("tags", "Tags are letters, digits and . _ - (starting with a letter or digit): "
                                        f"not {', '.join(bad[:3])}.")
    long = [t for t in tags if len(t) > MAX_TAG_CHARS]
    if long:
        raise LaunchRefused.one("tags", f"A tag has at most {MAX_TAG_CHARS} characters: {long[0][:50]!r} is longer.")
    if len(tags) > MAX_TAGS:
        raise LaunchRefused.one("tags", f"At most {MAX_TAGS} tags ({len(tags)} given).")
    return tags


def labels_check(name: str, tags: list[str], notes: str) -> tuple[str, list[str], str]:
    """A run's name, tags and notes as stored (LaunchRefused naming the one that cannot be)."""
    if len(name) > MAX_NAME_CHARS:
        raise LaunchRefused.one("name", f"A run's name has at most {MAX_NAME_CHARS} characters.")
    if len(notes) > MAX_NOTES_CHARS:
        raise LaunchRefused.one("notes", f"A run's notes have at most {MAX_NOTES_CHARS:,} characters.")
    return name, tags_checked(tags), notes


def role_check(user, project: Project | None) -> None:
    """A viewer of a project reads its runs and launches none: refused (forbidden) before anything else."""
    if project is not None and role_of(user, project.pk) == Role.VIEWER:
        raise LaunchRefused.one("project", f"You are a viewer of project {project.name}: viewers read its runs and "
                                           "launch none. Ask one of its admins to make you a member.", forbidden=True)


def task_check(task: Task) -> None:
    """A task Cohort can train: not one that holds only runs trained elsewhere."""
    if task.program.name == EXTERNAL_PROGRAM:
        raise LaunchRefused.one("task", f"Task {task.name!r} holds only runs trained elsewhere and logged through the "
                                        "API: Cohort's workers have no program to train it with.")


def program_check(task: Task, program: Program | str | None) -> Program:
    """The program the run trains (the task's unless named): registered, and fitting the task (generated
    examples by their own program; a dataset with training rows, of the kind the program reads)."""
    task_check(task)
    if program is None or program == "":
        program = task.program
    if isinstance(program, str):
        name = program
        program = Program.objects.filter(name=name).first()
        if program is None:
            raise LaunchRefused.one("program", f"No program {name!r}: see the launch form's list.")
    if program.name not in PROGRAMS:
        raise LaunchRefused.one("program", f"Program {program.name!r} is unavailable: "
                                           f"{program_error(program.name) or 'it is no longer registered.'}")
    if task.dataset_id is None:
        if program.pk != task.program_id:
            raise LaunchRefused.one("program", f"Task {task.name!r} generates its examples with program "
                                               f"{task.program.name!r}; choose that program.")
        return program
    if task.dataset.version == 0 or task.dataset.train_count == 0:
        raise LaunchRefused.one("task", f"Dataset {task.dataset.name!r} of task {task.name!r} has no training rows "
                                        f"yet (status: {task.dataset.status}); import it first.")
    kind = program_dataset_kind(program_info(program.name))
    if kind != task.dataset.kind:
        raise LaunchRefused.one("program", f"Program {program.name!r} reads {kind or 'generated'} examples, but task "
                                           f"{task.name!r} has a {task.dataset.kind} dataset.")
    return program


def value_errors(values: dict[str, Any]) -> dict[str | None, list[str]]:
    """Each setting's type, and the bounds of the columns a run's numbers end in, by field: what RunConfig
    takes for granted (it checks meanings: a choice, a whole number of at least 1)."""
    errors: dict[str | None, list[str]] = {}
    for name in sorted(set(values) - set(CONFIG_FIELDS)):
        errors[name] = [f"Unknown run setting {name!r}: use a launch form field name, e.g. steps, group_size, "
                        "learning_rate, model."]
    for name, value in values.items():
        if name in CONFIG_FIELDS:
            message = _type_error(name, str(CONFIG_FIELDS[name].type), value)
            if message:
                errors[name] = [message]
    return errors


def _none_if_empty(name: str, value: Any) -> Any:
    """An empty optional text ("" from a form box or a JSON body) means none."""
    optional_text = name in CONFIG_FIELDS and str(CONFIG_FIELDS[name].type) == "str | None"
    return None if optional_text and value == "" else value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_error(name: str, annotation: str, value: Any) -> str | None:
    """Why `value` cannot be setting `name` (None: it can)."""
    if literal_choices(CONFIG_FIELDS[name].type):
        return None  # RunConfig names the choices
    optional = annotation.endswith(" | None")
    if optional and value is None:
        return None
    kind = annotation.removesuffix(" | None")
    if kind == "bool":
        return None if isinstance(value, bool) else f"{name} must be true or false, not {value!r}."
    if kind == "int":
        if not _is_int(value):
            return f"{name} must be a whole number, not {value!r}."
        if abs(value) > INT32_MAX:
            return f"{name} must be at most {INT32_MAX:,} (a database integer), not {value:,}."
        return None
    if kind == "float":
        if not _is_number(value) or not math.isfinite(value):
            return f"{name} must be a finite number, not {value!r}."
        return None
    if kind == "str":
        if not isinstance(value, str):
            return f"{name} must be text, not {value!r}."
        return None if len(value) <= MAX_TEXT_CHARS else f"{name} has at most {MAX_TEXT_CHARS} characters."
    if kind == "list[float]":
        ok = isinstance(value, list) and all(_is_number(v) and math.isfinite(v) for v in value)
        return None if ok else f"{name} must be a list of numbers, e.g. [0.7, 0.1, 0.2]."
    if kind == "list[str]":
        ok = isinstance(value, list) and all(isinstance(v, str) and len(v) <= MAX_TEXT_CHARS for v in value)
        return None if ok else f"{name} must be a list of names, e.g. [\"q_proj\", \"v_proj\"]."
    if kind == "dict[str, int]":
        ok = isinstance(value, dict) and all(isinstance(k, str) and _is_int(v) and 0 <= v <= INT32_MAX
                                             for k, v in value.items())
        return None if ok else f"{name} must map names to whole numbers, e.g. {{\"teacher\": 2}}."
    if kind == "list[RewardSpec]":
        ok = isinstance(value, list) and all(isinstance(r, dict) for r in value)
        return None if ok else f'{name} must be a list of rewards, e.g. [{{"name": "exact_match", "weight": 1.0}}].'
    return None
