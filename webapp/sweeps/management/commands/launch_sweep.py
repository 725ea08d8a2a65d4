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

from webapp.runs.launch.check import LaunchRefused, launch_check
from webapp.runs.launch.script import (
    add_launch_arguments,
    gathered_values,
    project_named,
    settings_file,
    task_named,
    user_named,
)
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
        add_launch_arguments(parser, what="sweep and its runs")
        parser.add_argument("--config", type=Path, help="Another TOML or JSON file of RunConfig fields to override "
                                                        "(applied before the sweep file's own settings).")

    def handle(self, *args, file, task, owner, name="", project="", preset=None, model=None, config=None, set=(),
               program=None, partition="", time_limit=None, **options):
        overrides = settings_file(Path(file))
        settings = overrides.pop("sweep", None)
        if not isinstance(settings, dict):
            raise CommandError(f"{file} has no [sweep] table: add one with a [sweep.space] of the settings to vary "
                               "(see examples/sweep_toy.toml).")
        task_row, user = task_named(task), user_named(owner)
        project_row = project_named(user, project)
        files = ([settings_file(Path(config))] if config is not None else []) + [overrides]
        values = gathered_values(task_row, program=program, preset=preset, model=model, files=files,
                                 assignments=list(set))
        try:
            base = launch_check(user, task=task_row, program=program, values=values, project=project_row,
                                partition=partition, time_limit=time_limit)
        except LaunchRefused as refused:
            raise CommandError(f"The sweep was not launched: {refused.reasons()}") from None
        space = settings.get("space") if isinstance(settings.get("space"), dict) else {}
        try:
            sweep = sweep_create(base, spec=spec_from_mapping(settings), name=name)
        except SweepRefused as refused:
            raise CommandError(_refusal(refused, space)) from None
        self.stdout.write(f"Sweep {sweep.pk} of {task_row.name} is running in project {sweep.project.name}: "
                          f"{sweep.trials.count()} of {sweep.n_trials} configurations queued, {sweep.seeds} "
                          f"run(s) each ({sweep.method}, objective {sweep.objective}).")
