"""Streaming readers for uploaded files: JSON Lines, CSV and Parquet.

A reader yields `(line_number, record)` where `record` is a dict, or a `LineError` for a line that
cannot be read (bad bytes, bad JSON, wrong number of CSV values); reading goes on after a bad line
so an upload reports all its problems at once. Problems with the file as a whole (wrong extension,
empty file, not really Parquet) raise `FileProblem` before the first record.

Line numbers are what an editor shows: 1-based physical lines for JSONL; for CSV the line where the
record starts (the header is line 1, a quoted value may span lines); for Parquet the row index + 1.
`fraction_done()` tells how far through the file the reader is, for progress bars.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
BOM = b"\xef\xbb\xbf"
PARQUET_MAGIC = b"PAR1"

# Corpus passages are long; the csv module's default cell limit (128 KiB) would reject them. The
# upload size limit bounds a cell anyway.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class FileProblem(ValueError):
    """The file as a whole cannot be read (the message says why and what to do)."""


@dataclass(frozen=True)
class LineError:
    line: int
    message: str
    field: str | None = None


def file_format(filename: str) -> str:
    """'jsonl', 'csv' or 'parquet' from the file name; FileProblem for anything else."""
    suffix = Path(filename).suffix.lower()
    if suffix not in FORMATS:
        shown = suffix or "no extension"
        raise FileProblem(f"{filename}: unsupported file type ({shown}); upload a .jsonl, .csv or .parquet file.")
    return FORMATS[suffix]


def _sniff(path: Path, fmt: str, filename: str) -> None:
    """Refuses a file whose content does not match its extension, and an empty file."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if not head:
        raise FileProblem(f"{filename}: the file is empty.")
    if head.startswith(PARQUET_MAGIC) and fmt != "parquet":
        raise FileProblem(f"{filename}: this is a Parquet file but its name ends in {Path(filename).suffix}; "
                          "rename it to .parquet.")
    if head.startswith(b"\x1f\x8b"):
        raise FileProblem(f"{filename}: the file is gzip-compressed; upload it uncompressed.")
    if head.startswith(b"PK\x03\x04"):
        raise FileProblem(f"{filename}: this is a ZIP archive (or an Excel workbook); export it as CSV or JSONL.")
    if fmt == "parquet":
        if not head.startswith(PARQUET_MAGIC):
            raise FileProblem(f"{filename}: not a Parquet file (it does not start with 'PAR1'); "
                              "check the file or its extension.")
        return
    text = head.removeprefix(BOM).lstrip()
    if not text:
        raise FileProblem(f"{filename}: the file has only blank lines.")
    first = text[:1]
    if fmt == "jsonl" and first not in (b"{", b"["):
        line = text.split(b"\n", 1)[0][:40].decode("utf-8", "replace")
        hint = " Is it a CSV file? Rename it to .csv." if b"," in text.split(b"\n", 1)[0] else ""
        raise FileProblem(f"{filename}: does not look like JSON Lines (line 1 starts with {line!r}); "
                          f"each line must be a JSON object.{hint}")
    if fmt == "csv" and first == b"{":
        raise FileProblem(f"{filename}: looks like JSON Lines, not CSV; rename it to .jsonl.")


class Reader:
    """Base of the three readers: `for line, record in reader` and `fraction_done()`."""

    textual = False  # CSV: every value is text (schemas then accept typed values written as text)

    def __init__(self, path: str | Path, filename: str | None = None):
        self.path = Path(path)
        self.filename = filename or self.path.name
        self.size = self.path.stat().st_size
        self.bytes_read = 0
        self.records = 0
        self.columns: list[str] = []

    def fraction_done(self) -> float:
        return min(1.0, self.bytes_read / self.size) if self.size else 1.0

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any] | LineError]]:
        raise NotImplementedError


class JsonlReader(Reader):
    def __iter__(self):
        with open(self.path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                self.bytes_read += len(raw)
                if number == 1:
                    raw = raw.removeprefix(BOM)
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    yield number, LineError(number, f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                                                    f"column {exc.start + 1}); save the file as UTF-8")
                    continue
                try:
                    record = json.loads(text, parse_constant=_reject_constant)
                except json.JSONDecodeError as exc:
                    yield number, LineError(number, f"is not valid JSON: {exc.msg} (column {exc.colno})")
                    continue
                except ValueError as exc:
                    yield number, LineError(number, f"is not valid JSON: {exc}")
                    continue
                if not isinstance(record, dict):
                    yield number, LineError(number, f"must be a JSON object {{...}}, not a {_json_type(record)}")
                    continue
                for key in record:
                    if key not in self.columns:
                        self.columns.append(key)
                self.records += 1
                yield number, record


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON value (use null or a number)")


def _json_type(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__)


class CsvReader(Reader):
    """Comma-separated values with a header line; quoted values may span several lines."""

    textual = True

    def _lines(self, handle) -> Iterator[str]:
        for number, raw in enumerate(handle, start=1):
            self.bytes_read += len(raw)
            if number == 1:
                raw = raw.removeprefix(BOM)
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                # Undecodable bytes become lone surrogates; the record that holds them is reported
                # (line and column) instead of stopping the whole file at the first bad byte.
                self._bad_lines.add(number)
                yield raw.decode("utf-8", "surrogateescape")

    def __iter__(self):
        self._bad_lines: set[int] = set()
        with open(self.path, "rb") as handle:
            reader = csv.reader(self._lines(handle), strict=True)
            start = 1
            try:
                header = next(reader)
            except StopIteration:
                raise FileProblem(f"{self.filename}: the file is empty.") from None
            except csv.Error as exc:
                raise FileProblem(f"{self.filename}, line 1 (the header): {exc}") from None
            header = [name.strip() for name in header]
            self._check_header(header)
            self.columns = header
            while True:
                start = reader.line_num + 1
                try:
                    values = next(reader)
                except StopIteration:
                    break
                except csv.Error as exc:
                    yield start, LineError(start, f"is not valid CSV: {exc}")
                    return  # the parser's state is unknown after this; the rest cannot be trusted
                if not values or values == [""]:
                    continue  # a blank line
                if self._bad_lines and any(start <= n <= reader.line_num for n in self._bad_lines):
                    yield start, self._decode_error(start, header, values)
                    continue
                if len(values) != len(header):
                    yield start, LineError(start, f"has {len(values)} values but the header has "
                                                  f"{len(header)} columns")
                    continue
                self.records += 1
                yield start, dict(zip(header, values, strict=True))

    @staticmethod
    def _decode_error(line: int, header: list[str], values: list[str]) -> LineError:
        for index, value in enumerate(values):
            bad = _undecodable(value)
            if bad is not None:
                column = header[index] if index < len(header) else f"column {index + 1}"
                return LineError(line, f"is not UTF-8 text (byte 0x{bad:02x}); save the file as UTF-8", column)
        return LineError(line, "is not UTF-8 text; save the file as UTF-8")

    def _check_header(self, header: list[str]) -> None:
        for index, name in enumerate(header, start=1):
            if not name:
                raise FileProblem(f"{self.filename}, line 1: column {index} of the header has no name.")
            bad = _undecodable(name)
            if bad is not None:
                raise FileProblem(f"{self.filename}, line 1: the header is not UTF-8 text (byte 0x{bad:02x}).")
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise FileProblem(f"{self.filename}, line 1: repeated column names in the header: {', '.join(repeated)}.")


def _undecodable(text: str) -> int | None:
    """The first byte that was not UTF-8 (decoded with surrogateescape), or None."""
    for char in text:
        if "\udc80" <= char <= "\udcff":
            return ord(char) - 0xDC00
    return None


class ParquetReader(Reader):
    """Row groups are read in batches; nested columns come back as lists and dicts."""

    batch_size = 2000

    def __iter__(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as exc:
            raise FileProblem(f"{self.filename}: not a readable Parquet file ({exc}).") from None
        total = parquet.metadata.num_rows
        self.columns = list(parquet.schema_arrow.names)
        if total == 0:
            raise FileProblem(f"{self.filename}: the file has no rows.")
        number = 0
        try:
            for batch in parquet.iter_batches(batch_size=self.batch_size):
                for record in batch.to_pylist():
                    number += 1
                    self.bytes_read = self.size * number // total
                    self.records += 1
                    yield number, {key: _plain(value) for key, value in record.items()}
        except pa.ArrowException as exc:
            yield number + 1, LineError(number + 1, f"cannot be read: {exc}")


def _plain(value: Any) -> Any:
    """Parquet values as JSON values: NaN is a missing value (pandas writes missing numbers so),
    dates and decimals become text and numbers."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("utf-8", "surrogateescape")  # reported as not UTF-8 by the schema check
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


READERS = {"jsonl": JsonlReader, "csv": CsvReader, "parquet": ParquetReader}


def open_reader(path: str | Path, filename: str | None = None) -> Reader:
    """The reader for a file, chosen by its (original) name; FileProblem if the type is wrong or the
    content does not match it, or the file is empty."""
    filename = filename or Path(path).name
    fmt = file_format(filename)
    _sniff(Path(path), fmt, filename)
    return READERS[fmt](path, filename)
