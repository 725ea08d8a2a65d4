"""Rollout retention and per-run storage (issue 13, item 5).

A run's config may keep the rollout text (rollouts, module calls, groups and their members) of only
its newest `keep_rollouts_last_steps` steps, plus every `keep_rollouts_every`-th step however old.
Every step metric is kept. Retention runs inside each ingest's transaction, so no reader sees rows
the config drops, and what is dropped follows from the config and the run's newest step alone, which is how readers say so without
storing a list of dropped steps.

`Run.storage_bytes` counts the stored size of a run's rows: added at ingest for the new steps,
subtracted here for the dropped ones. On PostgreSQL it is `pg_column_size` of each row (after
compression); on SQLite the text lengths plus a fixed size per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import F

from webapp.runs.models import CallText, Group, GroupMember, ModuleCall, Rollout, Run, StepMetric

ROW_OVERHEAD_SQLITE = 40  # bytes a row costs beyond its text on SQLite (header, ids, numbers): an estimate


def _count(value) -> int:
    """A retention setting as a count; 0 (keep all) for anything else. A RunConfig holds whole numbers,
    but a run trained elsewhere stores its client's settings as sent (webapp/runs/ingest/external.py)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True)
class Retention:
    last_steps: int  # 0: keep all
    every: int  # 0: no every-k-th exception

    @classmethod
    def of(cls, run: Run) -> Retention:
        config = run.config if isinstance(run.config, dict) else {}
        return cls(_count(config.get("keep_rollouts_last_steps")), _count(config.get("keep_rollouts_every")))

    @property
    def active(self) -> bool:
        return self.last_steps > 0

    def keeps(self, step: int, newest: int) -> bool:
        """Whether the rollouts of `step` survive once `newest` is stored."""
        return (not self.active or step > newest - self.last_steps
                or (self.every > 0 and step % self.every == 0))

    def describe(self) -> str:
        every = f" and every {self.every}th step" if self.every else ""
        return f"keeps the rollouts of the newest {self.last_steps} steps{every}"


def rollouts_dropped(run: Run, step: int) -> str:
    """Why `step` has no rollout text ("" when retention did not drop it): for the inspector."""
    retention = Retention.of(run)
    if retention.keeps(step, run.current_step):
        return ""
    return (f"The rollout text of step {step} was dropped by this run's retention ({retention.describe()}); "
            f"its metrics are kept.")


def steps_without_rollouts(run: Run) -> list[int]:
    """Stored steps (with metrics) whose rollouts retention dropped, in order: for the export."""
    retention = Retention.of(run)
    if not retention.active:
        return []
    steps = StepMetric.objects.filter(run=run).values_list("step", flat=True).distinct().order_by("step")
    return [s for s in steps if not retention.keeps(s, run.current_step)]


def retention_apply(run: Run) -> list[int]:
    """Deletes the rollout rows of every step now outside the run's retention; returns those steps.

    One query when there is nothing to drop (none without a retention setting). Deletes children first
    with set-based DELETEs (no per-row cascade collection in Python), all in one transaction."""
    retention = Retention.of(run)
    if not retention.active:
        return []
    newest = Run.objects.filter(pk=run.pk).values_list("current_step", flat=True).first() or 0
    candidates = (Rollout.objects.filter(run=run, step__lte=newest - retention.last_steps)
                  .values_list("step", flat=True).distinct())
    steps = sorted(s for s in candidates if not retention.keeps(s, newest))
    if not steps:
        return []
    with transaction.atomic():
        freed = rollout_rows_bytes(run.pk, steps)
        GroupMember.objects.filter(group__run=run, group__step__in=steps).delete()
        GroupMember.objects.filter(call__rollout__run=run, call__rollout__step__in=steps).delete()
        ModuleCall.objects.filter(rollout__run=run, rollout__step__in=steps).delete()
        # Forks point at their parent rollout (MHGPO): unlink before deleting the parents.
        Rollout.objects.filter(run=run, step__in=steps).update(parent=None)
        Rollout.objects.filter(run=run, step__in=steps).delete()
        Group.objects.filter(run=run, step__in=steps).delete()
        CallText.objects.filter(run=run, step__in=steps).delete()
        Run.objects.filter(pk=run.pk).update(storage_bytes=F("storage_bytes") - freed)
    return steps


# --- stored bytes -----------------------------------------------------------------------------

def _size_sql(alias: str, text_columns: Sequence[str]) -> str:
    if connection.vendor == "postgresql":
        return f"coalesce(sum(pg_column_size({alias}.*)), 0)"
    lengths = " + ".join(f"coalesce(length({alias}.{c}), 0)" for c in text_columns)
    return f"coalesce(sum({lengths} + {ROW_OVERHEAD_SQLITE}), 0)"


def _in_steps(count: int) -> str:
    return ", ".join(["%s"] * count)


def rollout_rows_bytes(run_id: int, steps: Sequence[int] | None) -> int:
    """Stored bytes of the rollouts, calls, groups and members of `steps` of a run (None: every step)."""
    if steps is not None and not steps:
        return 0
    where_r = "" if steps is None else f" AND r.step IN ({_in_steps(len(steps))})"
    where_g = "" if steps is None else f" AND g.step IN ({_in_steps(len(steps))})"
    queries = [
        (f"SELECT {_size_sql('r', ['sampling', 'final_output', 'reward_components', 'error', 'example_id'])} "
         f"FROM runs_rollout r WHERE r.run_id = %s{where_r}"),
        (f"SELECT {_size_sql('c', ['prompt', 'messages', 'completion', 'module'])} "
         f"FROM runs_modulecall c JOIN runs_rollout r ON r.id = c.rollout_id WHERE r.run_id = %s{where_r}"),
        (f"SELECT {_size_sql('g', ['module', 'example_id'])} FROM runs_group g WHERE g.run_id = %s{where_g}"),
        (f"SELECT {_size_sql('t', ['data', 'tokens', 'example_id'])} FROM runs_calltext t "
         f"WHERE t.run_id = %s{where_g.replace('g.step', 't.step')}"),
        (f"SELECT {_size_sql('m', ['reward_components', 'component_advantages'])} "
         f"FROM runs_groupmember m JOIN runs_group g ON g.id = m.group_id WHERE g.run_id = %s{where_g}"),
    ]
    params = [run_id, *(steps or [])]
    total = 0
    with connection.cursor() as cursor:
        for sql in queries:
            cursor.execute(sql, params)
            total += int(cursor.fetchone()[0] or 0)
    return total


def metric_rows_bytes(run_id: int, seqs: Sequence[int] | None) -> int:
    """Stored bytes of the step-metric rows with these seqs (None: all of the run's)."""
    if seqs is not None and not seqs:
        return 0
    where = "" if seqs is None else f" AND s.seq IN ({_in_steps(len(seqs))})"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_size_sql('s', ['metrics'])} FROM runs_stepmetric s WHERE s.run_id = %s{where}",
                       [run_id, *(seqs or [])])
        return int(cursor.fetchone()[0] or 0)


def storage_add(run_id: int, steps: Sequence[int], seqs: Sequence[int]) -> int:
    """Adds the stored bytes of freshly ingested steps to `Run.storage_bytes` (inside the ingest's
    transaction); returns the bytes added."""
    added = rollout_rows_bytes(run_id, sorted(set(steps))) + metric_rows_bytes(run_id, seqs)
    Run.objects.filter(pk=run_id).update(storage_bytes=F("storage_bytes") + added)
    return added


def storage_recount(run: Run) -> int:
    """`Run.storage_bytes` counted afresh from every stored row (a resumed attempt discarded some)."""
    total = rollout_rows_bytes(run.pk, None) + metric_rows_bytes(run.pk, None)
    Run.objects.filter(pk=run.pk).update(storage_bytes=total)
    return total


def storage_label(size: int | None) -> str:
    """1234567 -> "1.2 MB" (decimal units, as disks are sold and `du --si` prints)."""
    size = int(size or 0)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
