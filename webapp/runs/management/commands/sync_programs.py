"""`manage.py sync_programs`: mirror the trainer's program registry (built-ins and installed
plugins) into the database and create the built-in tasks (idempotent; the quick-start run command
calls it at every start). Plugin programs and rewards that could not be loaded are listed with their
error, so a broken plugin is visible at start."""

from django.core.management.base import BaseCommand

from trainer.catalog import unavailable_plugins
from webapp.runs.launch.catalog import catalog_sync


class Command(BaseCommand):
    help = "Mirror trainer.programs (and plugin programs) into Program rows and create the built-in toy task."

    def handle(self, *args, **options):
        counts = catalog_sync()
        self.stdout.write(
            f"Synced {counts['programs']} programs ({counts['deactivated']} no longer registered); "
            f"{counts['builtin_tasks']} built-in task(s) ready."
        )
        for entry in unavailable_plugins():
            self.stdout.write(f"Unavailable plugin {entry.kind} {entry.name!r}: {entry.error}")
