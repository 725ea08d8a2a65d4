"""Dataset uploads: preview, validation and the atomic import (docs/explanation/architecture.md "Data model").

The admin, the Celery task and `manage.py import_dataset` all go through `dataset_import`:

1. *scan* (`scan.py`): every record of every file is read, renamed by the field mapping, checked
   against the kind's schema (`schemas.py`) and for duplicate ids; problems name file, line and field.
   Progress is written to the Dataset row as it goes (outside any transaction, so the page sees it).
2. *write* (`row_writes.py`), only when the scan found no problem: in one transaction the old rows are
   deleted and the new ones inserted (COPY on PostgreSQL, a batched INSERT elsewhere), then the counts
   updated. Readers see the previous version until the commit; any failure rolls everything back, so a
   dataset is never half-imported and a failed re-upload leaves the previous version untouched.

The admin's preview is in `preview.py`, its staged files in `staging.py`; this module holds the
services that change datasets (import, confirm a staged upload, delete) and re-exports the others'
public names, so `webapp.datasets.services` stays the one place callers import from.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from webapp.datasets.models import Dataset
from webapp.datasets.preview import PREVIEW_ROWS, Preview, dataset_preview  # noqa: F401 - re-exported
from webapp.datasets.row_writes import (  # noqa: F401 - _copy_rows: benchmarks/dataset_import.py times it
    _copy_rows,
    replace_rows,
)
from webapp.datasets.scan import (  # noqa: F401 - re-exported: the import's public names
    DEV_NAMES,
    MAX_ERRORS,
    PROGRESS_EVERY_S,
    TRAIN_NAMES,
    ImportOptions,
    Problem,
    Scan,
    SourceFile,
    max_upload_bytes,
    parse_mapping,
    scan_sources,
)
from webapp.datasets.staging import (  # noqa: F401 - re-exported: the admin's staged uploads
    STALE_UPLOAD_S,
    StagedUpload,
    sources_in,
    upload_dir,
    upload_discard,
    upload_get,
    upload_stage,
)

logger = logging.getLogger(__name__)

IMPORT_TASK = "workers.tasks.import_dataset_task"


# --- import --------------------------------------------------------------------------------------
@dataclass
class ImportResult:
    ok: bool
    rows: int = 0
    train: int = 0
    dev: int = 0
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        if self.ok:
            return f"imported {self.rows:,} rows ({self.train:,} train, {self.dev:,} dev) in {self.seconds:.1f} s"
        return f"{self.problem_count:,} problem(s); nothing was imported"


def _report(dataset_id: int, progress: float, note: str) -> None:
    # Autocommitted outside the import transaction, so the dataset page sees it while it runs.
    Dataset.objects.filter(pk=dataset_id).update(progress=max(0, min(100, int(progress))), progress_note=note[:300],
                                                 updated_at=timezone.now())


def dataset_import(dataset: Dataset, sources: list[SourceFile], options: ImportOptions, *,
                   max_bytes: int | None = None) -> ImportResult:
    """Validates `sources` and, when every row is valid, replaces the dataset's rows with them in one
    transaction. Problems (the first 50, and their total) are stored on the dataset and returned;
    then nothing was written and the previous rows, if any, are still there."""
    started = time.monotonic()
    filenames = " + ".join(s.filename for s in sources)
    Dataset.objects.filter(pk=dataset.pk).update(
        status=Dataset.Status.IMPORTING, progress=0, progress_note="reading the file", errors=[], error_count=0,
        import_options=options.to_dict() | {"files": [s.filename for s in sources]}, updated_at=timezone.now())

    if dataset.kind != options.kind and _used_by_tasks(dataset):
        scan = Scan()
        scan.add(Problem(f"the dataset is used by a task as kind {dataset.kind!r}; a new version must keep that "
                         f"kind (got {options.kind!r}). Upload it as a new dataset instead."))
    else:
        scan = scan_sources(sources, options, max_bytes=max_bytes,
                            on_progress=lambda f, note: _report(dataset.pk, 90 * f, note))
    if not scan.ok:
        return _fail(dataset, scan.problems, scan.problem_count, started)

    _report(dataset.pk, 90, f"writing {len(scan.rows):,} rows")
    try:
        train, dev = replace_rows(dataset, scan.rows)
    except DatabaseError as exc:
        logger.exception("dataset %s: writing the rows failed", dataset.pk)
        return _fail(dataset, [Problem(f"the database refused the rows ({exc}); nothing was changed.")], 1, started)
    rows = len(scan.rows)
    Dataset.objects.filter(pk=dataset.pk).update(
        status=Dataset.Status.READY, kind=options.kind, source_filename=filenames[:300], row_count=rows,
        train_count=train, dev_count=dev, version=F("version") + 1, imported_at=timezone.now(), progress=100,
        progress_note=f"imported {rows:,} rows", errors=[], error_count=0, updated_at=timezone.now())
    dataset.refresh_from_db()
    return ImportResult(True, rows, train, dev, seconds=time.monotonic() - started)


def _fail(dataset: Dataset, problems: list[Problem], count: int, started: float) -> ImportResult:
    Dataset.objects.filter(pk=dataset.pk).update(
        status=Dataset.Status.FAILED, progress=100, errors=[p.as_dict() for p in problems[:MAX_ERRORS]],
        error_count=count, progress_note=f"{count:,} problem(s); nothing was imported", updated_at=timezone.now())
    dataset.refresh_from_db()
    return ImportResult(False, problems=problems, problem_count=count, seconds=time.monotonic() - started)


def _tasks_using(dataset: Dataset) -> QuerySet:
    """The tasks that use `dataset` as their data or their corpus, through the reverse relations of
    Task's foreign keys (`tasks`, `corpus_tasks`: webapp/runs/models/), so this app names no Task."""
    return dataset.tasks.all() | dataset.corpus_tasks.all()


def _used_by_tasks(dataset: Dataset) -> bool:
    return _tasks_using(dataset).exists()


# --- staged uploads: confirmed, then imported by the worker ---------------------------------------
class UploadRefused(Exception):
    """The upload cannot be queued (the message says why)."""


def upload_confirm(staged: StagedUpload, *, user) -> Dataset:
    """Creates the dataset (or claims the existing one for a new version) and queues its import
    after commit. Refuses while another import of the same dataset is queued or running."""
    from webapp.celery import app as celery_app

    meta, options = staged.manifest, staged.options
    with transaction.atomic():
        if meta.get("dataset_id"):
            dataset = Dataset.objects.filter(pk=meta["dataset_id"]).first()
            if dataset is None:
                raise UploadRefused("the dataset of this upload was deleted meanwhile.")
            claimed = (Dataset.objects.filter(pk=dataset.pk).exclude(status__in=Dataset.ACTIVE_STATUSES)
                       .update(status=Dataset.Status.QUEUED, progress=0, progress_note="queued", errors=[],
                               error_count=0, uploaded_by=user, updated_at=timezone.now()))
            if not claimed:
                raise UploadRefused(f"dataset {dataset.name!r} is already importing; wait for it to finish.")
        else:
            if Dataset.objects.filter(name=meta["name"]).exists():
                raise UploadRefused(f"a dataset named {meta['name']!r} exists already; choose another name "
                                    "or upload a new version from its page.")
            dataset = Dataset.objects.create(
                name=meta["name"], kind=options.kind, description=meta.get("description", ""),
                status=Dataset.Status.QUEUED, progress_note="queued", uploaded_by=user,
                source_filename=" + ".join(f["filename"] for f in meta["files"])[:300])
        dataset.refresh_from_db()
        task_options = options.to_dict() | {"files": meta["files"]}
        directory = str(staged.directory)
        transaction.on_commit(lambda: celery_app.send_task(
            IMPORT_TASK, args=[dataset.pk, directory, task_options], queue="default"))
    return dataset


def dataset_import_staged(dataset_id: int, staged_path: str, options: dict[str, Any]) -> dict[str, Any]:
    """The Celery task's work: imports the staged files into the dataset, then removes them."""
    try:
        dataset = Dataset.objects.filter(pk=dataset_id).first()
        if dataset is None:
            return {"ok": False, "error": f"dataset {dataset_id} no longer exists"}
        sources = sources_in(staged_path, options["files"])
        missing = [s.filename for s in sources if not Path(s.path).exists()]
        if missing:
            result = _fail(dataset, [Problem("the uploaded file is gone from the staging folder; upload it again.",
                                             ", ".join(missing))], 1, time.monotonic())
        else:
            try:
                result = dataset_import(dataset, sources, ImportOptions.from_dict(options))
            except Exception:
                logger.exception("dataset %s: import crashed", dataset_id)
                _fail(dataset, [Problem("the import stopped on an unexpected error (see the worker log); "
                                        "nothing was changed.")], 1, time.monotonic())
                raise
        return {"ok": result.ok, "rows": result.rows, "problems": result.problem_count}
    finally:
        upload_discard(staged_path)


# --- deletion ------------------------------------------------------------------------------------
class DatasetInUse(Exception):
    """The dataset is used by tasks (and their runs); the message names them."""


def dataset_users(dataset: Dataset) -> list[str]:
    """What keeps `dataset` from being deleted: the tasks using it (as data or corpus) and their runs."""
    users = []
    tasks = _tasks_using(dataset).order_by("name").distinct()
    for task in tasks:
        role = "dataset" if task.dataset_id == dataset.pk else "retrieval corpus"
        runs = task.runs.count()
        used = f", with {runs} run{'s' if runs != 1 else ''}" if runs else ""
        users.append(f"task “{task.name}” (uses it as its {role}{used})")
    return users


def dataset_delete(dataset: Dataset) -> None:
    """Deletes the dataset and its rows; DatasetInUse (nothing deleted) while a task uses it."""
    users = dataset_users(dataset)
    if users:
        raise DatasetInUse(f"dataset {dataset.name!r} cannot be deleted: it is used by {'; '.join(users)}. "
                           "Delete or change those tasks first.")
    dataset.delete()
