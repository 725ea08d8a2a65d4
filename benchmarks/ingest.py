"""Time `step_events_ingest` on one MHGPO-scale step against a raw psycopg COPY of the same rows.

The step: 512 questions x 4 rollouts (Fork-on-First on a rewriter -> reranker -> answerer chain, MHGPO
Algorithm 3) = 2,048 rollouts, 6,144 module calls, 1,536 groups of 4 (one per question and module),
6,144 group members and one StepMetric row. Prompts hold the question (1.4-2.4 KB of text) plus the
earlier completions (100-400 characters each), so they are 1.4-3.2 KB, about 13 MB of text in all.
The event is built with the trainer's own sampling, grouping and advantage code and goes through a
JSON round trip, so it is exactly what the supervisor reads from a run's `events.jsonl`.

Each repetition stores the step twice, each time under a fresh run:

- ingest: `step_events_ingest(run, [event])`, the service the supervisor calls (everything it does:
  locking the run, the idempotency check, NUL replacement, building the rows, writing them, commit);
- COPY: the same rows (same tables, columns and values; ids reserved from the tables' sequences
  beforehand) written with psycopg's `cursor.copy()` in one transaction, from row tuples built before
  the clock starts, except the call texts: compressing them into one row per example (zlib, as the
  ingest does) is part of producing the bytes this layout stores, so it is on the clock. This is the
  floor for getting these bytes into these tables on this server.

The script checks that both runs hold the same rows, then prints the medians and the ratio
ingest / COPY (target: within 2x).

It needs PostgreSQL (COPY is PostgreSQL's): it creates the throwaway database `cohort_bench_ingest`
on the server of `DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/postgres), migrates it,
and drops it at the end.

Run: ``.venv/bin/python benchmarks/ingest.py [--repeat 5] [--questions 512]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.servers import (  # noqa: E402
    close_django_connections,
    django_setup,
    throwaway_database,
)
from trainer.algorithms.advantages import grpo_advantages  # noqa: E402
from trainer.algorithms.groups import assign_advantages, group_reward_arrays  # noqa: E402
from trainer.algorithms.propagation import mhgpo_groups, propagate_rewards  # noqa: E402
from trainer.rollouts.sampling import LinearChain, fork_on_first  # noqa: E402
from trainer.rollouts.trajectory import jsonable  # noqa: E402

BENCH_DATABASE = "cohort_bench_ingest"
MODULES = ("rewriter", "reranker", "answerer")
ROLLOUTS = 4  # MHGPO group size G: 4 rollouts per question, so groups of 4 per module
TARGET_RATIO = 2.0

WORDS = ("the", "of", "retrieval", "passage", "answer", "question", "which", "river", "born", "city",
         "population", "century", "museum", "novel", "author", "first", "largest", "capital", "film",
         "directed", "by", "in", "was", "is", "a", "team", "season", "league", "album", "released")


def make_run(username: str = "bench"):
    """A user, a program, a task and a fresh run to store steps under."""
    from django.contrib.auth import get_user_model

    from webapp.projects.services import personal_project_ensure
    from webapp.runs.models import Program, Run, Task

    user = get_user_model().objects.get_or_create(username=username)[0]
    program = Program.objects.get_or_create(name="bench-chain", defaults={"title": "Bench chain",
                                                                         "modules": list(MODULES)})[0]
    task = Task.objects.get_or_create(name="bench-task", defaults={"title": "Bench task", "program": program})[0]
    return Run.objects.create(owner=user, project=personal_project_ensure(user), task=task, config={"steps": 1}, state=Run.State.RUNNING, total_steps=1)


# --- The step event -----------------------------------------------------------------------------


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def mhgpo_step_event(step: int = 1, *, questions: int = 512, seed: int = 0) -> dict[str, Any]:
    """One trainer step event of a 3-agent chain sampled with Fork-on-First (groups of `ROLLOUTS`)."""
    rng = random.Random(seed)
    texts = [_text(rng, rng.randint(1400, 2400)) for _ in range(questions)]

    def generate(agent: str, prompts: list[str]) -> list[str]:
        return [_text(rng, rng.randint(100, 400)) for _ in prompts]

    trajectories = fork_on_first(LinearChain(MODULES), texts, group_size=ROLLOUTS, generate=generate,
                                 example_ids=[f"q{i}" for i in range(questions)])
    for t in trajectories:
        t.rewards = {"f1": rng.random(), "format": float(rng.random() < 0.9)}
        t.total_reward = t.rewards["f1"] + t.rewards["format"]
    propagate_rewards(trajectories)
    groups = mhgpo_groups(trajectories)
    rewards, ids = group_reward_arrays(groups, source="call")
    assign_advantages(groups, grpo_advantages(rewards, ids))
    totals = [t.reward for t in trajectories]
    metrics = {"reward/mean": float(np.mean(totals)), "reward/f1": float(np.mean([t.rewards["f1"] for t in trajectories])),
               "failure_rate": 0.0, "groups": float(len(groups)), "loss": 0.12, "kl": float("nan"),
               "grad_norm": 0.8, "lr": 1e-5, "tokens_per_s": 5400.0, "zero_var_share": 0.03}
    metrics.update({f"parse_ok/{m}": 1.0 for m in MODULES})
    metrics.update({f"group_var/{m}": 0.1 for m in MODULES})
    event = {"type": "step", "attempt": 1, "step": step, "metrics": metrics,
             "rollouts": [t.to_dict() for t in trajectories], "groups": [g.to_dict() for g in groups]}
    # What the supervisor reads back from events.jsonl: plain JSON, NaN already null.
    return json.loads(json.dumps(jsonable(event)))


# --- The COPY baseline --------------------------------------------------------------------------

COLUMNS = {
    "runs_stepmetric": ("id", "run_id", "attempt", "step", "seq", "metrics", "created_at"),
    "runs_rollout": ("id", "run_id", "attempt", "step", "index", "example_id", "parent_id", "teacher", "fork_point",
                     "sampling", "final_output", "reward_components", "total_reward", "failed", "error"),
    # Texts NULL: they go compressed into runs_calltext, one row per (step, example), as the ingest does.
    "runs_modulecall": ("id", "rollout_id", "position", "module", "invocation_index", "prompt", "completion",
                        "parsed_ok", "specific_reward", "propagated_reward", "advantage"),
    "runs_calltext": ("id", "run_id", "attempt", "step", "example_id", "data"),
    "runs_group": ("id", "run_id", "attempt", "step", "index", "module", "invocation_index", "kind", "example_id",
                   "size", "reward_mean", "reward_var", "similarity", "distinct_advantages",
                   "distinct_reward_vectors"),
    "runs_groupmember": ("id", "group_id", "position", "call_id", "padded", "duplicated", "reward",
                         "reward_components", "advantage", "component_advantages"),
}


def reserve_ids(conn: psycopg.Connection, table: str, count: int) -> Iterator[int]:
    """`count` ids from the table's sequence (nextval is outside transactions: nobody else gets them)."""
    rows = conn.execute(f"SELECT nextval(pg_get_serial_sequence('{table}', 'id')) FROM generate_series(1, %s)",
                        [count]).fetchall()
    return iter(r[0] for r in rows)


def copy_rows(conn: psycopg.Connection, run_id: int, event: dict[str, Any]) -> dict[str, list[tuple]]:
    """The rows `step_events_ingest` stores for a fresh run, as COPY tuples with reserved ids.

    Enough for this benchmark's event (every call belongs to one rollout); ingest.py is the reference.
    """
    from django.utils import timezone

    trajectories, groups = event["rollouts"], event["groups"]
    attempt, step = event["attempt"], event["step"]
    rollout_ids = reserve_ids(conn, "runs_rollout", len(trajectories))
    call_ids = reserve_ids(conn, "runs_modulecall", sum(len(t["calls"]) for t in trajectories))
    group_ids = reserve_ids(conn, "runs_group", len(groups))
    member_ids = reserve_ids(conn, "runs_groupmember", sum(len(g["members"]) for g in groups))
    texts: dict[str, list[tuple]] = {}
    rows: dict[str, list[tuple]] = {table: [] for table in COLUMNS}
    rows["runs_stepmetric"].append((next(reserve_ids(conn, "runs_stepmetric", 1)), run_id, attempt, step, 1,
                                    Jsonb(event["metrics"]), timezone.now()))
    rollout_of: dict[str, int] = {}
    call_of: dict[str, int] = {}
    for t in trajectories:
        rollout_of[t["trajectory_id"]] = rid = next(rollout_ids)
        for position, c in enumerate(t["calls"]):
            call_of.setdefault(c["call_id"], cid := next(call_ids))
            rows["runs_modulecall"].append((cid, rid, position, c["module"], c["invocation_index"], None, None,
                                            c["parsed_ok"], c["specific_reward"] or 0.0,
                                            c["propagated_reward"], c["advantage"]))
    for index, t in enumerate(trajectories):
        texts.setdefault(t["example_id"], []).extend(
            (index, c["prompt"], c.get("messages"), c["completion"]) for c in t["calls"])
    text_ids = reserve_ids(conn, "runs_calltext", len(texts))
    for example, calls in texts.items():  # compressed by `copy_store`, on the clock (see `time_copy`)
        rows["runs_calltext"].append((next(text_ids), run_id, attempt, step, example, calls))
    for index, t in enumerate(trajectories):
        sampling = {"trajectory_id": t["trajectory_id"], "parent_id": t["parent_id"], "group_id": t["group_id"]}
        rows["runs_rollout"].append((
            rollout_of[t["trajectory_id"]], run_id, attempt, step, index, t["example_id"],
            rollout_of.get(t["parent_id"]), t["teacher"] or "", t["fork_point"] or "", Jsonb(sampling),
            None if t["final_output"] is None else Jsonb(t["final_output"]), Jsonb(t["rewards"]), t["reward"],
            t["failed"], t.get("error") or ""))
    for index, g in enumerate(groups):
        gid = next(group_ids)
        rows["runs_group"].append((gid, run_id, attempt, step, index, g["module"], g["invocation_index"] or 0,
                                   g["kind"], g["example_id"] or "", len(g["members"]), None, None, None, None, None))
        for position, m in enumerate(g["members"]):
            rows["runs_groupmember"].append((next(member_ids), gid, position, call_of[m["call_id"]], m["padded"],
                                             m["duplicated"], None, Jsonb({}), m["advantage"], Jsonb({})))
    return rows


def copy_store(conn: psycopg.Connection, rows: dict[str, list[tuple]]) -> None:
    """COPY every table's rows (parents before children, so foreign keys hold) in one transaction."""
    with conn.transaction(), conn.cursor() as cursor:
        for table, columns in COLUMNS.items():
            statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns)))
            with cursor.copy(statement) as copy:
                for row in rows[table]:
                    copy.write_row(row)
        cursor.execute("UPDATE runs_run SET last_seq = 1, current_step = %s WHERE id = %s",
                       [rows["runs_stepmetric"][0][3], rows["runs_stepmetric"][0][1]])


# --- Measuring ----------------------------------------------------------------------------------

FINGERPRINT = """
    SELECT (SELECT count(*) FROM runs_stepmetric WHERE run_id = %(run)s),
           (SELECT count(*) FROM runs_rollout WHERE run_id = %(run)s),
           (SELECT count(*) FROM runs_rollout WHERE run_id = %(run)s AND parent_id IS NOT NULL),
           (SELECT md5(string_agg(r.index || r.example_id || r.sampling::text || coalesce(r.final_output::text, '')
                                  || r.reward_components::text || coalesce(r.total_reward::text, ''), ',' ORDER BY r.index))
              FROM runs_rollout r WHERE r.run_id = %(run)s),
           (SELECT md5(string_agg(r.index || ':' || c.position || c.module || coalesce(c.prompt, '-')
                                  || coalesce(c.completion, '-') || coalesce(c.advantage::text, '')
                                  || coalesce(c.propagated_reward::text, ''), ',' ORDER BY r.index, c.position))
              FROM runs_modulecall c JOIN runs_rollout r ON r.id = c.rollout_id WHERE r.run_id = %(run)s),
           (SELECT md5(string_agg(t.step || t.example_id || encode(t.data, 'hex'), ',' ORDER BY t.step, t.example_id))
              FROM runs_calltext t WHERE t.run_id = %(run)s),
           (SELECT count(*) FROM runs_group WHERE run_id = %(run)s),
           (SELECT md5(string_agg(g.index || ':' || m.position || ':' || r.index || ':' || c.position
                                  || coalesce(m.advantage::text, ''), ',' ORDER BY g.index, m.position))
              FROM runs_groupmember m JOIN runs_group g ON g.id = m.group_id
              JOIN runs_modulecall c ON c.id = m.call_id JOIN runs_rollout r ON r.id = c.rollout_id
              WHERE g.run_id = %(run)s)
"""


def fingerprint(conn: psycopg.Connection, run_id: int) -> tuple:
    return conn.execute(FINGERPRINT, {"run": run_id}).fetchone()


def row_count(event: dict[str, Any]) -> int:
    calls = sum(len(t["calls"]) for t in event["rollouts"])
    members = sum(len(g["members"]) for g in event["groups"])
    texts = len({t["example_id"] for t in event["rollouts"]})  # one CallText row per example
    return 1 + len(event["rollouts"]) + calls + len(event["groups"]) + members + texts


def time_ingest(event: dict[str, Any]) -> tuple[float, int]:
    from webapp.runs.ingest.store import step_events_ingest

    run = make_run()
    start = time.perf_counter()
    stored = step_events_ingest(run, [event])
    elapsed = time.perf_counter() - start
    assert len(stored) == 1
    return elapsed, run.pk


def time_copy(conn: psycopg.Connection, event: dict[str, Any]) -> tuple[float, int]:
    """The floor: COPY of row tuples built beforehand, plus compressing each example's call texts,
    which is part of producing the bytes this layout stores (webapp/runs/ingest/texts.py), so it is timed."""
    from webapp.runs.ingest.texts import encode_texts

    run = make_run()
    rows = copy_rows(conn, run.pk, event)
    start = time.perf_counter()
    rows["runs_calltext"] = [(*row[:5], encode_texts(row[5])) for row in rows["runs_calltext"]]
    copy_store(conn, rows)
    return time.perf_counter() - start, run.pk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (each on fresh runs); median reported")
    parser.add_argument("--questions", type=int, default=512, help="questions per step (4 rollouts each)")
    args = parser.parse_args()

    event = mhgpo_step_event(questions=args.questions)
    rows = row_count(event)
    text_mb = sum(len(c["prompt"]) + len(c["completion"]) for t in event["rollouts"] for c in t["calls"]) / 1e6
    with throwaway_database(BENCH_DATABASE) as url:
        try:
            django_setup(url)
            with psycopg.connect(url, autocommit=True) as conn:
                ingest_s, copy_s = [], []
                for _ in range(args.repeat):
                    seconds, ingest_run = time_ingest(event)
                    ingest_s.append(seconds)
                    seconds, copy_run = time_copy(conn, event)
                    copy_s.append(seconds)
                if fingerprint(conn, ingest_run) != fingerprint(conn, copy_run):
                    raise SystemExit(f"ingest and COPY stored different rows:\n{fingerprint(conn, ingest_run)}\n"
                                     f"{fingerprint(conn, copy_run)}")
        finally:
            close_django_connections()

    ingest, copy = statistics.median(ingest_s), statistics.median(copy_s)
    ratio = ingest / copy
    print(f"step: {args.questions} questions x {ROLLOUTS} rollouts x {len(MODULES)} module calls = {rows} rows "
          f"({len(event['rollouts'])} rollouts, {sum(len(t['calls']) for t in event['rollouts'])} calls, "
          f"{len(event['groups'])} groups), {text_mb:.1f} MB of prompt/completion text")
    print(f"step_events_ingest : {ingest * 1e3:8.1f} ms  {rows / ingest:9.0f} rows/s  "
          f"(median of {args.repeat}: {', '.join(f'{s * 1e3:.0f}' for s in ingest_s)} ms)")
    print(f"psycopg COPY       : {copy * 1e3:8.1f} ms  {rows / copy:9.0f} rows/s  "
          f"(median of {args.repeat}: {', '.join(f'{s * 1e3:.0f}' for s in copy_s)} ms)")
    verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
    print(f"ingest / COPY      : {ratio:8.2f}x  (target: within {TARGET_RATIO:.0f}x of COPY: {verdict})")


if __name__ == "__main__":
    main()
