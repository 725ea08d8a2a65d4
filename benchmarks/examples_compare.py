"""Time "where two runs part" and "one example across runs" (issue 57, items 2 and 1) for two runs at
the MMGRPO paper's scale, in PostgreSQL. Target: p95 under 300 ms for each.

Seeds, in the throwaway database `cohort_bench_examples_compare` (created on DATABASE_URL's server,
migrated, dropped at the end), two runs of one three-module task (a GDPO and a GRPO run), each of 750
steps drawing 12 examples of a 1,000-example dataset with 12 rollouts each: 108,000 rollouts and
324,000 module calls a run, every (step, example) with its compressed texts (a CallText row, as the
ingest writes them) and every step its metric row. The rows go in by COPY (ids given, the sequences
moved on after), the bulk path: the real ingest would take many minutes for the same rows and write
nothing these two readers read differently. Each rollout's reward is right (2.0) with a probability
that rises over training, faster for the examples the GDPO run learns.

Two more runs of the same size are stored first (`--other-runs`): a server holds more runs than the
two compared, and a table of these two alone would make every plan read the whole table.

Then, 30 times each (after one warm-up), in-process, without and then with the covering index this
reader asks of the Rollout model (`COVERING_INDEX`; only with it when the model has it already):

- **part-ways**: `webapp.runs.examples.partways.partways([A], [B])`, the whole ranked table;
- **across**: `webapp.runs.examples.across.example_across` on the table's first example, both runs;
- the part-ways page and `GET /api/examples/diff/` through Django's test client (views, middleware
  and encoding included);
- **baseline**: `SELECT count(*)` of the two runs' rollouts, the least a reader of every rollout row
  could cost.

It prints p50 and p95 (ms) per measure and each one's ratio to the baseline's p50.

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/examples_compare.py
[--steps 750] [--repeat 30]``
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.servers import django_setup, planner_statistics, throwaway_database  # noqa: E402

BENCH_DATABASE = "cohort_bench_examples_compare"
MODULES = ("rewriter", "retriever", "answerer")
REWARDS = ({"name": "correct", "weight": 1.0}, {"name": "format", "weight": 1.0})
DATASET = 1000
EXAMPLES_PER_STEP = 12
ROLLOUTS = 12
TARGET_MS = 300.0


def _right_probability(estimator: str, example: int, fraction: float) -> float:
    """How likely a rollout is right: hard examples (a third) only the GDPO run learns, late in training."""
    if example % 3 == 0:
        return 0.05 + (0.8 * fraction if estimator == "gdpo" else 0.0)
    return min(0.95, 0.2 + 0.6 * fraction)


def rows_of_run(run_id: int, estimator: str, steps: int, seed: int, first_rollout_id: int):
    """(rollouts, calls, texts) rows of one run, as tuples in the tables' column order."""
    rng = random.Random(seed)
    rollouts, calls, texts = [], [], []
    rollout_id = first_rollout_id
    for step in range(1, steps + 1):
        for example in rng.sample(range(DATASET), EXAMPLES_PER_STEP):
            example_id = f"q{example:04d}"
            p = _right_probability(estimator, example, step / steps)
            call_texts = []
            for _ in range(ROLLOUTS):
                index = len(rollouts) % (EXAMPLES_PER_STEP * ROLLOUTS)
                right = rng.random() < p
                reward = 2.0 if right else rng.choice((0.0, 1.0))
                rollouts.append((rollout_id, run_id, 1, step, index, example_id, reward, False))
                for position, module in enumerate(MODULES):
                    calls.append((rollout_id, position, module, 0, True, 0.0, reward, reward - 1.0))
                    completion = f"{module} answer {'right' if right else 'wrong'} {rng.randint(0, 99)}"
                    call_texts.append((index, f"{module}: question {example_id}", None, completion))
                rollout_id += 1
            texts.append((run_id, 1, step, example_id, call_texts))
    return rollouts, calls, texts


def seed(user, task, name: str, estimator: str, steps: int, seed_value: int):
    from django.db import connection

    from webapp.projects.services import personal_project_ensure
    from webapp.runs.ingest.texts import encode_texts
    from webapp.runs.models import CallText, ModuleCall, Rollout, Run, StepMetric

    run = Run.objects.create(owner=user, project=personal_project_ensure(user), task=task, name=name,
                             state=Run.State.SUCCEEDED, total_steps=steps, current_step=steps,
                             config={"strategy": "grpo", "estimator": estimator, "group_size": ROLLOUTS,
                                     "rewards": [dict(r) for r in REWARDS]})
    started = time.perf_counter()
    first = (Rollout.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
    rollouts, calls, texts = rows_of_run(run.pk, estimator, steps, seed_value, first)
    StepMetric.objects.bulk_create([StepMetric(run=run, attempt=1, step=s, seq=s, metrics={"reward/mean": 0.5})
                                    for s in range(1, steps + 1)], batch_size=5000)
    CallText.objects.bulk_create([CallText(run_id=r, attempt=a, step=s, example_id=e, data=encode_texts(t))
                                  for r, a, s, e, t in texts], batch_size=2000)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            with cursor.copy("COPY runs_rollout (id, run_id, attempt, step, index, example_id, total_reward, failed, "
                             "teacher, fork_point, sampling, reward_components, error) FROM STDIN") as copy:
                for row in rollouts:
                    copy.write_row((*row, "", "", "{}", "{}", ""))
            with cursor.copy("COPY runs_modulecall (rollout_id, position, module, invocation_index, parsed_ok, "
                             "specific_reward, propagated_reward, advantage) FROM STDIN") as copy:
                for row in calls:
                    copy.write_row(row)
            for table in ("runs_rollout", "runs_modulecall"):
                cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
    else:  # SQLite (the smoke test's tiny size): the same rows by bulk_create
        Rollout.objects.bulk_create([Rollout(id=i, run_id=r, attempt=a, step=s, index=x, example_id=e, total_reward=t,
                                             failed=f) for i, r, a, s, x, e, t, f in rollouts], batch_size=2000)
        ModuleCall.objects.bulk_create([ModuleCall(rollout_id=i, position=p, module=m, invocation_index=v, parsed_ok=o,
                                                   specific_reward=sr, propagated_reward=pr, advantage=ad)
                                        for i, p, m, v, o, sr, pr, ad in calls], batch_size=2000)
    print(f"  {name}: {len(rollouts):,} rollouts, {len(calls):,} module calls, {len(texts):,} text rows "
          f"({time.perf_counter() - started:.0f} s)")
    return run


def seed_pair(steps: int, *, others: int = 0):
    """(user, run A, run B): a GDPO and a GRPO run of one task, after `others` runs of the same size (a
    server holds more than the two runs compared: their rows are no longer the whole table)."""
    from django.contrib.auth import get_user_model

    from webapp.runs.models import Program, Task

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    program = Program.objects.create(name="bench-chain", title="Bench chain", modules=list(MODULES))
    task = Task.objects.create(name="bench-chain", title="Bench chain", program=program)
    for i in range(others):
        seed(user, task, f"other {i}", "grpo", steps, 10 + i)
    return user, seed(user, task, "gdpo", "gdpo", steps, 1), seed(user, task, "grpo", "grpo", steps, 2)


# The index this benchmark asks of the Rollout model (the lead adds it with a migration): the aggregate
# then reads a run's rollouts in (example, step) order from the index alone.
COVERING_INDEX = ("CREATE INDEX IF NOT EXISTS bench_rollout_example_cover ON runs_rollout "
                  "(run_id, example_id, step) INCLUDE (attempt, total_reward, teacher)")


def covering_index_present() -> bool:
    """Whether runs_rollout already has an index on (run_id, example_id, step) covering the aggregate's
    columns (once the migration exists, the benchmark measures it as shipped)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'runs_rollout'")
        return any("(run_id, example_id, step" in d and "total_reward" in d for (d,) in cursor.fetchall())


def _ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def timed(fn, repeat: int) -> tuple[float, float]:
    """(p50, p95) in ms of `repeat` calls after one warm-up."""
    fn()
    samples = sorted(_ms(fn) for _ in range(repeat))
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95


def measures(user, a, b) -> list[tuple[str, object]]:
    """(name, a call) per measure, the baseline first."""
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    from webapp.runs.examples.partways import partways

    def baseline():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runs_rollout WHERE run_id IN (%s, %s)", [a.pk, b.pk])
            return cursor.fetchone()[0]

    top = partways([a], [b]).rows[0].example_id
    client = Client()
    client.force_login(user)
    query = f"?a={a.pk}&b={b.pk}"

    def page():
        assert client.get(reverse("runs:examples_partways") + query).status_code == 200

    def api():
        assert client.get(reverse("api:examples_diff") + query).status_code == 200

    found = [("baseline: SELECT count(*) of both runs' rollouts", baseline),
             ("part-ways: partways([A], [B]), the ranked table", lambda: partways([a], [b]))]
    try:
        from webapp.runs.examples.across import Window, example_across
    except ImportError:  # item 1 not there: the part-ways table alone
        print("  (webapp.runs.examples.across is not there: the across-runs view is not timed)")
    else:
        found.append((f"across: example_across([A, B], {top!r})",
                      lambda: example_across([a, b], [Window(a.pk), Window(b.pk)], top)))
    found += [("page: GET /runs/examples/partways", page), ("API: GET /api/examples/diff/ (first page)", api)]
    return found


def run_all(user, a, b, repeat: int) -> dict[str, tuple[float, float]]:
    return {name: timed(fn, repeat) for name, fn in measures(user, a, b)}


def report(results: dict[str, tuple[float, float]]) -> None:
    base = next(iter(results.values()))[0]
    print(f"{'measure':62} {'p50 ms':>9} {'p95 ms':>9} {'p50 / baseline':>15}")
    for name, (p50, p95) in results.items():
        print(f"{name:62} {p50:9.1f} {p95:9.1f} {p50 / base:14.1f}x")
    for name, (_, p95) in results.items():
        if name.startswith(("part-ways", "across")):
            verdict = "under" if p95 < TARGET_MS else "OVER"
            print(f"  {name.split(':')[0]}: p95 {p95:.0f} ms, {verdict} the {TARGET_MS:.0f} ms target")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=750)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--other-runs", type=int, default=2, help="runs of the same size stored before the two")
    parser.add_argument("--database", default=BENCH_DATABASE)
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")
    with throwaway_database(args.database) as url:
        django_setup(url)
        from django.db import connections

        try:
            user, a, b = seed_pair(args.steps, others=args.other_runs)
            planner_statistics()
            if covering_index_present():
                print("runs_rollout has the covering index (run, example_id, step) INCLUDE (attempt, total_reward, "
                      "teacher)")
                report(run_all(user, a, b, args.repeat))
            else:
                print("Without a covering index (the Rollout model's indexes as they are):")
                report(run_all(user, a, b, args.repeat))
                from django.db import connection

                with connection.cursor() as cursor:
                    cursor.execute(COVERING_INDEX)
                planner_statistics()
                print("With the covering index asked of the Rollout model: " + COVERING_INDEX)
                report(run_all(user, a, b, args.repeat))
        finally:
            connections.close_all()


if __name__ == "__main__":
    main()
