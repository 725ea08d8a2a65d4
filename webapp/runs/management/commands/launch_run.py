"""`manage.py launch_run`: queue a run from a script, validated exactly like the launch form.

    python manage.py launch_run --task toy --owner admin --set steps=20 --set learning_rate=0.002
    python manage.py launch_run --task hotpotqa --owner alice --preset mhgpo-fof --config overrides.toml
    python manage.py launch_run --task toy --owner alice --project vision-rl
    python manage.py launch_run --task toy --owner alice --sweep examples/sweep_toy.toml

`--sweep FILE.toml` launches a sweep instead (base settings at top level, a [sweep] table): it hands over
to `manage.py launch_sweep` by name, since the sweeps app uses the runs app and not the other way round.
"""

import json
import tomllib
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from trainer.config import RunConfig
from webapp.projects.models import Role
from webapp.projects.selectors import has_role, projects_for_user
from webapp.runs.launch import config_defaults
from webapp.runs.launch_limits import limits_check_launch
from webapp.runs.models import Task
from webapp.runs.services import run_create


def _parse_assignment(text: str) -> tuple[str, object]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise CommandError(f"--set takes key=value, e.g. --set steps=20 (got {text!r}).")
    try:
        value = json.loads(raw)  # numbers, booleans, lists and objects as JSON
    except json.JSONDecodeError:
        value = raw  # a bare string such as a model id
    return key.strip(), value


def task_named(name: str) -> Task:
    """The task a command names; CommandError listing the known ones."""
    task = Task.objects.select_related("program").filter(name=name).first()
    if task is None:
        known = ", ".join(Task.objects.values_list("name", flat=True)) or "none (run manage.py sync_programs)"
        raise CommandError(f"No task named {name!r}; known tasks: {known}.")
    return task


def user_named(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"No user named {username!r}.")
    return user


class Command(BaseCommand):
    help = "Queue a training run of a task (the same validation as the launch form)."

    def add_arguments(self, parser):
        parser.add_argument("--task", required=True, help="Task name (see the admin, or 'toy').")
        parser.add_argument("--owner", required=True, help="Username that will own the run.")
        parser.add_argument("--name", default="", help="Optional run label.")
        parser.add_argument("--project", default="", help="The project to launch into (the owner must be a member or "
                                                          "an admin of it); default: the owner's personal project.")
        parser.add_argument("--preset", help="A paper preset (python -m trainer presets lists them).")
        parser.add_argument("--model", help="Start from the settings the task's program suggests for this model "
                                            "(e.g. builtin:smollm2-135m-instruct), as the form's chips do.")
        parser.add_argument("--config", type=Path, help="TOML or JSON file of RunConfig fields to override.")
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="Override one RunConfig field (JSON value or bare string); repeatable.")
        parser.add_argument("--sweep", type=Path, metavar="FILE.toml",
                            help="Launch a sweep instead: the file's top level is the base settings, its [sweep] "
                                 "table what varies and how (see examples/sweep_toy.toml; manage.py launch_sweep).")

    def handle(self, *args, task, owner, name, preset, config, set, model=None, project="", sweep=None, **options):
        if sweep is not None:
            call_command("launch_sweep", str(sweep), task=task, owner=owner, name=name, project=project, preset=preset,
                         model=model, config=config, set=list(set), stdout=self.stdout, stderr=self.stderr)
            return
        task_row, user = task_named(task), user_named(owner)
        project_row = self._project(user, project)
        try:
            values = config_defaults(task_row, preset=preset, model=model)
            if config is not None:
                values.update(self._read_overrides(config))
            values.update(dict(_parse_assignment(item) for item in set))
            run_config = RunConfig.from_dict(values)
            run_config.check_program_agents(list(task_row.program.modules))
        except ValueError as exc:
            raise CommandError(f"Invalid config: {exc}") from None
        refused = limits_check_launch(user, run_config)
        if refused:
            raise CommandError("Over a launch limit: " + " ".join(error.message for error in refused))
        run = run_create(owner=user, task=task_row, config=run_config, name=name, project=project_row)
        self.stdout.write(f"Queued run {run.pk} ({task_row.name}, {run_config.steps} steps) in project "
                          f"{run.project.name}.")

    @staticmethod
    def _project(user, name: str):
        if not name:
            return None
        project = projects_for_user(user).filter(name__iexact=name).first()
        if project is None:
            raise CommandError(f"{user.get_username()} is in no project named {name!r}.")
        if not has_role(user, project.pk, Role.MEMBER):
            raise CommandError(f"{user.get_username()} is a viewer of project {project.name}: viewers launch no runs.")
        return project

    @staticmethod
    def _read_overrides(path: Path) -> dict:
        try:
            text = path.read_text()
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None
        try:
            return json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
            raise CommandError(f"{path} is not valid {path.suffix.lstrip('.').upper() or 'TOML'}: {exc}") from None
