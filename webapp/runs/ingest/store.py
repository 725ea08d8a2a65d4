"""Storing a run's step events (the trainer's event log) in the database.

`step_events_ingest` is idempotent: a step already stored for (run, attempt, step) is skipped, so
the worker can re-ship its whole log after a database outage and nothing is stored twice. All of a
call's rows are written in one transaction, under a row lock on the run so `seq` numbers stay dense
and increasing, and never one statement per row:

- PostgreSQL: ids are reserved from the tables' sequences first, so every foreign key (a call's
  rollout, a fork's parent, a member's group and call) is known before anything is written, and
  each table is one `COPY ... FROM STDIN`. An MHGPO-scale step (16k rows, 15 MB of prompts) goes in
  within 2x of a bare COPY of the same rows (benchmarks/ingest.py); INSERT statements took 4-5x.
- Other databases (SQLite, the embedded default): `bulk_create`, one table after the other.

Both write the same rows, built once by `StepRows` from the events.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.db import connection, models, transaction

from trainer.run import events as contract
from webapp.nul_guard import nul_replaced
from webapp.runs.charts.blocks import blocks_after_ingest
from webapp.runs.ingest.retention import retention_apply, storage_add
from webapp.runs.ingest.texts import encode_texts
from webapp.runs.ingest.tokens import encode_tokens
from webapp.runs.live.notices import step_notices_send
from webapp.runs.models import (
    CallText,
    Group,
    GroupMember,
    ModuleCall,
    Rollout,
    Run,
    StepMetric,
    steps_stored,
)

BATCH_SIZE = 2000
REWARD_KEY = "reward/mean"  # trainer.run.loop's training reward; best, last reward of the runs table
EVAL_REWARD_KEY = "eval/reward/mean"  # trainer.run.loop.Trainer.evaluate


def _clean_metrics(metrics: dict[str, Any]) -> dict[str, float | None]:
    """JSON has no NaN: unknown values are stored as null."""
    return {nul_replaced(str(k)): contract.finite_or_none(v) for k, v in metrics.items() if isinstance(v, int | float) or v is None}


def step_events_ingest(run: Run, events: Iterable[dict[str, Any]]) -> list[StepMetric]:
    """Stores the step events (trainer/run/events.py `StepEvent`) not yet stored; returns the new
    StepMetric rows (seq order). A step past the contract's bound is a ValueError: no column holds it."""
    events = [e for e in events if e.get("type", "step") == "step"]
    for event in events:
        if not contract.step_in_bounds(event.get("step")):
            raise ValueError(f"a step event's step must be a whole number from 0 to {contract.MAX_STEP:,}, "
                             f"not {event.get('step')!r:.40}")
    if not events:
        return []
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        fresh = _fresh_events(locked, events)
        if not fresh:
            return []
        seq = locked.last_seq
        metrics = []
        for event in fresh:
            seq += 1
            metrics.append(StepMetric(run=locked, attempt=int(event["attempt"]), step=int(event["step"]), seq=seq,
                                      metrics=_clean_metrics(event.get("metrics", {})),
                                      spans=_clean_spans(event.get("spans"))))
        StepMetric.objects.bulk_create(metrics, batch_size=BATCH_SIZE)
        rows = StepRows()
        for event in fresh:
            rows.add_step(locked.pk, event)
        _write(rows)
        storage_add(locked.pk, [m.step for m in metrics], [m.seq for m in metrics])
        blocks_after_ingest(locked.pk, [m.step for m in metrics], live_step=metrics[-1].step,
                            previous_step=locked.current_step)
        last = fresh[-1]
        rewards = [m.metrics.get(REWARD_KEY) for m in metrics if m.metrics.get(REWARD_KEY) is not None]
        best = max([locked.best_reward, *rewards], key=lambda v: -math.inf if v is None else v) if rewards else locked.best_reward
        Run.objects.filter(pk=locked.pk).update(
            last_seq=seq, current_step=max(locked.current_step, int(last["step"])), best_reward=best,
            last_reward=_newest(metrics, REWARD_KEY, locked.last_reward),
            last_eval_reward=_newest(metrics, EVAL_REWARD_KEY, locked.last_eval_reward))
        retention_apply(locked)  # in the same transaction: no reader sees rows the config drops
        # Listeners (alert rules) read the committed rows; robust: a listener's error never fails the ingest.
        # The one moment a step is stored: its pages hear it and the apps (alerts, sweeps) are told,
        # on the same commit, whoever called (the worker's supervisor, the logging API).
        transaction.on_commit(partial(step_notices_send, run.pk, metrics), robust=True)
        transaction.on_commit(lambda: steps_stored.send(sender=Run, run=locked, rows=metrics), robust=True)
    return metrics


def _newest(metrics: list[StepMetric], key: str, stored: float | None) -> float | None:
    """The value of `key` in the newest of these steps that has one; `stored` when none has (an
    evaluation runs every eval_every steps, so most steps carry no eval reward)."""
    for metric in reversed(metrics):
        if metric.metrics.get(key) is not None:
            return metric.metrics[key]
    return stored


def _fresh_events(run: Run, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events whose (attempt, step) is not stored yet, each once, in (attempt, step) order."""
    keys = {(int(e["attempt"]), int(e["step"])) for e in events}
    stored = set(
        StepMetric.objects.filter(run=run, attempt__in={a for a, _ in keys}, step__in={s for _, s in keys})
        .values_list("attempt", "step")
    )
    fresh, seen = [], set()
    for event in sorted(events, key=lambda e: (int(e["attempt"]), int(e["step"]))):
        key = (int(event["attempt"]), int(event["step"]))
        if key not in stored and key not in seen:
            seen.add(key)
            fresh.append(event)
    return fresh


@dataclass
class StepRows:
    """The Rollout, ModuleCall, Group and GroupMember rows of some steps, before any id exists.

    Each row is a dict of field values by attname. A reference to another row of these steps is its
    position in that row's list (`call_rollouts[i]`: the position in `rollouts` of call i's rollout),
    resolved to an id by the writer: before writing on PostgreSQL, table by table elsewhere.
    """

    rollouts: list[dict[str, Any]] = field(default_factory=list)
    rollout_parents: list[int | None] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    call_rollouts: list[int] = field(default_factory=list)
    texts: list[dict[str, Any]] = field(default_factory=list)  # CallText rows: one per (step, example)
    groups: list[dict[str, Any]] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)
    member_groups: list[int] = field(default_factory=list)
    member_calls: list[int] = field(default_factory=list)

    def add_step(self, run_id: int, event: dict[str, Any]) -> None:
        """Adds one step event's rows. Trajectory and call ids only have to be unique within a step."""
        attempt, step = int(event["attempt"]), int(event["step"])
        trajectories = event.get("rollouts", [])
        first = len(self.rollouts)
        position_of = {t.get("trajectory_id"): first + i for i, t in enumerate(trajectories)}
        call_position: dict[tuple[Any, Any], int] = {}
        texts: dict[str, list[tuple[int, str, Any, str]]] = {}  # example id -> its calls' texts
        tokens: dict[str, list[tuple[tuple[int, int], str, Any]]] = {}  # example id -> its calls' token details
        for index, t in enumerate(trajectories):
            self.rollouts.append({
                "run_id": run_id, "attempt": attempt, "step": step, "index": index,
                "example_id": nul_replaced(str(t.get("example_id", "")))[:contract.MAX_EXAMPLE_ID],
                "teacher": nul_replaced(t.get("teacher") or ""), "fork_point": nul_replaced(t.get("fork_point") or ""),
                "sampling": nul_replaced({"trajectory_id": t.get("trajectory_id"), "parent_id": t.get("parent_id"),
                                          "group_id": t.get("group_id"),
                                          **_policy_version(t.get("policy_version"))}),
                "final_output": nul_replaced(t.get("final_output")),
                "reward_components": nul_replaced(t.get("rewards") or {}),
                "total_reward": contract.finite_or_none(t.get("reward")), "failed": bool(t.get("failed")),
                "error": nul_replaced(str(t.get("error") or ""))[:contract.MAX_ERROR],
            })
            self.rollout_parents.append(position_of.get(t.get("parent_id")) if t.get("parent_id") else None)
            for position, c in enumerate(t.get("calls", [])):
                # A call shared by several forks is stored under each rollout; groups point at its first copy.
                call_position.setdefault((t.get("trajectory_id"), c.get("call_id")), len(self.calls))
                call_position.setdefault((None, c.get("call_id")), len(self.calls))
                self.call_rollouts.append(first + index)
                texts.setdefault(self.rollouts[-1]["example_id"], []).append(
                    (index, nul_replaced(c.get("prompt", "")), nul_replaced(c.get("messages")),
                     nul_replaced(c.get("completion", ""))))
                if c.get("tokens"):
                    tokens.setdefault(self.rollouts[-1]["example_id"], []).append(
                        ((index, position), texts[self.rollouts[-1]["example_id"]][-1][3], c["tokens"]))
                self.calls.append({
                    "position": position, "module": nul_replaced(c["module"]),
                    "invocation_index": int(c["invocation_index"]),
                    "prompt": None, "completion": None, "messages": None,  # in the example's CallText row
                    "parsed_ok": bool(c.get("parsed_ok")), "specific_reward": contract.finite_or_none(c.get("specific_reward")) or 0.0,
                    "propagated_reward": contract.finite_or_none(c.get("propagated_reward")), "advantage": contract.finite_or_none(c.get("advantage")),
                })
        for example, calls in texts.items():
            self.texts.append({"run_id": run_id, "attempt": attempt, "step": step, "example_id": example,
                               "data": encode_texts(calls), "tokens": encode_tokens(tokens.get(example, ()))})
        for index, g in enumerate(event.get("groups", [])):
            group_position = len(self.groups)
            self.groups.append({
                "run_id": run_id, "attempt": attempt, "step": step, "index": index, "module": nul_replaced(g["module"]),
                "invocation_index": int(g.get("invocation_index") or 0),
                "kind": nul_replaced(g.get("kind", Group.Kind.HOMOGENEOUS)),
                "example_id": nul_replaced(str(g.get("example_id") or ""))[:contract.MAX_EXAMPLE_ID], "size": len(g.get("members", [])),
                "reward_mean": contract.finite_or_none(g.get("reward_mean")), "reward_var": contract.finite_or_none(g.get("reward_var")),
                "similarity": contract.finite_or_none(g.get("similarity")),
            })
            for position, m in enumerate(g.get("members", [])):
                call = call_position.get((m.get("trajectory_id"), m.get("call_id")))
                if call is None:
                    call = call_position.get((None, m.get("call_id")))
                if call is None:
                    raise ValueError(f"step {step}: group {g.get('group_id')} names unknown call {m.get('call_id')!r}")
                self.member_groups.append(group_position)
                self.member_calls.append(call)
                self.members.append({
                    "position": position, "padded": bool(m.get("padded")), "duplicated": bool(m.get("duplicated")),
                    "reward": contract.finite_or_none(m.get("reward")), "reward_components": nul_replaced(m.get("reward_components") or {}),
                    "advantage": contract.finite_or_none(m.get("advantage")),
                    "component_advantages": nul_replaced(m.get("component_advantages") or {}),
                })


def _write(rows: StepRows) -> None:
    """COPY where the database has it (PostgreSQL), bulk_create elsewhere."""
    if connection.vendor == "postgresql":
        _write_with_copy(rows)
    else:
        _write_with_bulk_create(rows)


# --- PostgreSQL: reserve ids, then one COPY per table ------------------------------------------


def _write_with_copy(rows: StepRows) -> None:
    with connection.cursor() as cursor:
        rollout_ids = _reserve_ids(cursor, Rollout, len(rows.rollouts))
        call_ids = _reserve_ids(cursor, ModuleCall, len(rows.calls))
        group_ids = _reserve_ids(cursor, Group, len(rows.groups))
        member_ids = _reserve_ids(cursor, GroupMember, len(rows.members))
        # Parents before children, so every foreign key holds when its row arrives.
        _copy(cursor, Rollout, rows.rollouts, id=rollout_ids,
              parent_id=[None if p is None else rollout_ids[p] for p in rows.rollout_parents])
        _copy(cursor, ModuleCall, rows.calls, id=call_ids, rollout_id=[rollout_ids[p] for p in rows.call_rollouts])
        _copy(cursor, Group, rows.groups, id=group_ids)
        _copy(cursor, CallText, rows.texts, id=_reserve_ids(cursor, CallText, len(rows.texts)))
        _copy(cursor, GroupMember, rows.members, id=member_ids,
              group_id=[group_ids[p] for p in rows.member_groups], call_id=[call_ids[p] for p in rows.member_calls])


def _reserve_ids(cursor, model: type[models.Model], count: int) -> list[int]:
    """`count` fresh ids from the table's id sequence (one query; nextval never hands one out twice)."""
    if not count:
        return []
    cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                   [connection.ops.quote_name(model._meta.db_table), model._meta.pk.column, count])
    return sorted(row[0] for row in cursor.fetchall())


def _copy(cursor, model: type[models.Model], rows: list[dict[str, Any]], **resolved: list[Any]) -> None:
    """COPY `rows` into the model's table: every concrete column, `resolved` ones (ids and foreign
    keys, one value per row) by position, the rest from the row dict or the field's default."""
    if not rows:
        return
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    statement = f"COPY {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) FROM STDIN"
    defaults = {f.attname: f.get_default() for f in fields if f.attname not in resolved}
    # JSON goes through Django's own adapter, so the stored JSON is what bulk_create would store.
    json_fields = {f.attname: f.encoder for f in fields if isinstance(f, models.JSONField)}
    adapt_json = connection.ops.adapt_json_value

    def value(row: dict[str, Any], i: int, name: str) -> Any:
        if name in resolved:
            return resolved[name][i]
        v = row.get(name, defaults[name])
        return adapt_json(v, json_fields[name]) if name in json_fields and v is not None else v

    names = [f.attname for f in fields]
    with cursor.copy(statement) as copy:
        for i, row in enumerate(rows):
            copy.write_row([value(row, i, name) for name in names])


# --- Elsewhere: bulk_create, table by table ----------------------------------------------------


def _write_with_bulk_create(rows: StepRows) -> None:
    rollouts = _bulk_create(Rollout, rows.rollouts)
    parents = []
    for rollout, parent in zip(rollouts, rows.rollout_parents, strict=True):
        if parent is not None:
            rollout.parent_id = rollouts[parent].pk
            parents.append(rollout)
    if parents:
        Rollout.objects.bulk_update(parents, ["parent"], batch_size=BATCH_SIZE)
    calls = _bulk_create(ModuleCall, rows.calls, rollout_id=[rollouts[p].pk for p in rows.call_rollouts])
    groups = _bulk_create(Group, rows.groups)
    _bulk_create(CallText, rows.texts)
    _bulk_create(GroupMember, rows.members, group_id=[groups[p].pk for p in rows.member_groups],
                 call_id=[calls[p].pk for p in rows.member_calls])


def _bulk_create(model: type[models.Model], rows: list[dict[str, Any]], **resolved: list[Any]) -> list[models.Model]:
    objects = [model(**row, **{name: values[i] for name, values in resolved.items()}) for i, row in enumerate(rows)]
    return model.objects.bulk_create(objects, batch_size=BATCH_SIZE)


def _policy_version(version: Any) -> dict[str, int]:
    """The rollout's sampling policy version (trainer/run/pipeline.py) when it carries a whole one
    within the contract's bound; nothing otherwise (a run trained elsewhere records none)."""
    if contract.step_in_bounds(version):  # a count of updates, bounded as a step number is
        return {"policy_version": version}
    return {}


def _clean_spans(spans: Any) -> list[dict[str, Any]]:
    """The step's timeline bars the contract accepts (trainer/run/events.py `span_checked`), the first
    MAX_SPANS_PER_STEP of them; a bar that is not one is left out, never the step."""
    if not isinstance(spans, list):
        return []
    kept = (contract.span_checked(span) for span in spans[:contract.MAX_SPANS_PER_STEP])
    return [nul_replaced(dict(span)) for span in kept if span is not None]
