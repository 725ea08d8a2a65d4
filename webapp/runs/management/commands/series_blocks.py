"""`manage.py series_blocks [RUN_ID ...]`: write the column blocks (webapp/runs/charts/blocks.py) of runs
stored before they existed, so their long charts read blocks instead of every row. Idempotent."""

from django.core.management.base import BaseCommand
from django.db import transaction

from webapp.runs.charts.blocks import blocks_rebuild
from webapp.runs.models import Run


class Command(BaseCommand):
    help = "Write the metric blocks of every run (or of the runs named) from their stored steps."

    def add_arguments(self, parser):
        parser.add_argument("run_ids", nargs="*", type=int, help="only these runs (default: every run)")

    def handle(self, *args, run_ids, **opts):
        runs = Run.objects.order_by("pk")
        if run_ids:
            runs = runs.filter(pk__in=run_ids)
        total = 0
        for run_id in runs.values_list("pk", flat=True).iterator():
            with transaction.atomic():
                Run.objects.select_for_update().filter(pk=run_id).first()  # no ingest writes beside it
                written = blocks_rebuild(run_id)
            total += written
            if written:
                self.stdout.write(f"run {run_id}: {written} block(s)")
        self.stdout.write(f"{total} block(s) written.")
