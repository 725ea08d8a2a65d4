"""Storing a run's step events (the trainer's event log) in the database.

`step_events_ingest` is idempotent: a step already stored for (run, attempt, step) is skipped, so
the worker can re-ship its whole log after a database outage and nothing is stored twice. Rows are
written with bulk inserts (a handful of INSERT statements per step, never one per row), in one
transaction per call, under a row lock on the run so `seq` numbers stay dense and increasing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run, StepMetric

BATCH_SIZE = 2000


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _without_nul(value: Any) -> Any:
    """PostgreSQL text and JSONB cannot hold NUL; model output can (a random model writes any byte)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def _clean_metrics(metrics: dict[str, Any]) -> dict[str, float | None]:
    """JSON has no NaN: unknown values are stored as null."""
    return {str(k): _finite(v) for k, v in metrics.items() if isinstance(v, int | float) or v is None}


def step_events_ingest(run: Run, events: Iterable[dict[str, Any]]) -> list[StepMetric]:
    """Stores the step events not yet stored; returns the new StepMetric rows (seq order)."""
    events = [_without_nul(e) for e in events if e.get("type", "step") == "step"]
    if not events:
        return []
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        keys = {(int(e["attempt"]), int(e["step"])) for e in events}
        stored = set(
            StepMetric.objects.filter(run=locked, attempt__in={a for a, _ in keys}, step__in={s for _, s in keys})
            .values_list("attempt", "step")
        )
        fresh, seen = [], set()
        for event in sorted(events, key=lambda e: (int(e["attempt"]), int(e["step"]))):
            key = (int(event["attempt"]), int(event["step"]))
            if key not in stored and key not in seen:
                seen.add(key)
                fresh.append(event)
        if not fresh:
            return []
        seq = locked.last_seq
        metrics = []
        for event in fresh:
            seq += 1
            metrics.append(StepMetric(run=locked, attempt=int(event["attempt"]), step=int(event["step"]), seq=seq,
                                      metrics=_clean_metrics(event.get("metrics", {}))))
        StepMetric.objects.bulk_create(metrics, batch_size=BATCH_SIZE)
        for event in fresh:
            _store_rollouts_and_groups(locked, event)
        last = fresh[-1]
        rewards = [m.metrics.get("reward/mean") for m in metrics if m.metrics.get("reward/mean") is not None]
        best = max([locked.best_reward, *rewards], key=lambda v: -math.inf if v is None else v) if rewards else locked.best_reward
        Run.objects.filter(pk=locked.pk).update(
            last_seq=seq, current_step=max(locked.current_step, int(last["step"])), best_reward=best)
    return metrics


def _store_rollouts_and_groups(run: Run, event: dict[str, Any]) -> None:
    attempt, step = int(event["attempt"]), int(event["step"])
    trajectories = event.get("rollouts", [])
    rollouts = [
        Rollout(
            run=run, attempt=attempt, step=step, index=index, example_id=str(t.get("example_id", ""))[:200],
            teacher=t.get("teacher") or "", fork_point=t.get("fork_point") or "",
            sampling={"trajectory_id": t.get("trajectory_id"), "parent_id": t.get("parent_id"),
                      "group_id": t.get("group_id")},
            final_output=t.get("final_output"), reward_components=t.get("rewards") or {},
            total_reward=_finite(t.get("reward")), failed=bool(t.get("failed")),
        )
        for index, t in enumerate(trajectories)
    ]
    Rollout.objects.bulk_create(rollouts, batch_size=BATCH_SIZE)
    by_trajectory_id = {t.get("trajectory_id"): r for t, r in zip(trajectories, rollouts, strict=True)}
    parents = []
    for t, rollout in zip(trajectories, rollouts, strict=True):
        parent = by_trajectory_id.get(t.get("parent_id")) if t.get("parent_id") else None
        if parent is not None:
            rollout.parent = parent
            parents.append(rollout)
    if parents:
        Rollout.objects.bulk_update(parents, ["parent"], batch_size=BATCH_SIZE)

    calls, call_by_id = [], {}
    for t, rollout in zip(trajectories, rollouts, strict=True):
        for position, c in enumerate(t.get("calls", [])):
            call = ModuleCall(
                rollout=rollout, position=position, module=c["module"], invocation_index=int(c["invocation_index"]),
                prompt=c.get("prompt", ""), completion=c.get("completion", ""), parsed_ok=bool(c.get("parsed_ok")),
                specific_reward=_finite(c.get("specific_reward")) or 0.0,
                propagated_reward=_finite(c.get("propagated_reward")), advantage=_finite(c.get("advantage")),
            )
            calls.append(call)
            # A call shared by several forks is stored under each rollout; groups point at its first copy.
            call_by_id.setdefault((t.get("trajectory_id"), c.get("call_id")), call)
            call_by_id.setdefault((None, c.get("call_id")), call)
    ModuleCall.objects.bulk_create(calls, batch_size=BATCH_SIZE)

    groups, members = [], []
    for index, g in enumerate(event.get("groups", [])):
        group = Group(
            run=run, attempt=attempt, step=step, index=index, module=g["module"],
            invocation_index=int(g.get("invocation_index") or 0), kind=g.get("kind", Group.Kind.HOMOGENEOUS),
            example_id=str(g.get("example_id") or "")[:200], size=len(g.get("members", [])),
            reward_mean=_finite(g.get("reward_mean")), reward_var=_finite(g.get("reward_var")),
            similarity=_finite(g.get("similarity")),
        )
        groups.append(group)
        for position, m in enumerate(g.get("members", [])):
            call = call_by_id.get((m.get("trajectory_id"), m.get("call_id"))) or call_by_id.get((None, m.get("call_id")))
            if call is None:
                raise ValueError(f"step {step}: group {g.get('group_id')} names unknown call {m.get('call_id')!r}")
            members.append((group, GroupMember(
                position=position, call=call, padded=bool(m.get("padded")), duplicated=bool(m.get("duplicated")),
                reward=_finite(m.get("reward")), reward_components=m.get("reward_components") or {},
                advantage=_finite(m.get("advantage")), component_advantages=m.get("component_advantages") or {},
            )))
    Group.objects.bulk_create(groups, batch_size=BATCH_SIZE)
    for group, member in members:
        member.group = group
    GroupMember.objects.bulk_create([m for _, m in members], batch_size=BATCH_SIZE)
