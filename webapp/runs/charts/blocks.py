"""A run's step metrics column by column, so a chart of any length reads a few blocks, not every row.

The StepMetric rows (one JSON object per stored step) stay the source of truth. Beside them, every
`BLOCK_STEPS` consecutive steps of a run are kept as one `SeriesBlock`: the steps, their storage
times and one float64 column per metric key, in one binary value that numpy reads without parsing.
Reading a 75,000-step run's 56 series whole then means reading 293 blocks (numpy views over bytes)
instead of decoding 75,000 JSON objects in Python: 8 s before, well under a second with blocks
(benchmarks/run_data.py prints both beside a bare read of the rows).

A block holds what the rows of its steps say, with the rows' own rule: per key, the row with the
highest seq wins a step (a resumed attempt re-does the steps after its checkpoint). The two paths that
write or delete a run's rows keep its blocks, in their own transaction: the ingest writes a block once
the run has moved past it and rewrites any block a late or replacing row lands in (the block the run
is in, the live one, is never stored: it is read from its rows); a resume's discard of the steps after
its checkpoint deletes their blocks. A run stored before blocks existed is read from its rows until
`manage.py series_blocks` writes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from django.db import connection
from django.db.models import F, Q

from trainer.run.events import INT32_MAX
from webapp.json_keys import json_key
from webapp.runs.models import SeriesBlock, StepMetric

BLOCK_STEPS = 256  # steps per block: a live page re-reads at most this many rows of the block it is in
BLOCK_MAX = INT32_MAX  # SeriesBlock.block is a PositiveIntegerField
# The per-step metric whose running sum is "tokens seen" (trainer/run/loop.py reports it per step).
TOKENS_KEY = "completion_tokens"


@dataclass
class SeriesTable:
    """Steps (ascending) and, per key, each step's value: `present[k, i]` says whether step i has key
    k at all; where present, `values[k, i]` is NaN for a null (a gap in the chart)."""

    steps: np.ndarray  # (n,) int64
    created: np.ndarray  # (n,) float64, seconds since the epoch of the row that won the step
    keys: list[str]
    values: np.ndarray  # (len(keys), n) float64
    present: np.ndarray  # (len(keys), n) bool
    last_seq: int = 0

    @classmethod
    def empty(cls) -> SeriesTable:
        return cls(np.zeros(0, np.int64), np.zeros(0), [], np.zeros((0, 0)), np.zeros((0, 0), bool))

    def column(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(steps, values) where the key is present, or None when no step has it."""
        if key not in self.keys:
            return None
        row = self.keys.index(key)
        mask = self.present[row]
        return self.steps[mask], self.values[row, mask]

    def window(self, from_step: int | None, to_step: int | None) -> SeriesTable:
        lo = 0 if from_step is None else int(np.searchsorted(self.steps, from_step, side="left"))
        hi = self.steps.size if to_step is None else int(np.searchsorted(self.steps, to_step, side="right"))
        return SeriesTable(self.steps[lo:hi], self.created[lo:hi], self.keys, self.values[:, lo:hi],
                           self.present[:, lo:hi], self.last_seq)


def block_of(step: int) -> int:
    return int(step) // BLOCK_STEPS


def table_from_rows(rows: Iterable[tuple]) -> SeriesTable:
    """rows (seq, step, created_at, metrics dict) in seq order: per key, a later seq overwrites a step."""
    by_step: dict[int, tuple[float, dict]] = {}
    last_seq = 0
    for seq, step, created_at, metrics in rows:
        last_seq = max(last_seq, seq)
        merged = by_step[step][1] if step in by_step else {}
        merged.update(metrics)
        by_step[step] = (created_at.timestamp(), merged)
    steps = sorted(by_step)
    keys = sorted({k for _, metrics in by_step.values() for k in metrics})
    index = {k: i for i, k in enumerate(keys)}
    values = np.full((len(keys), len(steps)), np.nan)
    present = np.zeros((len(keys), len(steps)), bool)
    for col, step in enumerate(steps):
        for key, value in by_step[step][1].items():
            present[index[key], col] = True
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[index[key], col] = value  # None (NaN at the source) stays NaN: a gap
    created = np.asarray([by_step[s][0] for s in steps], dtype=float)
    with np.errstate(invalid="ignore"):
        values[~np.isfinite(values)] = np.nan
    return SeriesTable(np.asarray(steps, dtype=np.int64), created, keys, values, present, last_seq)


def concat_tables(tables: Sequence[SeriesTable]) -> SeriesTable:
    """Tables of disjoint step ranges, in step order, as one (the union of their keys)."""
    tables = [t for t in tables if t.steps.size]
    if not tables:
        return SeriesTable.empty()
    if len(tables) == 1:
        return tables[0]
    keys = sorted(set().union(*(t.keys for t in tables)))
    index = {k: i for i, k in enumerate(keys)}
    n = sum(t.steps.size for t in tables)
    values = np.full((len(keys), n), np.nan)
    present = np.zeros((len(keys), n), bool)
    at = 0
    for t in tables:
        rows = [index[k] for k in t.keys]
        values[rows, at:at + t.steps.size] = t.values
        present[rows, at:at + t.steps.size] = t.present
        at += t.steps.size
    return SeriesTable(np.concatenate([t.steps for t in tables]), np.concatenate([t.created for t in tables]),
                       keys, values, present, max(t.last_seq for t in tables))


# --- the stored form: one binary value per block -------------------------------------------------


def encode_block(table: SeriesTable) -> bytes:
    """steps (int64), created (float64), values (keys x steps, float64), present (packed bits)."""
    return b"".join([table.steps.astype("<i8").tobytes(), table.created.astype("<f8").tobytes(),
                     table.values.astype("<f8").tobytes(), np.packbits(table.present, axis=None).tobytes()])


def decode_block(keys: list[str], n: int, data: bytes, last_seq: int) -> SeriesTable:
    buffer = memoryview(data)
    k = len(keys)
    steps = np.frombuffer(buffer, "<i8", n, 0).astype(np.int64)
    created = np.frombuffer(buffer, "<f8", n, 8 * n)
    values = np.frombuffer(buffer, "<f8", k * n, 16 * n).reshape(k, n)
    bits = np.frombuffer(buffer, np.uint8, offset=16 * n + 8 * k * n)
    present = np.unpackbits(bits, count=k * n).astype(bool).reshape(k, n)
    return SeriesTable(steps, created, list(keys), values, present, last_seq)


# --- writing: the ingest's part -------------------------------------------------------------------


def _in_blocks(rows, blocks: Iterable[int]):
    """`rows` (StepMetric) narrowed to the steps of these blocks: one step range per run of consecutive
    blocks, so the (run, step) index answers it."""
    where = Q()
    runs = _block_runs(blocks)
    for first, last in runs:
        where |= Q(step__gte=first * BLOCK_STEPS, step__lt=(last + 1) * BLOCK_STEPS)
    return rows.filter(where) if runs else rows.none()


def _outside_blocks(blocks: Iterable[int]) -> Q:
    """The steps outside these blocks, as step ranges (the gaps between runs of consecutive blocks),
    so the rows a read still needs come through the (run, step) index without touching the others."""
    where, start = Q(), 0
    for first, last in _block_runs(blocks):
        if first * BLOCK_STEPS > start:
            where |= Q(step__gte=start, step__lt=first * BLOCK_STEPS)
        start = (last + 1) * BLOCK_STEPS
    return where | Q(step__gte=start)


def _block_runs(blocks: Iterable[int]) -> list[tuple[int, int]]:
    """Runs of consecutive blocks as (first, last), ascending."""
    runs: list[list[int]] = []
    for block in sorted(set(blocks)):
        if runs and runs[-1][1] == block - 1:
            runs[-1][1] = block
        else:
            runs.append([block, block])
    return [(first, last) for first, last in runs]


def _rows_of(run_id: int, blocks: Iterable[int], *, from_step: int | None = None, to_step: int | None = None):
    """The StepMetric rows of these blocks (within the step range), seq order, as table_from_rows reads them."""
    rows = _in_blocks(StepMetric.objects.filter(run_id=run_id), blocks)
    if from_step is not None:
        rows = rows.filter(step__gte=from_step)
    if to_step is not None:
        rows = rows.filter(step__lte=to_step)
    return rows.order_by("seq").values_list("seq", "step", "created_at", "metrics").iterator(chunk_size=2000)


def _stored_blocks(run_id: int, blocks: tuple[int, int | None] | None) -> list[tuple]:
    """(block, last_seq, rows, steps, keys, data) of the run's stored blocks (those from the first to
    the last of `blocks`, where given). On PostgreSQL in binary: its text form of bytea is hex, which
    took 6x longer to read (35 MB: 559 ms against 122)."""
    first, last = blocks if blocks is not None else (0, None)
    # The block column is a 32-bit integer: a step range past it (to_step=2**62 from a URL) bounds nothing.
    first = min(first, BLOCK_MAX)
    last = None if last is None or last >= BLOCK_MAX else last
    if connection.vendor != "postgresql":
        query = SeriesBlock.objects.filter(run_id=run_id, block__gte=first)
        if last is not None:
            query = query.filter(block__lte=last)
        return [(*row[:5], bytes(row[5]))
                for row in query.values_list("block", "last_seq", "rows", "steps", "keys", "data")]
    import psycopg

    table = connection.ops.quote_name(SeriesBlock._meta.db_table)
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(f"SELECT block, last_seq, rows, steps, keys::text, data FROM {table} "
                       "WHERE run_id = %s AND block >= %s AND (%s::integer IS NULL OR block <= %s)",
                       [run_id, first, last, last], binary=True)
        return [(block, last_seq, rows, steps, json.loads(keys), data)
                for block, last_seq, rows, steps, keys, data in cursor.fetchall()]


def blocks_after_ingest(run_id: int, steps: Sequence[int], *, live_step: int, previous_step: int) -> None:
    """Brings the blocks these newly stored `steps` touched up to date, in the caller's transaction.

    `live_step` is the step the run is at now (the newest stored row's), `previous_step` the one it
    was at before these rows: the live block is still being filled, so any stored copy of it is
    dropped; every other touched block, and the block the run has just left, is written from its rows.
    """
    live = block_of(live_step)
    SeriesBlock.objects.filter(run_id=run_id, block=live).delete()
    wanted = {block_of(s) for s in steps} | {block_of(previous_step)}
    wanted.discard(live)
    if wanted:
        blocks_write(run_id, wanted)


def blocks_discard_after(run_id: int, step: int) -> None:
    """The steps after `step` are being deleted (a resume's discard): their blocks go with them."""
    SeriesBlock.objects.filter(run_id=run_id, block__gte=block_of(step + 1)).delete()
    # The block holding `step` also holds steps after it: its stored copy is stale from here on.
    SeriesBlock.objects.filter(run_id=run_id, block=block_of(step)).delete()


def blocks_write(run_id: int, blocks: Iterable[int]) -> int:
    """(Re)writes these blocks of the run from their rows; returns how many were written."""
    blocks = sorted(set(blocks))
    per_block: dict[int, list[tuple]] = {}
    for row in _rows_of(run_id, blocks):
        per_block.setdefault(block_of(row[1]), []).append(row)
    SeriesBlock.objects.filter(run_id=run_id, block__in=blocks).delete()
    made = []
    for block, rows in per_block.items():
        table = table_from_rows(rows)
        made.append(SeriesBlock(run_id=run_id, block=block, last_seq=table.last_seq, rows=len(rows),
                                steps=table.steps.size, keys=table.keys, tokens=_tokens_sum(table),
                                data=encode_block(table)))
    SeriesBlock.objects.bulk_create(made)
    return len(made)


def _tokens_sum(table: SeriesTable) -> float | None:
    column = table.column(TOKENS_KEY)
    if column is None or not np.isfinite(column[1]).any():
        return None
    return float(np.nansum(column[1]))


def blocks_rebuild(run_id: int) -> int:
    """Every block of the run but the live one, written anew (a run stored before blocks existed)."""
    steps = StepMetric.objects.filter(run_id=run_id)
    newest = steps.order_by("-seq").values_list("step", flat=True).first()
    if newest is None:
        return 0
    blocks = set(steps.annotate(block=F("step") / BLOCK_STEPS).order_by().values_list("block", flat=True).distinct())
    blocks.discard(block_of(newest))
    return blocks_write(run_id, blocks) if blocks else 0


# --- reading -------------------------------------------------------------------------------------


def read_table(run_id: int, *, from_step: int | None = None, to_step: int | None = None) -> SeriesTable:
    """The run's metrics in [from_step, to_step] as one table: its stored blocks, and the rows
    themselves for the rest (the live block, a run stored before blocks existed)."""
    blocks = None
    if from_step is not None or to_step is not None:
        blocks = (block_of(from_step or 0), block_of(to_step) if to_step is not None else None)
    stored = {row[0]: row for row in _stored_blocks(run_id, blocks)}
    tables = {block: decode_block(keys, steps, data, last_seq)
              for block, last_seq, _rows, steps, keys, data in stored.values()}
    rows = StepMetric.objects.filter(run_id=run_id).filter(_outside_blocks(tables))
    if from_step is not None:
        rows = rows.filter(step__gte=from_step)
    if to_step is not None:
        rows = rows.filter(step__lte=to_step)
    rest = table_from_rows(rows.order_by("seq").values_list("seq", "step", "created_at", "metrics")
                           .iterator(chunk_size=2000))
    table = concat_tables(sorted([*tables.values(), rest], key=lambda t: int(t.steps[0]) if t.steps.size else 0))
    table = table.window(from_step, to_step)
    table.last_seq = max([rest.last_seq, *(t.last_seq for t in tables.values())])
    return table


def tokens_before(run_id: int, block: int) -> float | None:
    """The completion tokens of the run's steps before `block` (None when none reported any): the
    stored blocks' sums, and the rows of steps no stored block holds (the newest row of each step)."""
    stored = dict(SeriesBlock.objects.filter(run_id=run_id, block__lt=block).values_list("block", "tokens"))
    sums = [v for v in stored.values() if v is not None]
    rows = (StepMetric.objects.filter(run_id=run_id, step__lt=block * BLOCK_STEPS).filter(_outside_blocks(stored))
            .annotate(tokens=json_key("metrics", TOKENS_KEY)).order_by("seq").values_list("step", "tokens"))
    newest: dict[int, float | None] = {}
    for step, tokens in rows.iterator(chunk_size=5000):
        newest[step] = tokens if tokens is not None else newest.get(step)
    sums += [float(v) for v in newest.values() if isinstance(v, int | float) and np.isfinite(v)]
    return float(sum(sums)) if sums else None


def first_stored_at(run_id: int) -> float | None:
    """When the run's first row was stored (seconds since the epoch): the charts' wall-time origin."""
    first = StepMetric.objects.filter(run_id=run_id).order_by("seq").values_list("created_at", flat=True).first()
    return None if first is None else first.timestamp()
