"""Export a task's data for a run: the JSONL files `trainer.config.RunConfig` reads.

`task_export(task, directory)` writes `train.jsonl`, `dev.jsonl` (when the dataset has a dev split)
and `corpus.jsonl` (when the task has a retrieval corpus), each row's stored record on one line in
file and line order, and returns the RunConfig field values that point at them. The records carry
exactly the field names the programs read (`schemas.py`), so no translation happens here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from webapp.datasets.models import Dataset, DatasetRow


class ExportError(ValueError):
    """The task's data cannot be exported (the message says what is missing)."""


def _write_rows(rows, path: Path) -> int:
    """Writes `rows` (an iterator of dicts) as JSONL through a temp file renamed at the end, so a
    reader never sees half a file; returns the number of rows."""
    count = 0
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as out:
        for data in rows:
            out.write(json.dumps(data, ensure_ascii=False))
            out.write("\n")
            count += 1
    os.replace(partial, path)
    return count


def _rows(dataset: Dataset, split: str | None = None):
    query = DatasetRow.objects.filter(dataset=dataset)
    if split:
        query = query.filter(split=split)
    return query.order_by("part", "line_number").values_list("data", flat=True).iterator(chunk_size=2000)


def task_export(task, directory: str | Path) -> dict[str, Any]:
    """Writes the task's train/dev rows (and corpus) under `directory`; returns
    `{"train_data": path, "dev_data": path or None, "corpus_data": path or None}`.

    A task without a dataset (the toy task generates its examples) gives all three None."""
    directory = Path(directory)
    values: dict[str, Any] = {"train_data": None, "dev_data": None, "corpus_data": None}
    if task.dataset_id is None:
        return values
    dataset = task.dataset
    if dataset.version == 0 or dataset.train_count == 0:
        raise ExportError(f"task {task.name!r}: dataset {dataset.name!r} has no training rows yet "
                          f"(status: {dataset.status}); import it first.")
    directory.mkdir(parents=True, exist_ok=True)
    values["train_data"] = str(directory / "train.jsonl")
    _write_rows(_rows(dataset, DatasetRow.Split.TRAIN), Path(values["train_data"]))
    if dataset.dev_count:
        values["dev_data"] = str(directory / "dev.jsonl")
        _write_rows(_rows(dataset, DatasetRow.Split.DEV), Path(values["dev_data"]))
    if task.corpus_id is not None:
        if task.corpus.version == 0 or task.corpus.row_count == 0:
            raise ExportError(f"task {task.name!r}: corpus {task.corpus.name!r} has no rows yet; import it first.")
        values["corpus_data"] = str(directory / "corpus.jsonl")
        _write_rows(_rows(task.corpus), Path(values["corpus_data"]))
    return values
