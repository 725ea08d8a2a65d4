"""Measure bytes per stored module call on a paper-scale run, now and with prompts stored by hash.

Seeds the MMGRPO-paper-scale HoVer-style run of `benchmarks/pages.py` (its own `seed`, through the
real ingest service) into the throwaway PostgreSQL database `cohort_bench_storage`, then prints:

- before (current scheme): pg_total_relation_size(runs_modulecall) (heap, TOAST and indexes) per call,
  and how much of it the `prompt`, `messages` and `completion` columns take (pg_column_size, i.e. after
  TOAST compression);
- after (prompts stored once by content hash): a copy of the call table without `prompt` but with a
  bigint `prompt_text_id` (indexed), plus a `prompt_text(id, hash bytea unique, text)` table holding each
  distinct prompt once; same indexes as before counted in, per call.

Compression stays on (the server's default_toast_compression, or `--compression lz4|pglz`; printed). Nothing here
changes the app's schema: the "after" tables are built in SQL in the throwaway database only.

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/storage.py
[--steps 750] [--database cohort_bench_storage]``
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import django_setup, throwaway_database  # noqa: E402

BENCH_DATABASE = "cohort_bench_storage"

AFTER_SQL = """
CREATE TABLE bench_prompt_text (id bigserial PRIMARY KEY, hash bytea NOT NULL UNIQUE, text text NOT NULL);
INSERT INTO bench_prompt_text (hash, text)
  SELECT DISTINCT ON (sha256(convert_to(prompt, 'UTF8'))) sha256(convert_to(prompt, 'UTF8')), prompt
  FROM runs_modulecall;
CREATE TABLE bench_modulecall_after AS
  SELECT {columns}, p.id AS prompt_text_id
  FROM runs_modulecall c JOIN bench_prompt_text p ON p.hash = sha256(convert_to(c.prompt, 'UTF8'));
CREATE INDEX ON bench_modulecall_after (prompt_text_id);
VACUUM ANALYZE bench_prompt_text;
VACUUM ANALYZE bench_modulecall_after;
"""


def measure(cursor) -> dict:
    """Sizes of the current call table and of the hashed-prompt variant, in bytes."""
    cursor.execute("VACUUM ANALYZE runs_modulecall")
    cursor.execute("SELECT count(*), sum(pg_column_size(prompt)), sum(coalesce(pg_column_size(messages), 0)),"
                   " sum(pg_column_size(completion)), sum(octet_length(prompt)),"
                   " count(DISTINCT sha256(convert_to(prompt, 'UTF8'))) FROM runs_modulecall")
    calls, prompt_stored, messages_stored, completion_stored, prompt_raw, distinct = cursor.fetchone()
    cursor.execute("SELECT pg_total_relation_size('runs_modulecall'), pg_table_size('runs_modulecall'),"
                   " pg_indexes_size('runs_modulecall')")
    before_total, before_table, before_indexes = cursor.fetchone()
    cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'runs_modulecall'"
                   " AND column_name <> 'prompt' ORDER BY ordinal_position")
    columns = ", ".join(f"c.{name}" for (name,) in cursor.fetchall())
    for statement in AFTER_SQL.format(columns=columns).split(";"):
        if statement.strip():
            cursor.execute(statement)
    cursor.execute("SELECT pg_total_relation_size('bench_modulecall_after'),"
                   " pg_total_relation_size('bench_prompt_text')")
    after_calls, after_texts = cursor.fetchone()
    # The copy lacks the original's indexes (pk, unique rollout+position): count them as they are.
    after_total = after_calls + before_indexes + after_texts
    return {"calls": calls, "distinct_prompts": distinct, "prompt_raw": prompt_raw, "prompt_stored": prompt_stored,
            "messages_stored": messages_stored, "completion_stored": completion_stored,
            "before_total": before_total, "before_table": before_table, "before_indexes": before_indexes,
            "after_calls": after_calls, "after_texts": after_texts, "after_total": after_total}


def measure_prefix_delta(cursor) -> dict:
    """Sizes with each prompt stored as (base call, shared prefix length, suffix): the base is the
    longer common prefix of two candidates, the previous call of the same rollout and the same
    (module, invocation) call of the example's first rollout (what a group's rollouts share)."""
    cursor.execute("SELECT c.id, r.step, r.example_id, r.id, c.module, c.invocation_index, c.prompt"
                   " FROM runs_modulecall c JOIN runs_rollout r ON r.id = c.rollout_id"
                   " ORDER BY r.run_id, r.step, r.example_id, r.id, c.position")
    rows, first_rollout, previous = [], {}, None
    for call_id, step, example, rollout, module, invocation, prompt in cursor.fetchall():
        key = (step, example)
        first = first_rollout.setdefault(key, {"rollout": rollout, "calls": {}})
        candidates = []
        if previous is not None and previous[0] == rollout:
            candidates.append(previous[1:])
        if first["rollout"] != rollout and (module, invocation) in first["calls"]:
            candidates.append(first["calls"][(module, invocation)])
        base, length = None, 0
        for candidate_id, text in candidates:
            common = len(os.path.commonprefix([text, prompt]))
            if common > length:
                base, length = candidate_id, common
        rows.append((call_id, base, length, prompt[length:]))
        if first["rollout"] == rollout:
            first["calls"][(module, invocation)] = (call_id, prompt)
        previous = (rollout, call_id, prompt)
    cursor.execute("CREATE TABLE bench_prompt_delta (call_id bigint PRIMARY KEY, base_id bigint,"
                   " prefix_len integer NOT NULL, suffix text NOT NULL)")
    with cursor.copy("COPY bench_prompt_delta (call_id, base_id, prefix_len, suffix) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    cursor.execute("VACUUM ANALYZE bench_prompt_delta")
    cursor.execute("SELECT pg_total_relation_size('bench_prompt_delta'), sum(octet_length(suffix))"
                   " FROM bench_prompt_delta")
    delta_table, suffix_raw = cursor.fetchone()
    return {"delta_table": delta_table, "suffix_raw": suffix_raw}


def report(sizes: dict, compression: str) -> None:
    calls = sizes["calls"]

    def per_call(key: str) -> str:
        return f"{sizes[key] / calls:10.0f} B/call  ({sizes[key] / 1e6:9.1f} MB)"

    print(f"\nTOAST compression: {compression}; {calls:,} calls, {sizes['distinct_prompts']:,} distinct prompts "
          f"({calls / max(1, sizes['distinct_prompts']):.1f} calls per prompt)")
    print(f"  prompt text, raw                 {per_call('prompt_raw')}")
    print(f"  prompt column, stored            {per_call('prompt_stored')}")
    print(f"  messages column, stored          {per_call('messages_stored')}")
    print(f"  completion column, stored        {per_call('completion_stored')}")
    print(f"before: runs_modulecall total      {per_call('before_total')}")
    print(f"          of which indexes         {per_call('before_indexes')}")
    print(f"after:  calls without prompt       {per_call('after_calls')}")
    print(f"        prompt_text (by hash)      {per_call('after_texts')}")
    print(f"        total (with old indexes)   {per_call('after_total')}")
    print(f"ratio before/after (by hash): {sizes['before_total'] / sizes['after_total']:.2f}x")
    delta_total = sizes["after_calls"] + sizes["before_indexes"] + sizes["delta_table"]
    sizes["delta_total"] = delta_total
    print(f"prefix+suffix: suffix text, raw    {per_call('suffix_raw')}")
    print(f"        prompt_delta table         {per_call('delta_table')}")
    print(f"        total (with old indexes)   {per_call('delta_total')}")
    print(f"ratio before/after (prefix+suffix): {sizes['before_total'] / delta_total:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=750)
    parser.add_argument("--database", default=BENCH_DATABASE,
                        help="throwaway database name (cohort_bench_*): another one lets two runs share a server")
    parser.add_argument("--compression", choices=("default", "pglz", "lz4"), default="default",
                        help="TOAST compression of the text columns (lz4 needs PostgreSQL 14+ built with lz4)")
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")
    with throwaway_database(args.database) as url:
        django_setup(url)
        from django.db import connection, connections

        from benchmarks.pages import seed

        try:
            if args.compression != "default":
                with connection.cursor() as cursor:
                    cursor.execute(f"SET default_toast_compression = {args.compression}")  # the bench_* tables
                    for column in ("prompt", "messages", "completion"):
                        cursor.execute(f"ALTER TABLE runs_modulecall ALTER COLUMN {column}"
                                       f" SET COMPRESSION {args.compression}")
            print(f"Seeding {args.steps} paper-scale steps (benchmarks/pages.py's seed) ...")
            seed(args.steps)
            with connection.cursor() as cursor:
                cursor.execute("SHOW default_toast_compression")
                compression = cursor.fetchone()[0]
                sizes = measure(cursor)
                sizes.update(measure_prefix_delta(cursor))
        finally:
            connections.close_all()
    report(sizes, compression)


if __name__ == "__main__":
    main()
