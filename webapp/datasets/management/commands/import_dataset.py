"""`manage.py import_dataset PATH --kind K --name N`: import a file from a script, through the same
validation and atomic import as an admin upload (synchronously, no worker needed).

    manage.py import_dataset data.csv --kind classification --name intents --map utterance=text --dev-ratio 0.1
    manage.py import_dataset train.jsonl --dev-file test.jsonl --kind math --name gsm8k
    manage.py import_dataset rows.jsonl --kind fields:question,answer --name demo   # a plugin program's kind
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from webapp.datasets.models import Dataset
from webapp.datasets.schemas import GENERIC_PREFIX, SCHEMAS
from webapp.datasets.services import ImportOptions, SourceFile, dataset_import, parse_mapping


class Command(BaseCommand):
    help = "Validate and import a JSONL, CSV or Parquet file as a dataset (all rows or none)."

    def add_arguments(self, parser):
        parser.add_argument("path", help="The file (.jsonl, .csv or .parquet).")
        parser.add_argument("--kind", required=True, help=f"Schema kind of the records: {', '.join(SCHEMAS)}, or "
                            f"{GENERIC_PREFIX}<field>,<field>,... (the generic kind of a plugin program).")
        parser.add_argument("--name", required=True, help="Dataset name (a slug); an existing one gets a new version.")
        parser.add_argument("--description", default="")
        parser.add_argument("--dev-file", help="A second file whose rows are all the dev split.")
        split = parser.add_mutually_exclusive_group()
        split.add_argument("--split-field", help="Field whose value (train/dev/test/validation) gives each row's split.")
        split.add_argument("--dev-ratio", type=float, default=0.0, help="Share of rows drawn (seeded) into dev.")
        parser.add_argument("--seed", type=int, default=0, help="Seed of the --dev-ratio draw.")
        parser.add_argument("--map", action="append", default=[], metavar="SRC=DST",
                            help="Rename a column to a schema field (repeatable), e.g. --map utterance=text.")
        parser.add_argument("--max-bytes", type=int, help="Size limit (default: COHORT_DATASET_MAX_BYTES).")

    def handle(self, *args, **opts):
        try:
            options = ImportOptions(kind=opts["kind"], mapping=parse_mapping(opts["map"]),
                                    split_field=opts["split_field"], dev_ratio=opts["dev_ratio"], seed=opts["seed"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        sources = [SourceFile(opts["path"], Path(opts["path"]).name)]
        if opts["dev_file"]:
            sources.append(SourceFile(opts["dev_file"], Path(opts["dev_file"]).name, "dev"))
        for source in sources:
            if not Path(source.path).is_file():
                raise CommandError(f"{source.path}: no such file.")
        dataset = Dataset.objects.filter(name=opts["name"]).first()
        if dataset is None:
            dataset = Dataset(name=opts["name"], kind=options.kind, description=opts["description"])
            try:
                dataset.full_clean()
            except Exception as exc:
                raise CommandError(f"dataset name {opts['name']!r}: {exc}") from None
            dataset.save()
        elif dataset.is_importing:
            raise CommandError(f"dataset {dataset.name!r} is importing already; wait for it to finish.")
        result = dataset_import(dataset, sources, options, max_bytes=opts["max_bytes"])
        if not result.ok:
            for problem in result.problems:
                self.stderr.write(str(problem))
            more = result.problem_count - len(result.problems)
            raise CommandError(f"{result.problem_count:,} problem(s){f' ({more:,} not shown)' if more else ''}; "
                               f"nothing was imported into {dataset.name!r}.")
        self.stdout.write(f"{dataset.name} (version {dataset.version}): {result.summary()}.")
