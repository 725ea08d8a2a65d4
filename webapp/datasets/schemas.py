"""One declarative schema per dataset kind: which fields a record has, which are required, their types.

The field names are exactly what the matching program in `trainer/programs` reads from an example
dict (and where its default rewards find their gold values), so an imported dataset trains with no
translation step; `tests/webapp/datasets/test_schemas.py` checks that against the program registry.
Fields a schema does not name are kept as they are (e.g. HotpotQA's `context_titles`).

Every kind has an optional `id` (a string, or a whole number turned into one): unique within the
dataset; a record without one gets `line-<n>` (`dev-line-<n>` in a separate dev file).

Text formats (CSV) carry only strings, so for them a whole number may be written `7`, and a list or
object as JSON text (`["a", "b"]`); JSONL and Parquet values must already have the right type.

A program from a plugin that names none of these kinds but declares its `example_fields` reads a
*generic kind*, ``fields:<name>,<name>,...`` (`generic_kind`): each declared field is required and
any JSON value is accepted for it (CSV cells stay text), so an admin can upload rows for any plugin
program without code in Cohort. `webapp.datasets.kinds` says which kind a program reads.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ID_MAX_LENGTH = 200  # DatasetRow.ext_id
KIND_MAX_LENGTH = 200  # Dataset.kind


class FieldTypeError(ValueError):
    """A value of the wrong type; the message says what was expected."""


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the text {shown!r}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _from_json_text(value: Any, textual: bool) -> Any:
    """CSV cells hold lists and objects as JSON text: decode them (only for text formats)."""
    if textual and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # left as text; the type check below names what was expected
    return value


def check_string(value: Any, textual: bool) -> str:
    if not isinstance(value, str):
        raise FieldTypeError(f"expected text, got {_describe(value)}")
    return value


def check_int(value: Any, textual: bool) -> int:
    if textual and isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldTypeError(f"expected a whole number, got {_describe(value)}")
    return value


_NUMBER = re.compile(r"[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?|[-+]?\.\d+")


def check_numeric(value: Any, textual: bool) -> int | float | str:
    """A number, or text holding one (GSM8K stores its answers as text, e.g. "18" or "1,234")."""
    if isinstance(value, bool):
        raise FieldTypeError(f"expected a number, got {_describe(value)}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise FieldTypeError(f"expected a finite number, got {value!r}")
        return value
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return value.strip()
    raise FieldTypeError(f"expected a number (like 18 or \"-2.5\"), got {_describe(value)}")


def check_string_list(value: Any, textual: bool) -> list[str]:
    value = _from_json_text(value, textual)
    if not isinstance(value, list):
        raise FieldTypeError(f'expected a list of texts like ["a", "b"], got {_describe(value)}')
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise FieldTypeError(f"item {index} of the list: expected text, got {_describe(item)}")
    return value


def check_list(value: Any, textual: bool) -> list:
    value = _from_json_text(value, textual)
    if not isinstance(value, list):
        raise FieldTypeError(f"expected a list, got {_describe(value)}")
    return value


def check_int_list(value: Any, textual: bool) -> list[int]:
    value = check_list(value, textual)
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int):
            raise FieldTypeError(f"item {index} of the list: expected a whole number, got {_describe(item)}")
    return value


def object_list(*required_keys: str, object_keys: tuple[str, ...] = ()) -> Callable[[Any, bool], list[dict]]:
    """A checker for a list of JSON objects, each with `required_keys` (text) and `object_keys` (objects)."""

    def check(value: Any, textual: bool) -> list[dict]:
        value = check_list(value, textual)
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                raise FieldTypeError(f"item {index} of the list: expected an object, got {_describe(item)}")
            for key in required_keys:
                if not isinstance(item.get(key), str) or not item[key].strip():
                    raise FieldTypeError(f"item {index} of the list: needs a non-empty text {key!r}")
            for key in object_keys:
                if key in item and not isinstance(item[key], dict):
                    raise FieldTypeError(f"item {index} of the list: {key!r} must be an object, "
                                         f"got {_describe(item[key])}")
        return value

    return check


@dataclass(frozen=True)
class FieldSpec:
    """One field of a kind. `check(value, textual)` returns the stored value or raises FieldTypeError."""

    name: str
    type: str  # shown to people: "text", "whole number", "list of texts", ...
    check: Callable[[Any, bool], Any]
    required: bool = True
    help: str = ""
    nonempty: bool = False  # text a program prompts with: an empty one is an error, not a missing value

    def describe(self) -> str:
        return f"{self.name} ({self.type}, {'required' if self.required else 'optional'})"


def _text(name: str, help: str = "", required: bool = True, nonempty: bool = False) -> FieldSpec:
    return FieldSpec(name, "text", check_string, required, help, nonempty)


@dataclass(frozen=True)
class Schema:
    """The fields of one dataset kind and which programs read it."""

    kind: str
    title: str
    fields: tuple[FieldSpec, ...]
    programs: tuple[str, ...] = ()
    description: str = ""
    by_name: dict[str, FieldSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})

    @property
    def required(self) -> list[str]:
        return [f.name for f in self.fields if f.required]

    @property
    def optional(self) -> list[str]:
        return [f.name for f in self.fields if not f.required]

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]


SCHEMAS: dict[str, Schema] = {
    schema.kind: schema
    for schema in (
        Schema("classification", "Classification (text -> label)", (
            _text("text", "The input to classify (program banking77 prompts with it).", nonempty=True),
            _text("label", "The gold label name (reward label_match).", nonempty=True),
            FieldSpec("label_id", "whole number", check_int, False, "Index of the label in a label list."),
        ), programs=("banking77",)),
        Schema("qa", "Question answering", (
            _text("question", "The question (program search starts from it).", nonempty=True),
            _text("answer", "The gold answer (rewards token_f1, exact_match)."),
            FieldSpec("supporting_titles", "list of texts", check_string_list, False,
                      "Titles of the passages that support the answer (reward title_recall)."),
            FieldSpec("supporting_facts", "list", check_list, False, "[[title, sentence index], ...]"),
            FieldSpec("context_titles", "list of texts", check_string_list, False),
        ), programs=("search",), description="The search program also needs a retrieval corpus."),
        Schema("claim", "Claim verification (multi-hop)", (
            _text("claim", "The claim to verify (program hover starts from it).", nonempty=True),
            _text("label", "SUPPORTED or NOT_SUPPORTED (or any label set)."),
            FieldSpec("supporting_titles", "list of texts", check_string_list, True,
                      "Titles of the supporting passages (reward title_recall)."),
            FieldSpec("supporting_facts", "list", check_list, False, "[[title, sentence index], ...]"),
            FieldSpec("num_hops", "whole number", check_int, False),
        ), programs=("hover",), description="The hover program also needs a retrieval corpus."),
        Schema("toolcall", "Tool calling (ToolRL)", (
            _text("question", "The dialogue so far (program toolcall prompts with it).", nonempty=True),
            FieldSpec("tools", "list of tool objects", object_list("name"), True,
                      'Available tools: [{"name", "description", "parameters"}, ...].'),
            FieldSpec("gt_tool_calls", "list of call objects", object_list("name", object_keys=("parameters",)),
                      True, 'Gold calls: [{"name", "parameters": {...}}, ...]; [] when the answer is a response '
                      "(reward toolrl_correctness)."),
            _text("system", "System prompt listing the tools (a default one is used when absent).", False),
            _text("answer", "The full gold output string.", False),
            FieldSpec("gt_response", "text or null", check_string, False, "Gold <response> text, if any."),
        ), programs=("toolcall",)),
        Schema("math", "Math word problems", (
            _text("question", "The problem (program math prompts with it).", nonempty=True),
            FieldSpec("answer", "number", check_numeric, True,
                      'The final numeric answer, a number or text like "18" (reward numeric_match).'),
            _text("solution", "A worked solution.", False),
        ), programs=("math",)),
        Schema("privacy", "Privacy-conscious delegation (PUPA)", (
            _text("user_query", "The user's request, which contains private information.", nonempty=True),
            _text("target_response", "A reference response."),
            FieldSpec("pii_units", "list of texts", check_string_list, True,
                      "The private pieces of the query that must not leak."),
            _text("category", required=False),
            _text("redacted_query", required=False),
        ), description="No built-in program reads this kind yet."),
        Schema("corpus", "Retrieval corpus", (
            _text("title", "Passage title (what title_recall compares)."),
            _text("text", "Passage text (BM25 indexes title and text)."),
            FieldSpec("sent_starts", "list of whole numbers", check_int_list, False,
                      "Character offset of each sentence in text."),
        ), programs=("search", "hover"), description="Passages the search programs retrieve from."),
    )
}


GENERIC_PREFIX = "fields:"


def check_any(value: Any, textual: bool) -> Any:
    """A generic kind's field: any JSON value (what the program does with it is its own business)."""
    return value


def generic_kind(fields) -> str:
    """The generic kind of a program that reads `fields`: ``generic_kind(["question", "answer"]) ==
    "fields:question,answer"`` (the order is the program's)."""
    return GENERIC_PREFIX + ",".join(fields)


def generic_schema(kind: str, programs: tuple[str, ...] = ()) -> Schema:
    """The schema of generic kind `kind` (ValueError when `kind` is not one)."""
    names = kind.removeprefix(GENERIC_PREFIX).split(",") if kind.startswith(GENERIC_PREFIX) else []
    if not names or not all(n.strip() == n and n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"{kind!r} is not a generic kind: write fields:<name>,<name>,... with distinct names")
    if len(kind) > KIND_MAX_LENGTH:
        raise ValueError(f"generic kind {kind[:40]!r}... is longer than {KIND_MAX_LENGTH} characters")
    return Schema(kind, f"Fields {', '.join(names)}", tuple(
        FieldSpec(n, "any value", check_any, True, "Declared by the program's example_fields.") for n in names),
        programs=programs, description="Generic kind of a plugin program: every field it reads is required.")


def get_schema(kind: str) -> Schema:
    """The schema of `kind`: one of `SCHEMAS`, or a generic ``fields:...`` kind."""
    if kind in SCHEMAS:
        return SCHEMAS[kind]
    if isinstance(kind, str) and kind.startswith(GENERIC_PREFIX):
        return generic_schema(kind)
    raise ValueError(f"unknown dataset kind {kind!r}; known kinds: {', '.join(SCHEMAS)}, or "
                     f"{GENERIC_PREFIX}<field>,<field>,... for a plugin program")


def find_schema(kind: str) -> Schema | None:
    """`get_schema(kind)`, or None for a kind that is neither known nor generic."""
    try:
        return get_schema(kind)
    except ValueError:
        return None


@dataclass
class RecordProblem:
    """A problem with one field of a record (`field` None: the record as a whole)."""

    field: str | None
    message: str


_SURROGATE = re.compile("[\ud800-\udfff]")


def _unstorable(text: str) -> str | None:
    """Why PostgreSQL's jsonb could not store this JSON text (None when it can): NUL characters and
    unpaired surrogates (from undecodable bytes or escapes like \\ud800) are rejected by the database."""
    if "\\u0000" in text:
        return "contains a NUL character (\\u0000), which the database cannot store"
    if _SURROGATE.search(text):
        return "contains bytes that are not UTF-8 text (or an unpaired \\ud800-\\udfff escape)"
    return None


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def validate_record(schema: Schema, record: dict[str, Any], *, textual: bool = False,
                    default_id: str | None = None) -> tuple[dict[str, Any], str | None, list[RecordProblem], str]:
    """Checks one record (already renamed by the field mapping) against `schema`.

    Returns `(data, id, problems, text)`: `data` is what is stored (typed values, extra fields
    kept), `id` the record's id (its own, else `default_id`, which is then stored as `id` too, since
    the trainer names examples by it), `text` the JSON of `data` (empty when there are problems).
    `textual` (CSV): an empty cell is a missing value and typed values may be written as text.
    """
    problems: list[RecordProblem] = []
    data: dict[str, Any] = {}
    for key, value in record.items():
        if textual and value == "":
            continue  # an empty CSV cell is a missing value, not an empty string
        data[key] = value

    ext_id = None
    if "id" in data and data["id"] is not None:
        raw = data["id"]
        if isinstance(raw, bool) or not isinstance(raw, (str, int)):
            problems.append(RecordProblem("id", f"expected text or a whole number, got {_describe(raw)}"))
        elif not str(raw).strip():
            problems.append(RecordProblem("id", "is empty"))
        elif len(str(raw)) > ID_MAX_LENGTH:
            problems.append(RecordProblem("id", f"is longer than {ID_MAX_LENGTH} characters"))
        else:
            ext_id = str(raw)
            data["id"] = ext_id

    for spec in schema.fields:
        value = data.get(spec.name)
        if value is None:
            if spec.required:
                problems.append(RecordProblem(spec.name, f"missing (required {spec.type})"))
            continue
        try:
            data[spec.name] = spec.check(value, textual)
        except FieldTypeError as exc:
            problems.append(RecordProblem(spec.name, str(exc)))
            continue
        if spec.nonempty and not data[spec.name].strip():
            problems.append(RecordProblem(spec.name, f"is empty (required {spec.type}, the program's input)"))
    if problems:
        return data, ext_id, problems, ""
    if ext_id is None and default_id is not None:
        ext_id = data["id"] = default_id

    try:
        text = dump_json(data)
    except (TypeError, ValueError) as exc:  # NaN from a Parquet float column, an unknown type
        return data, ext_id, [RecordProblem(_first_bad_field(data), f"cannot be stored as JSON ({exc})")], ""
    reason = _unstorable(text)
    if reason:
        return data, ext_id, [RecordProblem(_first_bad_field(data), reason)], ""
    return data, ext_id, [], text


def _first_bad_field(data: dict[str, Any]) -> str | None:
    """The first field whose value (or name) cannot be stored, to name it in the error."""
    for key, value in data.items():
        try:
            if _unstorable(dump_json({key: value})) is None:
                continue
        except (TypeError, ValueError):
            pass
        return key
    return None
