"""`manage.py import_builtin_datasets [--data-dir DIR] [--only NAME ...]`: import the real datasets
of `../shared/data/` (webapp.datasets.builtin) through the admin's import service."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from webapp.datasets.builtin import BUILTIN_DATASETS, DEFAULT_DATA_DIR, builtin_dataset_import


class Command(BaseCommand):
    help = "Import the built-in datasets (Banking77, GSM8K, HotpotQA + corpus, HoVer, ToolRL, PUPA)."

    def add_arguments(self, parser):
        parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
        parser.add_argument("--only", nargs="+", choices=[d.name for d in BUILTIN_DATASETS])

    def handle(self, *args, **opts):
        data_dir = Path(opts["data_dir"])
        if not data_dir.is_dir():
            raise CommandError(f"{data_dir}: no such folder.")
        failed = []
        for spec in BUILTIN_DATASETS:
            if opts["only"] and spec.name not in opts["only"]:
                continue
            dataset, result = builtin_dataset_import(spec, data_dir)
            if result.ok:
                self.stdout.write(f"{spec.name}: {result.summary()}")
            else:
                failed.append(spec.name)
                self.stderr.write(f"{spec.name}: {result.summary()}")
                for problem in result.problems[:5]:
                    self.stderr.write(f"  {problem}")
        if failed:
            raise CommandError(f"not imported: {', '.join(failed)}")
