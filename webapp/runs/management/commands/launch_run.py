"""`manage.py launch_run`: queue a run from a script, through the launch check every door uses.

    python manage.py launch_run --task toy --owner admin --set steps=20 --set learning_rate=0.002
    python manage.py launch_run --task hotpotqa --owner alice --preset mhgpo-fof --config overrides.toml
    python manage.py launch_run --task toy --owner alice --project vision-rl
    python manage.py launch_run --task toy --owner alice --sweep examples/sweep_toy.toml

`--sweep FILE.toml` launches a sweep instead (base settings at top level, a [sweep] table): it hands over
to `manage.py launch_sweep` by name, since the sweeps app uses the runs app and not the other way round.
"""

from pathlib import Path

from django.core.management import call_command
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
from webapp.runs.services import run_create


class Command(BaseCommand):
    help = "Queue a training run of a task (the same launch check as the launch form)."

    def add_arguments(self, parser):
        add_launch_arguments(parser)
        parser.add_argument("--config", type=Path, help="TOML or JSON file of RunConfig fields to override.")
        parser.add_argument("--sweep", type=Path, metavar="FILE.toml",
                            help="Launch a sweep instead: the file's top level is the base settings, its [sweep] "
                                 "table what varies and how (see examples/sweep_toy.toml; manage.py launch_sweep).")

    def handle(self, *args, task, owner, name, preset, config, set, model=None, project="", sweep=None, program=None,
               partition="", time_limit=None, **options):
        if sweep is not None:
            call_command("launch_sweep", str(sweep), task=task, owner=owner, name=name, project=project, preset=preset,
                         model=model, config=config, set=list(set), program=program, partition=partition,
                         time_limit=time_limit, stdout=self.stdout, stderr=self.stderr)
            return
        task_row, user = task_named(task), user_named(owner)
        project_row = project_named(user, project)
        files = [settings_file(config)] if config is not None else []
        values = gathered_values(task_row, program=program, preset=preset, model=model, files=files,
                                 assignments=list(set))
        try:
            launch = launch_check(user, task=task_row, program=program, values=values, project=project_row,
                                  partition=partition, time_limit=time_limit)
        except LaunchRefused as refused:
            raise CommandError(str(refused)) from None
        run = run_create(launch, name=name)
        where = f" for Slurm partition {run.partition}" if run.partition else ""
        self.stdout.write(f"Queued run {run.pk} ({task_row.name}, {launch.config.steps} steps) in project "
                          f"{run.project.name}{where}.")
