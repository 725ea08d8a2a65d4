"""Time a run's chart data at 1x, 10x and 100x the MMGRPO paper's length, in PostgreSQL.

Seeds, in the throwaway database `cohort_bench_run_data` (created on DATABASE_URL's server, migrated,
dropped at the end), runs of 750, 7,500 and 75,000 steps whose steps carry the 56 metric keys of a
three-module run (reward and its components, per-module format penalty, parse rate, group variance,
similarity, zero-variance share and advantage resolution, the optimizer's, sampling's, the system's and
the per-token ones), stored through the real ingest (`step_events_ingest`, 250 steps a call), which
writes the column blocks (webapp/runs/charts/blocks.py) as it goes.

Then, per run, in-process with Django's test client (views, middleware and encoding included):

- `metrics.json?max_points=2000`: what the run page loads first (every series thinned to 2,000
  points with MinMaxLTTB, and the wall time and tokens seen of each point drawn);
- `heatmap.json?family=group_var`; a zoom (2 series, a 10% window); a live page's refetch (`after=`);
- **before**: the same overview computed as Cohort did before the blocks (every row's JSON read and
  decoded, then the same thinning), in the same sitting;
- **baseline**: a bare `COPY (SELECT seq, step, created_at, metrics ...) TO STDOUT` of the run's rows,
  the least any answer that reads every row could cost.

It prints p50 and p95 per request and the overview's ratio to the baseline and to before.
Target: the 100x run's overview well under a second.

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/run_data.py
[--scales 750,7500,75000] [--repeat 7]``
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

BENCH_DATABASE = "cohort_bench_run_data"
MODULES = ("rewriter", "retriever", "answerer")
STEPS_PER_INGEST = 250
MAX_POINTS = 2000


def step_metrics(step: int, rng: random.Random) -> dict[str, float]:
    """The 56 keys a three-module run reports each step (trainer/run/loop.py's families)."""
    m = {"reward/mean": rng.random(), "loss": rng.random(), "kl": 0.0, "grad_norm": rng.random(), "lr": 1e-5,
         "clip_fraction": 0.0, "mismatch/abs_logprob_diff": 1e-6 * rng.random(), "mismatch/kl": 1e-7,
         "is_weight/mean": 1.0, "is_weight/truncated": 0.0, "completion_tokens": 300 + rng.randint(0, 50),
         "truncated": 0.0, "failure_rate": rng.random() * 0.1, "error_rate": 0.0, "tokens_per_s": 5000 * rng.random(),
         "time": 0.3 + rng.random(), "zero_var_share": rng.random(), "groups": 12.0, "optimizer_steps": 1.0,
         "adv_resolution": 1.0}
    for component in ("char_f1", "exact_match", "format"):
        m[f"reward/{component}"] = rng.random()
    for module in MODULES:
        for family in ("format_penalty", "parse_ok", "group_var", "similarity", "zero_var_share", "adv_resolution"):
            m[f"{family}/{module}"] = rng.random()
    for name in ("gpu_mem_allocated_gb", "gpu_mem_reserved_gb", "gpu_mem_peak_gb", "sample_s", "update_s", "rss_gb"):
        m[f"system/{name}"] = rng.random()
    for name in ("mean", "p10", "p50", "p90", "best", "worst"):
        m[f"tokens/entropy/{name}"] = rng.random()
    m.update({"tokens/mismatch/share": 0.0, "tokens/mismatch/max": 0.0, "tokens/prob/mean": rng.random()})
    if step == 1234:
        m["reward/mean"] = 40.0  # a spike the thinned overview must keep
    return m


def seed(user, task, steps: int):
    from webapp.projects.services import personal_project_ensure
    from webapp.runs.ingest.store import step_events_ingest
    from webapp.runs.models import Run

    run = Run.objects.create(owner=user, project=personal_project_ensure(user), task=task, name=f"{steps} steps", state=Run.State.SUCCEEDED,
                             total_steps=steps, config={})
    rng = random.Random(steps)
    started = time.perf_counter()
    for first in range(1, steps + 1, STEPS_PER_INGEST):
        last = min(first + STEPS_PER_INGEST, steps + 1)
        step_events_ingest(run, [{"type": "step", "attempt": 1, "step": s, "metrics": step_metrics(s, rng)}
                                 for s in range(first, last)])
    print(f"  {steps:,} steps stored through the ingest in {time.perf_counter() - started:.1f} s", flush=True)
    planner_statistics()  # what autovacuum would have done after the load
    return run


def overview_before(run) -> dict:
    """The overview as computed before the blocks: every row read and decoded, then thinned."""
    import numpy as np

    from webapp.runs.charts.series import Series, series_payload
    from webapp.runs.models import StepMetric

    per_key: dict[str, dict[int, float | None]] = {}
    rows = StepMetric.objects.filter(run=run).order_by("seq").values_list("step", "created_at", "metrics")
    created = {}
    for step, at, metrics in rows.iterator(chunk_size=2000):
        created[step] = at
        for key, value in metrics.items():
            per_key.setdefault(key, {})[step] = value
    out = {}
    for key, by_step in per_key.items():
        steps = np.fromiter(sorted(by_step), dtype=np.int64)
        values = np.asarray([np.nan if by_step[s] is None else by_step[s] for s in steps.tolist()], dtype=float)
        out[key] = series_payload(Series(steps, values), MAX_POINTS)
    import json

    return json.loads(json.dumps(out))  # encoded as JsonResponse did


def bare_copy(run) -> int:
    from django.db import connection

    from webapp.runs.models import StepMetric

    table = connection.ops.quote_name(StepMetric._meta.db_table)
    size = 0
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY (SELECT seq, step, created_at, metrics FROM {table} WHERE run_id = {int(run.pk)} "
                         "ORDER BY seq) TO STDOUT") as copy:
            for block in copy:
                size += len(block)
    return size


def timed(fn, repeat: int) -> tuple[float, float]:
    fn()  # warm-up
    samples = sorted(_ms(fn) for _ in range(repeat))
    return statistics.median(samples), samples[min(len(samples) - 1, int(round(0.95 * (len(samples) - 1))))]


def _ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000.0


def measure_run(client, run, steps: int, repeat: int) -> None:
    base = f"/runs/{run.pk}/"

    def get(url):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response.content

    overview = get(base + f"metrics.json?max_points={MAX_POINTS}")
    assert b"40.0" in overview, "the spike at step 1234 is missing from the overview"
    lo = steps // 2
    rows = [
        ("overview: metrics.json?max_points=2000", lambda: get(base + f"metrics.json?max_points={MAX_POINTS}")),
        ("before: every row decoded, then thinned", lambda: overview_before(run)),
        ("baseline: bare COPY of the run's rows", lambda: bare_copy(run)),
        ("heatmap.json (group_var)", lambda: get(base + "heatmap.json?family=group_var")),
        ("zoom: 2 series, 10% of the run",
         lambda: get(base + f"metrics.json?series=reward/mean,loss&from_step={lo}&to_step={lo + steps // 10}")),
        ("live refetch: after=<last seq - 5>", lambda: get(base + f"metrics.json?after={steps - 5}")),
    ]
    results = {name: timed(fn, repeat) for name, fn in rows}
    for name, (p50, p95) in results.items():
        print(f"{steps:>8,} {name:48} {p50:9.1f} {p95:9.1f}", flush=True)
    now, before, copy = (results[name][0] for name, _ in rows[:3])
    print(f"{steps:>8,} overview / before: {now / before:.2f}x; overview / bare COPY: {now / copy:.2f}x; "
          f"answer {len(overview) / 1e6:.1f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scales", default="750,7500,75000", help="run lengths in steps, comma-separated")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--database", default=BENCH_DATABASE)
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")
    scales = [int(s) for s in args.scales.split(",")]
    with throwaway_database(args.database) as url:
        django_setup(url)
        from django.contrib.auth import get_user_model
        from django.db import connections
        from django.test import Client

        from webapp.runs.models import Program, Task

        try:
            user = get_user_model().objects.create_user("bench", password="bench-password-1")
            program = Program.objects.create(name="bench", title="Bench", modules=list(MODULES))
            task = Task.objects.create(name="bench", title="Bench", program=program)
            client = Client()
            client.force_login(user)
            print(f"{'run':>8} {'request':48} {'p50 ms':>9} {'p95 ms':>9}")
            for steps in scales:
                measure_run(client, seed(user, task, steps), steps, args.repeat)
        finally:
            connections.close_all()


if __name__ == "__main__":
    main()
