"""Time the run pages on a run of paper scale, in PostgreSQL.

Seeds, in the throwaway database `cohort_bench_pages` (created on DATABASE_URL's server, migrated,
dropped at the end):

- an MMGRPO run at the paper's scale (MMGRPO Section 5: 750 steps x 4 examples x 12 rollouts): a
  HoVer-style program whose rollouts make 4-5 hops of `create_query` + `summarize` and a final
  `verify` call (7-11 calls, about 9), module-level groups with PadGroups `fill` to G=12, GRPO
  advantages, all built with the trainer's own code (36,000 rollouts, about 324,000 calls and as many
  group members); rows go in through the real ingest service, `step_events_ingest`, 25 steps a call;
- one MHGPO-scale step (MHGPO Section 4: 512 questions x 4 rollouts x 3 agents, Fork-on-First).

Then it requests the pages in-process with Django's test client, logged in as the owner (views,
middleware, templates and JSON encoding included; no network), and prints p50/p95 per page:

- run data: `metrics.json?max_points=2000` (what the live run page loads first) and `heatmap.json`;
- inspector: the trajectory grid of a random (step, example); group: a random module-level group;
- the same two on the MHGPO step, and that step's page (512 examples);
- CSV export of the whole run's metrics, streamed to the end; the rollouts JSONL export once;
- the read API (`GET /api/runs/<id>/metrics/`, with a personal token): every stored step of every
  series, and `max_points=2000`.
- the runs table at 10,000 runs (`bulk_create`d, no steps) in 50 projects of 200, owners spread over
  each project's 6 members (benchmarks/lab_tables.py `seed_runs`); the user is a member of 5 of them, so
  sees 1,000: page 1 as that member and as staff (who sees all 10,000), a page sorted by best reward, a
  config-and-tag search and a free-text search. `--only-runs-table` skips the paper-scale run.

Targets on this machine: run data (the API metrics included) p95 < 300 ms; inspector and group pages
p95 < 150 ms; runs table p95 < 150 ms.

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/pages.py
[--steps 750] [--repeat 40] [--database cohort_bench_pages]``
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import mhgpo_step_event  # noqa: E402
from benchmarks.servers import django_setup, planner_statistics, throwaway_database  # noqa: E402
from trainer.algorithms.advantages import grpo_advantages  # noqa: E402
from trainer.algorithms.grouping import form_module_level_groups  # noqa: E402
from trainer.algorithms.groups import assign_advantages, group_reward_arrays  # noqa: E402
from trainer.algorithms.metrics import annotate_group_stats, module_group_metrics, zero_variance_share  # noqa: E402
from trainer.rollouts.trajectory import ModuleCall, Trajectory, jsonable  # noqa: E402

BENCH_DATABASE = "cohort_bench_pages"
EXAMPLES, ROLLOUTS = 4, 12
STEPS_PER_INGEST = 25
REWARDS = ("recall", "format")
TARGETS_MS = {"run data": 300.0, "inspector": 150.0, "group": 150.0, "runs": 150.0}
TABLE_RUNS, TABLE_VISIBLE = 10_000, 1_000
WORDS = ("the", "of", "claim", "passage", "river", "born", "city", "population", "century", "museum", "novel",
         "author", "first", "largest", "capital", "film", "directed", "by", "in", "was", "team", "album")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def paper_step_event(step: int, rng: random.Random) -> dict:
    """One MMGRPO step of the HoVer-style program: 4 examples x 12 rollouts, about 9 calls each."""
    trajectories = []
    for e in range(EXAMPLES):
        claim = _text(rng, 40)
        for r in range(ROLLOUTS):
            calls, notes = [], ""
            for hop in range(rng.choice((3, 4, 5))):
                query = "Query: " + _text(rng, 6)
                calls.append(ModuleCall("create_query", hop, f"Claim: {claim}\nNotes: {notes}\n", query, True))
                note = "Notes: " + _text(rng, 12)
                calls.append(ModuleCall("summarize", hop, f"Claim: {claim}\nPassages: {_text(rng, 60)}\n", note, True))
                notes += note
            calls.append(ModuleCall("verify", 0, f"Claim: {claim}\nNotes: {notes}\n", "Verdict: supported", True))
            failed = rng.random() < 0.08
            if failed:
                calls[-1].parsed_ok = False
            for j, call in enumerate(calls):
                call.call_id = f"s{step}e{e}r{r}c{j}"
            recall = None if failed else rng.choice((0.0, 0.5, 1.0))
            trajectories.append(Trajectory(
                f"claim-{step}-{e}", calls, rewards={"recall": recall, "format": 0.0 if failed else 1.0},
                failed=failed, trajectory_id=f"s{step}e{e}r{r}", total_reward=-1.0 if failed else recall + 1.0,
                final_output={"titles": [_text(rng, 3)]}))
    groups = form_module_level_groups(trajectories, group_size=ROLLOUTS, padding="fill", rng=step)
    rewards, ids = group_reward_arrays(groups, reward_names=list(REWARDS))
    advantages = grpo_advantages(rewards, ids)
    assign_advantages(groups, advantages)
    annotate_group_stats(groups, rewards, reward_names=list(REWARDS))
    totals = [t.reward for t in trajectories]
    metrics = {"reward/mean": float(np.mean(totals)), "failure_rate": float(np.mean([t.failed for t in trajectories])),
               "loss": rng.random(), "kl": rng.random() / 100, "grad_norm": rng.random(), "lr": 1e-5,
               "tokens_per_s": 5000 + rng.random() * 100, "groups": float(len(groups))}
    metrics.update(module_group_metrics(groups, rewards, advantages))
    metrics["zero_var_share"] = zero_variance_share(np.nansum(rewards, axis=1), ids)
    return jsonable({"type": "step", "attempt": 1, "step": step, "metrics": metrics,
                     "rollouts": [t.to_dict() for t in trajectories], "groups": [g.to_dict() for g in groups]})


def seed(steps: int):
    from django.contrib.auth import get_user_model

    from webapp.projects.services import personal_project_ensure
    from webapp.runs.ingest.store import step_events_ingest
    from webapp.runs.models import ModuleCall as CallRow
    from webapp.runs.models import Program, Rollout, Run, Task

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    program = Program.objects.create(name="bench-hover", title="Bench HoVer",
                                     modules=["create_query", "summarize", "verify"])
    task = Task.objects.create(name="bench-hover", title="Bench HoVer", program=program)
    paper = Run.objects.create(owner=user, project=personal_project_ensure(user), task=task, name="paper scale", state=Run.State.SUCCEEDED, total_steps=steps,
                               config={"strategy": "grpo", "padding": "fill", "group_size": ROLLOUTS,
                                       "rewards": [{"name": n, "weight": 1.0} for n in REWARDS]})
    rng = random.Random(0)
    started = time.perf_counter()
    for first in range(1, steps + 1, STEPS_PER_INGEST):
        step_events_ingest(paper, [paper_step_event(s, rng) for s in range(first, min(first + STEPS_PER_INGEST, steps + 1))])
        print(f"\r  seeded {min(first + STEPS_PER_INGEST - 1, steps)}/{steps} steps "
              f"({time.perf_counter() - started:.0f} s)", end="", flush=True)
    print()
    mhgpo = Run.objects.create(owner=user, project=personal_project_ensure(user), task=task, name="mhgpo step", state=Run.State.SUCCEEDED, total_steps=1,
                               config={"strategy": "mhgpo", "sampling": "fof", "group_size": 4})
    step_events_ingest(mhgpo, [mhgpo_step_event(1)])
    for run in (paper, mhgpo):
        print(f"  {run.name}: {Rollout.objects.filter(run=run).count():,} rollouts, "
              f"{CallRow.objects.filter(rollout__run=run).count():,} calls, {run.groups.count():,} groups")
    planner_statistics()
    return user, paper, mhgpo



def seed_runs_table(user, runs: int = TABLE_RUNS) -> int:
    """`runs` runs without steps, as the runs table sees them (benchmarks/lab_tables.py `seed_runs`): in
    50 projects of 200, owners spread over each project's members; `user` a member of 5 of them. Returns
    how many of them `user` sees."""
    from benchmarks.lab_tables import seed_runs

    return seed_runs(user, runs=runs)["visible"]


def runs_table_measures(user, client, repeat: int) -> list[tuple]:
    """The runs table at TABLE_RUNS runs: as a member of 5 of its 50 projects (TABLE_VISIBLE runs), and as
    staff (who sees all)."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from webapp.runs.selectors import run_list_for_user

    started = time.perf_counter()
    own = run_list_for_user(user).count()  # the paper-scale runs, in the user's personal project
    seeded = seed_runs_table(user)
    visible = run_list_for_user(user).count()
    assert seeded == TABLE_VISIBLE and visible == own + seeded, (own, seeded, visible)
    print(f"  runs table: {TABLE_RUNS:,} runs in {time.perf_counter() - started:.1f} s, {visible:,} of them visible to the user")
    staff = Client()
    staff.force_login(get_user_model().objects.create_user("bench-staff", is_staff=True))
    table = reverse("runs:list")
    rng = random.Random(3)
    return [
        measure("runs table: page 1 (member, 1,000 runs)", lambda: table, client, repeat),
        measure("runs table: page 1 (staff, 10,000 runs)", lambda: table, staff, repeat),
        measure("runs table: sorted by best reward, page 1-20 (staff)",
                lambda: f"{table}?sort=-best_reward&page={rng.randint(1, 20)}", staff, repeat),
        measure("runs table: sorted by GPU-hours (staff)", lambda: f"{table}?sort=-gpu_hours", staff, repeat),
        measure("runs table: search estimator=gdpo tag:sweep-7 (staff)",
                lambda: f"{table}?q=estimator%3Dgdpo+tag%3Asweep-7", staff, repeat),
        measure("runs table: search 'ablation' (member)", lambda: f"{table}?q=ablation", client, repeat),
    ]


def timed(client, url: str, *, stream: bool = False) -> float:
    started = time.perf_counter()
    response = client.get(url)
    if stream:
        size = sum(len(chunk) for chunk in response.streaming_content)
        assert size > 0
    else:
        assert response.status_code == 200, (url, response.status_code)
        _ = response.content
    return (time.perf_counter() - started) * 1000.0


def measure(name: str, make_url: Callable[[], str], client, repeat: int, *, stream: bool = False) -> tuple:
    timed(client, make_url(), stream=stream)  # warm-up (template compilation, first connection)
    samples = sorted(timed(client, make_url(), stream=stream) for _ in range(repeat))
    p50 = statistics.median(samples)
    p95 = samples[min(len(samples) - 1, int(round(0.95 * (len(samples) - 1))))]
    return name, p50, p95, len(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=750)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--only-runs-table", action="store_true", help="time the runs table only (seeds in seconds)")
    parser.add_argument("--database", default=BENCH_DATABASE,
                        help="throwaway database name (cohort_bench_*): another one lets two runs share a server")
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")  # no query log: time what production would run
    if args.only_runs_table:
        return runs_table_only(args)
    with throwaway_database(args.database) as url:
        django_setup(url)
        from django.db import connections
        from django.test import Client
        from django.urls import reverse

        from webapp.runs.models import Group, Rollout

        try:
            print(f"Seeding {args.steps} steps x {EXAMPLES} examples x {ROLLOUTS} rollouts, and one MHGPO step ...")
            user, paper, mhgpo = seed(args.steps)
            client = Client()
            client.force_login(user)
            from webapp.api.services import token_create

            api = Client(headers={"Authorization": f"Bearer {token_create(user=user, name='bench')[1]}"})
            rng = random.Random(1)
            paper_examples = list(Rollout.objects.filter(run=paper).values_list("step", "example_id").distinct())
            paper_groups = list(Group.objects.filter(run=paper).values_list("pk", flat=True))
            mhgpo_groups = list(Group.objects.filter(run=mhgpo).values_list("pk", flat=True))

            def inspector(run, pairs):
                def url():
                    step, example = rng.choice(pairs)
                    return reverse("runs:trajectories", args=[run.pk, step]) + f"?example={example}"
                return url

            def zoom():
                first = rng.randint(1, max(1, args.steps - 100))
                return (reverse("runs:metrics", args=[paper.pk])
                        + f"?series=reward/mean,loss&from_step={first}&to_step={first + 100}")

            results = [
                measure("run data: metrics.json?max_points=2000", lambda: reverse("runs:metrics", args=[paper.pk])
                        + "?max_points=2000", client, args.repeat),
                measure("run data: API metrics (full)", lambda: f"/api/runs/{paper.pk}/metrics/", api, args.repeat),
                measure("run data: API metrics?max_points=2000",
                        lambda: f"/api/runs/{paper.pk}/metrics/?max_points=2000", api, args.repeat),
                measure("run data: heatmap.json", lambda: reverse("runs:heatmap", args=[paper.pk]) + "?family=group_var",
                        client, args.repeat),
                measure("run data: zoom (2 series, 100 steps)", zoom, client, args.repeat),
                measure("inspector (paper run)", inspector(paper, paper_examples), client, args.repeat),
                measure("group (paper run)", lambda: reverse("runs:group", args=[paper.pk, rng.choice(paper_groups)]),
                        client, args.repeat),
                measure("inspector (MHGPO step)", inspector(mhgpo, [(1, f"q{i}") for i in range(512)]), client,
                        args.repeat),
                measure("group (MHGPO step)", lambda: reverse("runs:group", args=[mhgpo.pk, rng.choice(mhgpo_groups)]),
                        client, args.repeat),
                measure("step page (MHGPO step, 512 examples)", lambda: reverse("runs:step", args=[mhgpo.pk, 1]), client,
                        max(5, args.repeat // 4)),
                measure("CSV export (whole run)", lambda: reverse("runs:export_metrics", args=[paper.pk]), client,
                        max(5, args.repeat // 4), stream=True),
            ]
            results += runs_table_measures(user, client, args.repeat)
            started = time.perf_counter()
            response = client.get(reverse("runs:export_rollouts", args=[paper.pk]))
            size = sum(len(chunk) for chunk in response.streaming_content)
            jsonl_s = time.perf_counter() - started
        finally:
            connections.close_all()
    print_results(results)
    print(f"rollouts JSONL export (whole run, once): {size / 1e6:.0f} MB in {jsonl_s:.1f} s")


def print_results(results: list[tuple]) -> None:
    print(f"\n{'page':56} {'p50 ms':>9} {'p95 ms':>9}  n   target")
    for name, p50, p95, n in results:
        kind = "run data" if name.startswith(("run data: metrics", "run data: API")) else name.split(" ")[0]
        target = TARGETS_MS.get(kind)
        verdict = "" if target is None else f"p95 < {target:.0f} ms: {'yes' if p95 < target else 'NO'}"
        print(f"{name:56} {p50:9.1f} {p95:9.1f} {n:3d}  {verdict}")


def runs_table_only(args) -> None:
    """`--only-runs-table`: seed the 10,000 runs alone and time the runs table."""
    with throwaway_database(args.database) as url:
        django_setup(url)
        from django.contrib.auth import get_user_model
        from django.db import connections
        from django.test import Client

        try:
            user = get_user_model().objects.create_user("bench", password="bench-password-1")
            client = Client()
            client.force_login(user)
            results = runs_table_measures(user, client, args.repeat)
        finally:
            connections.close_all()
    print_results(results)


if __name__ == "__main__":
    main()
