"""Which dataset kind each program reads, and the kinds an admin can upload: the schemas of
`schemas.py` plus the generic ``fields:...`` kinds of the registered plugin programs."""

from __future__ import annotations

from typing import Any

from webapp.datasets.schemas import SCHEMAS, Schema, find_schema, generic_kind, generic_schema


def program_dataset_kind(info: dict[str, Any]) -> str | None:
    """The kind of dataset a program reads, from its `program_info`: its own `dataset_kind` when this
    module knows it; None when it generates its examples in code (the toy task); else the generic
    kind of its `example_fields` (a plugin program with no kind, or one Cohort does not know)."""
    kind = info.get("dataset_kind")
    if kind in SCHEMAS:
        return kind
    if not kind and info.get("generates_examples"):
        return None
    fields = info.get("example_fields") or ()
    return generic_kind(fields) if fields else kind


def upload_schemas() -> list[Schema]:
    """The kinds an admin can upload: every schema of `schemas.py`, then the generic kinds of the
    registered programs that read one (each naming its programs)."""
    from trainer.programs import list_programs  # loads the plugins: on first use, not at import

    readers: dict[str, list[str]] = {}
    for info in list_programs():
        kind = program_dataset_kind(info)
        if kind and kind not in SCHEMAS and find_schema(kind) is not None:
            readers.setdefault(kind, []).append(info["name"])
    return [*SCHEMAS.values(), *(generic_schema(kind, tuple(names)) for kind, names in readers.items())]
