"""Dataset uploads: preview, validation and the atomic import (DESIGN.md "Data model").

The admin, the Celery task and `manage.py import_dataset` all go through `dataset_import`:

1. *scan*: every record of every file is read, renamed by the field mapping, checked against the
   kind's schema (`schemas.py`) and for duplicate ids; problems name file, line and field. Progress
   is written to the Dataset row as it goes (outside any transaction, so the page sees it).
2. *write*, only when the scan found no problem: in one transaction the old rows are deleted and
   the new ones inserted (COPY on PostgreSQL, a batched INSERT elsewhere), then the counts updated.
   Readers see the previous version until the commit; any failure rolls everything back, so a
   dataset is never half-imported and a failed re-upload leaves the previous version untouched.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from webapp.datasets.models import Dataset, DatasetRow
from webapp.datasets.readers import FileProblem, LineError, open_reader
from webapp.datasets.schemas import get_schema, validate_record
from webapp.paths import VAR_DIR

logger = logging.getLogger(__name__)

MAX_ERRORS = 50  # errors kept and shown; the total is counted to the end of the file
PREVIEW_ROWS = 10
IMPORT_TASK = "workers.tasks.import_dataset_task"
TRAIN_NAMES = frozenset({"train", "training"})
DEV_NAMES = frozenset({"dev", "validation", "valid", "val", "test", "eval", "evaluation"})
PROGRESS_EVERY_S = 0.5
STALE_UPLOAD_S = 24 * 3600


def max_upload_bytes() -> int:
    return int(getattr(settings, "COHORT_DATASET_MAX_BYTES", 200 * 1024 * 1024))


def upload_dir() -> Path:
    """Where uploads wait between preview and import: under the var dir, never in the repository."""
    return Path(getattr(settings, "COHORT_DATASET_UPLOAD_DIR", None) or VAR_DIR / "dataset-uploads")


# --- options and problems --------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceFile:
    """One file of an upload. `split`: "auto" (decided by the split options) or "dev" (all rows)."""

    path: str
    filename: str
    split: str = "auto"


@dataclass
class ImportOptions:
    """How to read an upload: its kind, renamed columns, and how rows are split into train/dev.

    Split: by `split_field` (values train/training or dev/validation/val/test/eval), or a seeded
    random `dev_ratio` of the rows, or neither (all train; a separate dev file is always dev).
    """

    kind: str
    mapping: dict[str, str] = field(default_factory=dict)
    split_field: str | None = None
    dev_ratio: float = 0.0
    seed: int = 0

    def __post_init__(self):
        get_schema(self.kind)  # ValueError naming the known kinds
        self.mapping = {str(k).strip(): str(v).strip() for k, v in (self.mapping or {}).items()}
        for source, target in self.mapping.items():
            if not source or not target:
                raise ValueError(f"field mapping: {source or '?'} -> {target or '?'} needs both names, "
                                 "written as source=target.")
        targets = list(self.mapping.values())
        repeated = sorted({t for t in targets if targets.count(t) > 1})
        if repeated:
            raise ValueError(f"field mapping: several columns are mapped to {', '.join(repeated)}.")
        self.split_field = (self.split_field or "").strip() or None
        try:
            self.dev_ratio = float(self.dev_ratio or 0.0)
            self.seed = int(self.seed or 0)
        except (TypeError, ValueError):
            raise ValueError("dev ratio must be a number in [0, 1) and seed a whole number.") from None
        if not 0.0 <= self.dev_ratio < 1.0:
            raise ValueError(f"dev ratio must be at least 0 and below 1 (e.g. 0.1), not {self.dev_ratio}.")
        if self.split_field and self.dev_ratio:
            raise ValueError("split either by a field or by a ratio, not both.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImportOptions:
        known = {"kind", "mapping", "split_field", "dev_ratio", "seed"}
        return cls(**{k: v for k, v in data.items() if k in known})


def parse_mapping(text: str | Iterable[str]) -> dict[str, str]:
    """`"src=dst, other=name"` (or one pair per line, or a list of pairs) -> {src: dst}."""
    pairs = re.split(r"[,\n]", text) if isinstance(text, str) else list(text)
    mapping = {}
    for pair in pairs:
        pair = pair.strip()
        if not pair:
            continue
        if "=" not in pair:
            raise ValueError(f"field mapping: {pair!r} is not source=target (e.g. utterance=text).")
        source, target = (part.strip() for part in pair.split("=", 1))
        if source in mapping:
            raise ValueError(f"field mapping: column {source!r} is mapped twice.")
        mapping[source] = target
    return mapping


@dataclass(frozen=True)
class Problem:
    """One reason an upload cannot be imported; `line` None: the file as a whole."""

    message: str
    file: str = ""
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = ", ".join(p for p in (self.file, f"line {self.line}" if self.line else "",
                                      f"field {self.field!r}" if self.field else "") if p)
        return f"{where}: {self.message}" if where else self.message

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message,
                "text": str(self)}


@dataclass
class Scan:
    """What a scan found: rows ready to store `(part, line, split, id, json)`, and problems."""

    rows: list[tuple[int, int, str | None, str, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0

    def add(self, problem: Problem) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_ERRORS:
            self.problems.append(problem)
        self.rows.clear()  # nothing will be stored: do not hold rows in memory

    @property
    def ok(self) -> bool:
        return self.problem_count == 0


def _split_of(value: Any) -> str | None:
    name = str(value).strip().lower() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if name in TRAIN_NAMES:
        return DatasetRow.Split.TRAIN
    if name in DEV_NAMES:
        return DatasetRow.Split.DEV
    return None


def _mapped(record: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    if not mapping:
        return record
    out = {}
    for key, value in record.items():
        target = mapping.get(key, key)
        # A mapped column wins over an unmapped one of the same name (e.g. both `text` and `utterance=text`).
        if target in out and key not in mapping:
            continue
        out[target] = value
    return out


def scan_sources(sources: list[SourceFile], options: ImportOptions, *, max_bytes: int | None = None,
                 limit: int | None = None, on_progress: Callable[[float, str], None] | None = None,
                 preview: list | None = None) -> Scan:
    """Reads and checks every record of `sources`; see the module docstring.

    `limit` stops after that many records per file (the preview); `preview`, when a list, receives
    `{"file", "line", "data", "problems"}` for each record read.
    """
    schema = get_schema(options.kind)
    scan = Scan()
    max_bytes = max_upload_bytes() if max_bytes is None else max_bytes
    sizes = [Path(s.path).stat().st_size for s in sources]
    if sum(sizes) > max_bytes:
        scan.add(Problem(f"the upload is {_mb(sum(sizes))}, over the limit of {_mb(max_bytes)} "
                         "(COHORT_DATASET_MAX_BYTES).", " + ".join(s.filename for s in sources)))
        return scan
    seen_ids: dict[str, tuple[str, int]] = {}
    done_bytes, last_report = 0, time.monotonic()
    for part, (source, size) in enumerate(zip(sources, sizes, strict=True)):
        prefix = "dev-" if part else ""
        try:
            reader = open_reader(source.path, source.filename)
            for count, (line, item) in enumerate(reader, start=1):
                if isinstance(item, LineError):
                    scan.add(Problem(item.message, source.filename, item.line, item.field))
                    continue
                data, ext_id, problems, text = validate_record(
                    schema, _mapped(item, options.mapping), textual=reader.textual,
                    default_id=f"{prefix}line-{line}")
                split = DatasetRow.Split.DEV if source.split == "dev" else None
                if not problems and source.split != "dev" and options.split_field:
                    split = _split_of(data.get(options.split_field))
                    if split is None:
                        problems.append(_split_problem(options.split_field, data.get(options.split_field)))
                if not problems and ext_id in seen_ids:
                    first_file, first_line = seen_ids[ext_id]
                    where = f"line {first_line}" + (f" of {first_file}" if first_file != source.filename else "")
                    problems.append(_problem_of_id(ext_id, where))
                for problem in problems:
                    scan.add(Problem(problem.message, source.filename, line, problem.field))
                if preview is not None:
                    preview.append({"file": source.filename, "line": line, "data": data,
                                    "problems": [p.message if p.field is None else f"{p.field}: {p.message}"
                                                 for p in problems]})
                if not problems:
                    seen_ids[ext_id] = (source.filename, line)
                    if scan.ok:
                        scan.rows.append((part, line, split, ext_id, text))
                if limit is not None and count >= limit:
                    break
                if on_progress and time.monotonic() - last_report >= PROGRESS_EVERY_S:
                    last_report = time.monotonic()
                    fraction = (done_bytes + reader.fraction_done() * size) / max(1, sum(sizes))
                    on_progress(fraction, f"checked {len(seen_ids):,} rows of {source.filename}")
        except FileProblem as exc:
            scan.add(Problem(str(exc).removeprefix(f"{source.filename}: "), source.filename))
        done_bytes += size
    if scan.ok and not scan.rows and limit is None:
        scan.add(Problem("no rows to import.", " + ".join(s.filename for s in sources)))
    if scan.ok and limit is None:
        _assign_ratio_split(scan.rows, options)
    return scan


def _split_problem(name: str, value: Any):
    from webapp.datasets.schemas import RecordProblem

    shown = "missing" if value is None else f"{value!r}"
    return RecordProblem(name, f"split field must say train or dev (also: training, validation, val, test, "
                               f"eval), got {shown}")


def _problem_of_id(ext_id: str, where: str):
    from webapp.datasets.schemas import RecordProblem

    return RecordProblem("id", f"duplicate id {ext_id!r} (first seen on {where})")


def _assign_ratio_split(rows: list, options: ImportOptions) -> None:
    """Rows whose split is still open: a seeded sample of exactly round(n * dev_ratio) becomes dev."""
    open_rows = [i for i, row in enumerate(rows) if row[2] is None]
    n_dev = round(len(open_rows) * options.dev_ratio)
    dev = set(random.Random(options.seed).sample(open_rows, n_dev)) if n_dev else set()
    for i in open_rows:
        part, line, _, ext_id, text = rows[i]
        rows[i] = (part, line, DatasetRow.Split.DEV if i in dev else DatasetRow.Split.TRAIN, ext_id, text)


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


# --- preview -------------------------------------------------------------------------------------
@dataclass
class Preview:
    fields: list[str]
    columns: list[str]
    rows: list[dict[str, Any]]
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems


def dataset_preview(sources: list[SourceFile], options: ImportOptions, *, rows: int = PREVIEW_ROWS) -> Preview:
    """The first `rows` records of each file mapped to the schema, with their problems, and the
    problems of the files themselves (type, emptiness, a mapped column that is not there)."""
    schema = get_schema(options.kind)
    shown: list[dict[str, Any]] = []
    scan = scan_sources(sources, options, limit=rows, preview=shown)
    columns: list[str] = []
    for source in sources:
        try:
            reader = open_reader(source.path, source.filename)
            for _ in zip(range(rows), reader, strict=False):
                pass
            columns += [c for c in reader.columns if c not in columns]
        except FileProblem:
            pass
    problems = list(scan.problems)
    if columns:
        for source_column in options.mapping:
            if source_column not in columns:
                problems.append(Problem(f"field mapping names column {source_column!r}, which the file does "
                                        f"not have (columns: {', '.join(columns)})."))
    extra = [c for c in (options.mapping.get(c, c) for c in columns) if c not in schema.field_names and c != "id"]
    for row in shown:
        row["cells"] = [_cell(row["data"].get(name)) for name in ["id", *schema.field_names, *extra]]
    return Preview(["id", *schema.field_names, *extra], columns, shown, problems)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else "" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 160 else text[:157] + "..."


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
        train, dev = _replace_rows(dataset, scan.rows)
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


def _used_by_tasks(dataset: Dataset) -> bool:
    from webapp.runs.models import Task

    return Task.objects.filter(Q(dataset=dataset) | Q(corpus=dataset)).exists()


def _replace_rows(dataset: Dataset, rows: list[tuple[int, int, str, str, str]]) -> tuple[int, int]:
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


_COLUMNS = ("dataset_id", "part", "line_number", "split", "ext_id", "data")


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


# --- staged uploads (admin) ------------------------------------------------------------------------
@dataclass
class StagedUpload:
    """An upload waiting for its preview to be confirmed: files under `upload_dir()/<token>/`."""

    token: str
    directory: Path
    manifest: dict[str, Any]

    @property
    def options(self) -> ImportOptions:
        return ImportOptions.from_dict(self.manifest["options"])

    @property
    def sources(self) -> list[SourceFile]:
        return sources_in(self.directory, self.manifest["files"])


def sources_in(directory: str | Path, files: list[dict[str, str]]) -> list[SourceFile]:
    return [SourceFile(str(Path(directory) / f["stored"]), f["filename"], f["split"]) for f in files]


def _safe_name(filename: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(filename).name)[-100:]
    return name.lstrip(".") or "upload"


def upload_stage(files: list[tuple[Any, str]], options: ImportOptions, meta: dict[str, Any]) -> StagedUpload:
    """Saves uploaded files (`(UploadedFile, split)` pairs) under a new token with a manifest."""
    _remove_stale_uploads()
    token = uuid.uuid4().hex
    directory = upload_dir() / token
    directory.mkdir(parents=True)
    entries = []
    for index, (upload, split) in enumerate(files):
        stored = f"{index}-{_safe_name(upload.name)}"
        with open(directory / stored, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
        entries.append({"filename": Path(upload.name).name, "stored": stored, "split": split})
    manifest = {"options": options.to_dict(), "files": entries, **meta}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return StagedUpload(token, directory, manifest)


def upload_get(token: str) -> StagedUpload | None:
    if not re.fullmatch(r"[0-9a-f]{32}", token or ""):
        return None
    directory = upload_dir() / token
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return StagedUpload(token, directory, manifest)


def upload_discard(directory: str | Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def _remove_stale_uploads() -> None:
    """Previews that were never confirmed are dropped after a day."""
    root = upload_dir()
    if not root.exists():
        return
    cutoff = time.time() - STALE_UPLOAD_S
    for entry in root.iterdir():
        try:
            if entry.is_dir() and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


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
    from webapp.runs.models import Task

    users = []
    tasks = Task.objects.filter(Q(dataset=dataset) | Q(corpus=dataset)).order_by("name").distinct()
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
