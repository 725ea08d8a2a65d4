"""Writing an upload's rows (step 2 of `services.dataset_import`): the dataset's old rows are deleted
and the new ones inserted in one transaction, COPY on PostgreSQL and a batched INSERT elsewhere.
Readers see the previous version until the commit; any failure rolls everything back."""

from __future__ import annotations

from django.db import connection, transaction

from webapp.datasets.models import Dataset, DatasetRow

_COLUMNS = ("dataset_id", "part", "line_number", "split", "ext_id", "data")


def replace_rows(dataset: Dataset, rows: list[tuple[int, int, str, str, str]]) -> tuple[int, int]:
    """Swaps the dataset's rows for `rows` in one transaction; returns (train, dev) counts."""
    with transaction.atomic():
        # Serializes concurrent imports of one dataset (a no-op on SQLite, whose writes are serial).
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
        DatasetRow.objects.filter(dataset=dataset).delete()
        if connection.vendor == "postgresql":
            _copy_rows(dataset.pk, rows)
        else:
            _insert_rows(dataset.pk, rows)
    dev = sum(1 for row in rows if row[2] == DatasetRow.Split.DEV)
    return len(rows) - dev, dev


def _copy_rows(dataset_id: int, rows) -> None:
    """COPY FROM STDIN through psycopg 3: the fastest way into PostgreSQL; `data` goes in as JSON text."""
    table = connection.ops.quote_name(DatasetRow._meta.db_table)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(_COLUMNS)}) FROM STDIN") as copy:
            for part, line, split, ext_id, text in rows:
                copy.write_row((dataset_id, part, line, split, ext_id, text))


def _insert_rows(dataset_id: int, rows, batch: int = 1000) -> None:
    """Batched INSERT (SQLite and others): JSONField stores JSON text there, so `data` goes in as is."""
    table = connection.ops.quote_name(DatasetRow._meta.db_table)
    sql = f"INSERT INTO {table} ({', '.join(_COLUMNS)}) VALUES ({', '.join(['%s'] * len(_COLUMNS))})"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), batch):
            cursor.executemany(sql, [(dataset_id, part, line, split, ext_id, text)
                                     for part, line, split, ext_id, text in rows[start:start + batch]])
