"""`manage.py launch_sweep FILE.toml` (also `manage.py launch_run --sweep FILE.toml`, which hands over to
this command by name: the runs app never imports the sweeps app): a sweep from a script, checked as the
launch form's Sweep button checks it.

    python manage.py launch_sweep examples/sweep_toy.toml --task toy --owner alice

The file holds the base run settings at top level (as `launch_run --config` overrides them) and a
`[sweep]` table: method, seeds, n_trials, parallel, objective, mode, direction, pruner, sampler_seed,
`[sweep.options]` and `[sweep.space]` (`learning_rate = {low = 1e-5, high = 1e-3, log = true}`,
`group_size = [4, 8]`). See examples/sweep_toy.toml.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from trainer.config import RunConfig
from webapp.runs.launch import config_defaults
from webapp.runs.management.commands.launch_run import Command as LaunchRun
from webapp.runs.management.commands.launch_run import _parse_assignment, task_named, user_named
from webapp.sweeps.plan import SweepRefused
from webapp.sweeps.services import sweep_create
from webapp.sweeps.spec_input import spec_from_mapping


def _refusal(refused: SweepRefused, space: dict) -> str:
    """SweepRefused's errors named as the file names them: `sweep.space.<field>`, `sweep.<setting>`."""
    parts = []
    for field, message in refused.errors.items():
        if field is None:
            parts.append(message)
            continue
        if field in space:
            name = f"sweep.space.{field}"
        elif field.startswith("sweep_"):
            name = f"sweep.{field.removeprefix('sweep_')}"
        else:
            name = field
        parts.append(f"{name}: {message}")
    return "The sweep was not launched: " + " ".join(parts)


class Command(BaseCommand):
    help = "Launch a sweep of a task from a TOML file (the same checks as the launch form's Sweep button)."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, help="TOML: base run settings at top level, and a [sweep] table.")
        parser.add_argument("--task", required=True, help="Task name (see the admin, or 'toy').")
        parser.add_argument("--owner", required=True, help="Username that will own the sweep and its runs.")
        parser.add_argument("--name", default="", help="Optional sweep label.")
        parser.add_argument("--project", default="", help="The project to launch into (the owner must be a member "
                                                          "or an admin of it); default: the owner's personal project.")
        parser.add_argument("--preset", help="A paper preset (python -m trainer presets lists them).")
        parser.add_argument("--model", help="Start from the settings the task's program suggests for this model.")
        parser.add_argument("--config", type=Path, help="Another TOML or JSON file of RunConfig fields to override "
                                                        "(applied before the sweep file's own settings).")
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="Override one base RunConfig field (JSON value or bare string); repeatable.")

    def handle(self, *args, file, task, owner, name="", project="", preset=None, model=None, config=None, set=(),
               **options):
        overrides = LaunchRun._read_overrides(Path(file))
        settings = overrides.pop("sweep", None)
        if not isinstance(settings, dict):
            raise CommandError(f"{file} has no [sweep] table: add one with a [sweep.space] of the settings to vary "
                               "(see examples/sweep_toy.toml).")
        task_row, user = task_named(task), user_named(owner)
        project_row = LaunchRun._project(user, project)
        try:
            values = config_defaults(task_row, preset=preset, model=model)
            if config is not None:
                values.update(LaunchRun._read_overrides(Path(config)))
            values.update(overrides)
            values.update(dict(_parse_assignment(item) for item in set))
            base = RunConfig.from_dict(values)
            base.check_program_agents(list(task_row.program.modules))
        except ValueError as exc:
            raise CommandError(f"Invalid base config: {exc}") from None
        space = settings.get("space") if isinstance(settings.get("space"), dict) else {}
        try:
            sweep = sweep_create(owner=user, task=task_row, config=base, spec=spec_from_mapping(settings), name=name,
                                 project=project_row)
        except SweepRefused as refused:
            raise CommandError(_refusal(refused, space)) from None
        self.stdout.write(f"Sweep {sweep.pk} of {task_row.name} is running in project {sweep.project.name}: "
                          f"{sweep.trials.count()} of {sweep.n_trials} configurations queued, {sweep.seeds} "
                          f"run(s) each ({sweep.method}, objective {sweep.objective}).")
