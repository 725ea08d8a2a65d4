"""The admin's preview of an upload: its first rows mapped to the kind's schema, with their problems,
before anything is imported."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from webapp.datasets.readers import FileProblem, open_reader
from webapp.datasets.scan import ImportOptions, Problem, SourceFile, scan_sources
from webapp.datasets.schemas import get_schema

PREVIEW_ROWS = 10


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
