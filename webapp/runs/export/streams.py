"""Whole-run exports, streamed in constant memory: step metrics as CSV, rollouts (with their module
calls) as JSON Lines; under a retention setting the rollouts export begins with one
`{"type": "retention", ...}` line listing the steps whose rollouts were dropped.

Rows come from `QuerySet.iterator(chunk_size)`: server-side cursors on PostgreSQL, `fetchmany` on
SQLite, so the web process never holds more than a chunk, and the number of queries does not depend
on the number of rows (the metric keys, the rollouts and the calls are one query each).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from webapp.runs.access import anonymized
from webapp.runs.charts.series import metric_keys
from webapp.runs.ingest.retention import Retention, steps_without_rollouts
from webapp.runs.ingest.texts import decode_texts
from webapp.runs.ingest.tokens import decode_tokens
from webapp.runs.models import CallText, ModuleCall, Rollout, Run, StepMetric

CHUNK_ROWS = 500  # rows per server-side fetch and per streamed piece
ROLLOUTS_PER_PIECE = 100  # a rollout carries its calls' prompts (kilobytes each): smaller pieces
CSV_FIXED = ["seq", "attempt", "step", "created_at"]


def metrics_csv(run: Run) -> Iterator[str]:
    """`seq,attempt,step,created_at,<every metric key...>`, one line per stored step, in seq order."""
    keys = metric_keys([run])
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIXED + keys)
    rows = (StepMetric.objects.filter(run=run).order_by("seq")
            .values_list("seq", "attempt", "step", "created_at", "metrics").iterator(chunk_size=CHUNK_ROWS))
    for n, (seq, attempt, step, created_at, metrics) in enumerate(rows, start=1):
        writer.writerow([seq, attempt, step, created_at.isoformat()] + [_csv_value(metrics.get(k)) for k in keys])
        if n % CHUNK_ROWS == 0:
            yield _drain(buffer)
    yield _drain(buffer)


def _csv_value(value) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


CALL_FIELDS = ("rollout_id", "position", "module", "invocation_index", "prompt", "messages", "completion", "parsed_ok",
               "specific_reward", "propagated_reward", "advantage")
ROLLOUT_FIELDS = ("id", "attempt", "step", "index", "example_id", "parent_id", "teacher", "fork_point", "sampling",
                  "final_output", "reward_components", "total_reward", "failed", "error")


class _TextStream:
    """A run's CallText rows read alongside the rollouts: both are in storage order (ids grow as steps
    are stored, and a step's texts follow its rollouts'), so the texts a rollout needs are at most a
    step ahead; those of steps already passed are dropped, keeping memory at one step's texts."""

    def __init__(self, run: Run):
        self.rows = (CallText.objects.filter(run=run).order_by("pk")
                     .values_list("attempt", "step", "example_id", "data", "tokens").iterator(chunk_size=CHUNK_ROWS // 10))
        self.raw: dict[tuple, tuple[bytes, bytes | None]] = {}
        self.decoded: dict[tuple, dict] = {}
        self.decoded_tokens: dict[tuple, dict] = {}
        self.current: tuple | None = None

    def texts(self, attempt: int, step: int, example_id: str) -> dict:
        key = (attempt, step, example_id)
        if key[:2] != self.current:  # the rollouts moved on to another step: its texts are done with
            for done in [k for k in self.raw if k[:2] == self.current]:
                self.raw.pop(done)
                self.decoded.pop(done, None)
                self.decoded_tokens.pop(done, None)
            self.current = key[:2]
        while key not in self.raw:
            row = next(self.rows, None)
            if row is None:
                return {}
            self.raw[row[:3]] = row[3:]
        if key not in self.decoded:
            self.decoded[key] = decode_texts(self.raw[key][0])
        return self.decoded[key]

    def tokens(self, attempt: int, step: int, example_id: str) -> dict:
        """{(rollout index, position): CallTokens} of the example's calls (after `texts` of the same key)."""
        key = (attempt, step, example_id)
        blob = self.raw.get(key, (None, None))[1]
        if blob is None:
            return {}
        if key not in self.decoded_tokens:
            completions = {place: completion for place, (_, _, completion) in self.decoded[key].items()}
            self.decoded_tokens[key] = decode_tokens(blob, completions)
        return self.decoded_tokens[key]


def rollouts_jsonl(run: Run, *, anonymous: bool = False) -> Iterator[str]:
    """One JSON object per rollout, with its calls in order, in storage order (ids increase in the
    order steps were stored). Two cursors read side by side: rollouts by id, calls by (rollout, position).
    `anonymous` (an anonymous share link): each rollout's error without paths, worker or owner names."""
    rollouts = Rollout.objects.filter(run=run).order_by("pk").values_list(*ROLLOUT_FIELDS).iterator(chunk_size=CHUNK_ROWS)
    calls = (ModuleCall.objects.filter(rollout__run=run).order_by("rollout_id", "position")
             .values_list(*CALL_FIELDS).iterator(chunk_size=CHUNK_ROWS * 10))
    pending = next(calls, None)
    texts = _TextStream(run)
    lines: list[str] = []
    retention = Retention.of(run)
    if retention.active:  # a first line (only then) that tells a reader which steps have no rollouts
        lines.append(json.dumps({"type": "retention", "keep_rollouts_last_steps": retention.last_steps,
                                 "keep_rollouts_every": retention.every,
                                 "steps_without_rollouts": steps_without_rollouts(run)}))
    for values in rollouts:
        rollout = dict(zip(ROLLOUT_FIELDS, values, strict=True))
        own = []
        # Calls are sorted by rollout id like the rollouts, so this rollout's calls come next.
        while pending is not None and pending[0] <= rollout["id"]:
            if pending[0] == rollout["id"]:
                call = dict(zip(CALL_FIELDS[1:], pending[1:], strict=True))
                if call["completion"] is None:  # stored with its example's texts
                    prompt, messages, completion = texts.texts(
                        rollout["attempt"], rollout["step"], rollout["example_id"]).get(
                        (rollout["index"], call["position"]), ("", None, ""))
                    call.update(prompt=prompt, messages=messages, completion=completion)
                    details = texts.tokens(rollout["attempt"], rollout["step"], rollout["example_id"]).get(
                        (rollout["index"], call["position"]))
                    if details is not None:
                        call["tokens"] = details.to_contract()
                own.append(call)
            pending = next(calls, None)
        rollout["calls"] = own
        if anonymous and rollout["error"]:
            rollout["error"] = anonymized(rollout["error"], run)
        lines.append(json.dumps(rollout, ensure_ascii=False, allow_nan=False))
        if len(lines) >= ROLLOUTS_PER_PIECE:
            yield "\n".join(lines) + "\n"
            lines = []
    if lines:
        yield "\n".join(lines) + "\n"
