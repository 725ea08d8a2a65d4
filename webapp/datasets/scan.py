"""Reading an upload: how to read it (`ImportOptions`), what can be wrong with it (`Problem`) and the
scan that reads and checks every record (step 1 of `services.dataset_import`).

Every record of every file is read, renamed by the field mapping, checked against the kind's schema
(`schemas.py`) and for duplicate ids; problems name file, line and field. Nothing here writes to the
database: progress goes to the caller's `on_progress`.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from webapp.datasets.models import DatasetRow
from webapp.datasets.readers import FileProblem, LineError, open_reader
from webapp.datasets.schemas import get_schema, validate_record

MAX_ERRORS = 50  # errors kept and shown; the total is counted to the end of the file
TRAIN_NAMES = frozenset({"train", "training"})
DEV_NAMES = frozenset({"dev", "validation", "valid", "val", "test", "eval", "evaluation"})
PROGRESS_EVERY_S = 0.5


def max_upload_bytes() -> int:
    return int(getattr(settings, "COHORT_DATASET_MAX_BYTES", 200 * 1024 * 1024))


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


# --- the scan --------------------------------------------------------------------------------------
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
