"""Rows per second of a dataset import (Banking77: train.jsonl + test.jsonl, 13,083 rows) through
the service the admin uses, against a raw PostgreSQL COPY of the same rows.

- import: `webapp.datasets.services.dataset_import`: read both files, parse each line, check it
  against the classification schema and for duplicate ids, serialize it, then in one transaction
  delete the previous version and COPY the new rows in;
- raw COPY: the same (dataset, part, line, split, id, JSON text) tuples, prepared in memory
  beforehand (each line's text as it is, no parsing or checking), COPYed into the same table in one
  transaction: the floor an import cannot beat.

Needs PostgreSQL (DATABASE_URL) with the migrations applied; uses a scratch dataset it deletes.
Run against a migrated PostgreSQL database (``manage.py migrate`` first):
``DATABASE_URL=postgres://... .venv/bin/python benchmarks/dataset_import.py [--repeat 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from webapp.datasets.builtin import BUILTIN_DATASETS, DEFAULT_DATA_DIR  # noqa: E402
from webapp.datasets.models import Dataset, DatasetRow  # noqa: E402
from webapp.datasets.services import _copy_rows, dataset_import  # noqa: E402

ROWS = 13_083


def raw_rows(sources):
    rows = []
    for part, source in enumerate(sources):
        split = "dev" if source.split == "dev" else "train"
        with open(source.path, encoding="utf-8") as handle:
            for line, text in enumerate(handle, start=1):
                rows.append((part, line, split, f"{part}-{line}", text.rstrip("\n")))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("This benchmark compares with PostgreSQL COPY: set DATABASE_URL to a PostgreSQL database.")
    spec = next(d for d in BUILTIN_DATASETS if d.name == "banking77")
    sources = spec.sources(Path(args.data_dir))
    name = f"bench-banking77-{os.getpid()}"
    dataset = Dataset.objects.create(name=name, kind=spec.kind)
    try:
        service, raw = [], []
        rows = raw_rows(sources)
        assert len(rows) == ROWS, len(rows)
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = dataset_import(dataset, sources, spec.import_options())
            service.append(time.perf_counter() - started)
            assert result.ok and result.rows == ROWS, result.summary()

            DatasetRow.objects.filter(dataset=dataset).delete()
            started = time.perf_counter()
            with transaction.atomic():
                _copy_rows(dataset.pk, rows)
            raw.append(time.perf_counter() - started)
            assert DatasetRow.objects.filter(dataset=dataset).count() == ROWS
            DatasetRow.objects.filter(dataset=dataset).delete()
    finally:
        Dataset.objects.filter(pk=dataset.pk).delete()

    s, r = statistics.median(service), statistics.median(raw)
    print(f"Banking77, {ROWS:,} rows (train.jsonl + test.jsonl), median of {args.repeat} runs, "
          f"PostgreSQL {connection.pg_version // 10000}:")
    print(f"  import service (read + validate + COPY, one transaction): {s * 1000:8.1f} ms  {ROWS / s:>10,.0f} rows/s")
    print(f"  raw COPY of the same rows (pre-serialized, no checks):    {r * 1000:8.1f} ms  {ROWS / r:>10,.0f} rows/s")
    print(f"  ratio import / raw COPY: {s / r:.2f}x the time ({(ROWS / s) / (ROWS / r):.0%} of raw COPY throughput)")


if __name__ == "__main__":
    main()
