"""Time the pages of a 200-trial sweep (3 seeds, 100 steps each) in PostgreSQL: the sweep page, its
data.json (what the page refetches after each notice) and the compare page of the whole sweep as seed
groups with their bands (issue 44: p95 under 300 ms).

Seeds, in the throwaway database `cohort_bench_sweep` (created on DATABASE_URL's server, migrated,
dropped at the end): a finished TPE sweep over learning_rate (log range), group_size and lora_r with
200 complete trials x 3 seeds, each run with 100 stored steps of `reward/mean` and `loss` (60,000
StepMetric rows), bulk-inserted. Then it requests the pages in-process with Django's test client,
logged in as the owner (views, middleware, templates and JSON included; no network), and prints
p50/p95 per page against the target.

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/sweep_pages.py
[--trials 200] [--seeds 3] [--steps 100] [--repeat 40]``
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.pages import measure  # noqa: E402
from benchmarks.servers import django_setup, throwaway_database  # noqa: E402

BENCH_DATABASE = "cohort_bench_sweep"
TARGET_MS = 300.0


def seed(trials: int, seeds: int, steps: int):
    """The finished sweep, its trials, runs and every run's step metrics, in bulk."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from webapp.runs.models import Program, Run, StepMetric, Task
    from webapp.sweeps.models import Sweep, Trial, TrialRun

    rng = random.Random(0)
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    program = Program.objects.create(name="toy", title="Toy", modules=["solver"])
    task = Task.objects.create(name="toy-task", title="Toy", program=program)
    base = {"steps": steps, "seed": 0, "learning_rate": 1e-4, "group_size": 8, "lora_r": 16}
    space = {"learning_rate": {"low": 1e-6, "high": 1e-2, "log": True}, "group_size": {"values": [4, 8, 16]},
             "lora_r": {"low": 4, "high": 64, "log": True}}
    from webapp.projects.selectors import personal_project

    project = personal_project(user)
    sweep = Sweep.objects.create(owner=user, project=project, task=task, config=base, space=space, method="tpe", seeds=seeds,
                                 n_trials=trials, parallel=4, objective="reward/mean", state=Sweep.State.FINISHED,
                                 finished_at=timezone.now())
    trial_rows, run_rows, curves = [], [], []
    for number in range(trials):
        params = {"learning_rate": 10 ** rng.uniform(-6, -2), "group_size": rng.choice([4, 8, 16]),
                  "lora_r": int(2 ** rng.uniform(2, 6))}
        ceiling = 0.2 + 0.7 / (1 + abs(math.log10(params["learning_rate"]) + 4))
        per_seed = {str(s): {str(t): ceiling * (1 - math.exp(-t / 20)) + rng.gauss(0, 0.02) for t in range(1, steps + 1)}
                    for s in range(seeds)}
        value = sum(series[str(steps)] for series in per_seed.values()) / seeds
        trial_rows.append(Trial(sweep=sweep, number=number, params=params, state=Trial.State.COMPLETE, value=value,
                                seed_series=per_seed, finished_at=timezone.now(),
                                intermediate={str(t): sum(v[str(t)] for v in per_seed.values()) / seeds
                                              for t in range(1, steps + 1)}))
        for s in range(seeds):
            run_rows.append(Run(owner=user, task=task, project=None, state=Run.State.SUCCEEDED, total_steps=steps,
                                current_step=steps, config={**base, **params, "seed": s}, last_reward=per_seed[str(s)][str(steps)],
                                name=f"trial {number} seed {s}"))
            curves.append(per_seed[str(s)])
    made = Trial.objects.bulk_create(trial_rows)
    for run in run_rows:
        run.project = project
    runs = Run.objects.bulk_create(run_rows, batch_size=1000)
    TrialRun.objects.bulk_create([TrialRun(trial=made[i // seeds], run=run, seed=i % seeds, judged_step=steps)
                                  for i, run in enumerate(runs)], batch_size=1000)
    metrics = [StepMetric(run=run, attempt=1, step=t, seq=t,
                          metrics={"reward/mean": curve[str(t)], "loss": 1 - curve[str(t)]})
               for run, curve in zip(runs, curves, strict=True) for t in range(1, steps + 1)]
    StepMetric.objects.bulk_create(metrics, batch_size=5000)
    return user, sweep, len(metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--database", default=BENCH_DATABASE)
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after setup, as the ASGI server does")
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")  # no query log: time what production would run
    with throwaway_database(args.database) as url:
        django_setup(url)
        from django.db import connections
        from django.test import Client
        from django.urls import reverse

        try:
            print(f"Seeding a sweep of {args.trials} trials x {args.seeds} seeds x {args.steps} steps ...")
            user, sweep, rows = seed(args.trials, args.seeds, args.steps)
            print(f"  {rows:,} step rows")
            client = Client()
            client.force_login(user)
            if args.gc_freeze:
                import gc

                gc.freeze()
            compare = reverse("runs:compare") + f"?sweep={sweep.pk}&metrics=reward/mean"
            results = [
                measure("sweep page", lambda: reverse("sweeps:detail", args=[sweep.pk]), client, args.repeat),
                measure("sweep data.json", lambda: reverse("sweeps:data", args=[sweep.pk]), client, args.repeat),
                measure("compare page (whole sweep, seed bands)", lambda: compare, client, args.repeat),
                measure("compare page (band=minmax)", lambda: compare + "&band=minmax", client, args.repeat),
            ]
        finally:
            connections.close_all()
    print(f"\n{'page':44} {'p50 ms':>9} {'p95 ms':>9}  n   p95 / target ({TARGET_MS:.0f} ms)")
    for name, p50, p95, n in results:
        print(f"{name:44} {p50:9.1f} {p95:9.1f} {n:3d}  {p95 / TARGET_MS:.2f}")


if __name__ == "__main__":
    main()
