"""`manage.py create_builtin_tasks`: define the ready-made tasks on the imported real datasets
(webapp.runs.launch.catalog.DATA_TASKS). Idempotent; names the datasets still missing."""

from django.core.management.base import BaseCommand

from webapp.runs.launch.catalog import data_tasks_sync


class Command(BaseCommand):
    help = "Create the Banking77, HotpotQA search, HoVer, ToolRL and GSM8K tasks whose datasets are imported."

    def handle(self, *args, **opts):
        tasks, missing = data_tasks_sync()
        for task in tasks:
            corpus = f" + corpus {task.corpus.name}" if task.corpus_id else ""
            self.stdout.write(f"task {task.name}: program {task.program.name}, dataset {task.dataset.name}{corpus}")
        if missing:
            self.stdout.write(f"Missing datasets (import them first, e.g. manage.py import_builtin_datasets): "
                              f"{', '.join(missing)}")
        self.stdout.write(f"{len(tasks)} ready-made task(s) ready.")
