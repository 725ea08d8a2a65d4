"""`manage.py sync_programs`: mirror the trainer's program registry into the database and create
the built-in tasks (idempotent; the quick-start run command calls it at every start)."""

from django.core.management.base import BaseCommand

from webapp.runs.catalog import catalog_sync


class Command(BaseCommand):
    help = "Mirror trainer.programs into Program rows and create the built-in toy task."

    def handle(self, *args, **options):
        counts = catalog_sync()
        self.stdout.write(
            f"Synced {counts['programs']} programs ({counts['deactivated']} no longer registered); "
            f"{counts['builtin_tasks']} built-in task(s) ready."
        )
