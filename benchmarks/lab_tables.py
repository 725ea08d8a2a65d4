"""Time the runs table and the API's run list for a lab's user, now and on a baseline revision.

Seeds, in a throwaway database (PostgreSQL: `cohort_bench_lab_*` on DATABASE_URL's server; SQLite, when
DATABASE_URL is unset: a temporary file), migrated with `migrate` and dropped at the end:

- 10,000 runs without steps (`bulk_create`d; varied states, rewards, configs, tags and durations, created
  over 90 days), 30 other users, and the measured user `bench`;
- with projects (issue 42 on): 50 projects `lab-00`..`lab-49` of 200 runs each, 6 members each, the runs'
  owners spread over the members; `bench` is a member of `lab-00`..`lab-04`, so sees 1,000 runs;
- before projects (the code reads no `Run.project`): `bench` owns those same 1,000 runs, the 30 others
  the rest; a user saw only their own runs then.

Then it requests, in-process with Django's test client (views, middleware, templates, JSON encoding; no
network), each `--repeat` times after one warm-up, and prints p50 and p95 in ms:

- the runs table `/` page 1; sorted by `-best_reward` (a page of 1-20); a free-text search `ablation`;
  `project:lab-00` in the search box; the project switcher `/?project=lab-00`;
- the API `GET /api/runs/` (first page, default limit) with a personal token, and `?project=lab-00`.

`--baseline REV` measures the same on REV too (a temporary `git worktree`, removed at the end): this file
runs in a subprocess per revision with `--measure-only --json --code-root TREE`, so `import webapp` is that
tree's code, against its own throwaway database; this tree runs in one too. Both seed, then measure in
lockstep, 5 repeats of a request on one revision, then 5 on the other, so a machine whose load changes
(another test run) slows both alike. Requests REV has no notion of (projects) are "n/a". The table gives
both figures, the ratio of the p95s and whether it is at most 1.2.

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/lab_tables.py
--baseline eebf02f [--repeat 40]``
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
RUNS, PROJECTS, USER_PROJECTS, OTHER_USERS, MEMBERS = 10_000, 50, 5, 30, 6
MAX_RATIO = 1.2
BLOCK = 5  # repeats measured on one revision before the other's turn
WORDS = ("sweep", "baseline", "ablation")
TAGS = ["baseline", "gdpo", "sweep-7", "paper", "long", "debug"]


def seed_runs(user, *, runs: int = RUNS, projects: int = PROJECTS, user_projects: int = USER_PROJECTS,
              other_users: int = OTHER_USERS, members: int = MEMBERS) -> dict:
    """`runs` runs as the runs table sees them; run i is of lab i % projects, and `user` reads those of the
    first `user_projects` labs: as a member (with projects) or as their owner (before). Returns what was made."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.db.models import F
    from django.utils import timezone

    from webapp.runs.models import Program, Run, Task

    projects_on = any(f.name == "project" for f in Run._meta.concrete_fields)  # issue 42 on
    others = [get_user_model().objects.create_user(f"bench-{i}") for i in range(other_users)]
    labs = []  # (project, its members) per lab
    if projects_on:
        from webapp.projects.services import member_add, project_create

        for p in range(projects):
            crew = [others[(p * 7 + k) % other_users] for k in range(min(members, other_users))]
            project = project_create(creator=crew[0], name=f"lab-{p:02d}")
            for member in crew[1:]:
                member_add(project, user=member, role="member")
            if p < user_projects:
                member_add(project, user=user, role="member")
                crew.append(user)
            labs.append((project, crew))
    program = Program.objects.get_or_create(name="bench-toy", defaults={"title": "Bench toy", "modules": ["solver"]})[0]
    task = Task.objects.get_or_create(name="bench-toy", defaults={"title": "Bench toy", "program": program})[0]
    rng, now = random.Random(2), timezone.now()
    states = [s for s, _ in Run.State.choices]
    rows = []
    for i in range(runs):
        p = i % projects
        started = now - dt.timedelta(minutes=rng.randint(10, 60 * 24 * 90))
        reward = rng.random() if rng.random() < 0.8 else None
        if projects_on:
            project, crew = labs[p]
            where = {"project": project, "owner": crew[(i // projects) % len(crew)]}
        else:
            where = {"owner": user if p < user_projects else others[i % other_users]}
        rows.append(Run(
            **where, task=task, name=f"{rng.choice(WORDS)} {i}", total_steps=500,
            current_step=rng.randint(0, 500), state=rng.choice(states), best_reward=reward,
            last_reward=None if reward is None else reward * rng.random(), gpus=rng.choice((0, 1, 1, 2, 8)),
            config={"strategy": rng.choice(("grpo", "mmgrpo", "mhgpo")), "estimator": rng.choice(("grpo", "gdpo")),
                    "learning_rate": rng.choice((1e-5, 3e-5, 1e-4)), "group_size": rng.choice((4, 8, 12)),
                    "rewards": [{"name": "exact_match", "weight": 1.0}], "model": "Qwen/Qwen3-1.7B"},
            tags=rng.sample(TAGS, k=rng.randint(0, 3)),
            started_at=started, finished_at=started + dt.timedelta(minutes=rng.randint(1, 600)),
        ))
    Run.objects.bulk_create(rows, batch_size=2000)
    # created_at is auto_now_add: spread it so the default order is not insertion order.
    Run.objects.filter(task=task).update(created_at=F("started_at"))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE runs_run" + (", projects_project, projects_membership" if projects_on else ""))
    visible = sum(1 for i in range(runs) if i % projects < user_projects)
    return {"projects": projects_on, "project": "lab-00", "runs": runs, "visible": visible}


def timed(client, url: str) -> float:
    started = time.perf_counter()
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    _ = response.content
    return (time.perf_counter() - started) * 1000.0


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 (nearest rank, as benchmarks/pages.py)."""
    samples = sorted(samples)
    return statistics.median(samples), samples[min(len(samples) - 1, int(round(0.95 * (len(samples) - 1))))]


def prepare(user, seeded: dict) -> tuple[dict, int]:
    """name -> (client, url maker) of every measured request (None where this code has no projects), and
    the number of runs the API shows `user`."""
    from django.test import Client

    from webapp.api.services import token_create

    table = Client()
    table.force_login(user)
    api = Client(headers={"Authorization": f"Bearer {token_create(user=user, name='bench')[1]}"})
    rng, lab = random.Random(3), seeded["project"]
    requests = [  # name, url (or a maker of urls), client, whether it needs projects
        ("table: page 1", "/", table, False),
        ("table: sorted -best_reward, page 1-20", lambda: f"/?sort=-best_reward&page={rng.randint(1, 20)}", table,
         False),
        ("table: search 'ablation'", "/?q=ablation", table, False),
        (f"table: search project:{lab}", f"/?q=project%3A{lab}", table, True),
        (f"table: switcher ?project={lab}", f"/?project={lab}", table, True),
        ("API: GET /api/runs/", "/api/runs/", api, False),
        (f"API: GET /api/runs/?project={lab}", f"/api/runs/?project={lab}", api, True),
    ]
    plan = {name: None if needs_projects and not seeded["projects"]
            else (client, url if callable(url) else (lambda url=url: url))
            for name, url, client, needs_projects in requests}
    return plan, api.get("/api/runs/").json()["count"]


def sample(plan: dict, name: str, n: int, warm: bool = False) -> list[float]:
    """`n` timings of one request in ms, after one untimed (template compilation, first query of its kind)."""
    client, make_url = plan[name]
    if warm:
        timed(client, make_url())
    return [timed(client, make_url()) for _ in range(n)]


def measure_all(user, seeded: dict, repeat: int) -> dict:
    """p50/p95 of every request (None where this code has no projects), and the runs the API shows `user`."""
    plan, visible = prepare(user, seeded)
    results = {name: None if step is None else percentiles(sample(plan, name, repeat, warm=True))
               for name, step in plan.items()}
    return {"results": results, "visible": visible}


def emit(value) -> None:
    print(json.dumps(value), flush=True)


def measure_only(args) -> None:
    """Seed and measure the code under --code-root, in this process, and print a table. With --json (how
    `main` runs it): print what it measures as one JSON line, then answer each `[name, n, warm]` line of
    stdin with `sample`'s timings (one JSON line), until `null`; the parent decides the order."""
    from benchmarks.servers import django_setup, throwaway

    with throwaway(args.database) as url:
        django_setup(url)  # migrate
        from django.contrib.auth import get_user_model
        from django.db import connection, connections

        import webapp

        assert Path(webapp.__file__).resolve().is_relative_to(args.code_root.resolve()), webapp.__file__
        try:
            started = time.perf_counter()
            user = get_user_model().objects.create_user("bench", password="bench-password-1")
            seeded = seed_runs(user, runs=args.runs)
            print(f"  seeded {seeded['runs']:,} runs in {time.perf_counter() - started:.1f} s "
                  f"({'projects' if seeded['projects'] else 'no projects'})", file=sys.stderr)
            if not args.json:
                return print_table(measure_all(user, seeded, args.repeat)["results"], None, None)
            plan, visible = prepare(user, seeded)
            version = connection.pg_version if connection.vendor == "postgresql" else 0
            emit({"visible": visible, "runs": seeded["runs"], "code": str(args.code_root),
                  "database": f"PostgreSQL {version // 10000}.{version % 10000}" if version
                  else f"SQLite {connection.Database.sqlite_version}",
                  "requests": {name: step is not None for name, step in plan.items()}})
            for line in sys.stdin:
                if (order := json.loads(line)) is None:
                    break
                emit(sample(plan, *order))
        finally:
            connections.close_all()


class Child:
    """This file in a subprocess on `code_root`'s code (`--measure-only --json`), seeded and waiting."""

    def __init__(self, label: str, code_root: Path, database: str, runs: int):
        self.label = label
        command = [sys.executable, str(HERE), "--measure-only", "--json", "--code-root", str(code_root),
                   "--database", database, "--runs", str(runs)]
        self.process = subprocess.Popen(command, cwd=code_root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.info = self.read()

    def read(self):
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.label} measurement stopped (exit status {self.process.wait()})")
        return json.loads(line)

    def ask(self, name: str, n: int, warm: bool) -> list[float]:
        self.process.stdin.write(json.dumps([name, n, warm]) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.write("null\n")
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)  # drops its database
        except subprocess.TimeoutExpired:
            self.process.kill()


def lockstep(children: list[Child], repeat: int) -> dict[str, dict]:
    """Every request's timings, BLOCK at a time from each child in turn (who goes first alternating), so a
    change of load on the machine weighs on both revisions alike. label -> name -> (p50, p95) or None."""
    names = list(children[-1].info["requests"])
    samples = {c.label: {name: [] for name in names} for c in children}
    for name in names:
        for block, first in enumerate(range(0, repeat, BLOCK)):
            for c in children if block % 2 == 0 else children[::-1]:
                if c.info["requests"].get(name):
                    samples[c.label][name] += c.ask(name, min(BLOCK, repeat - first), block == 0)
    return {label: {name: percentiles(s) if s else None for name, s in by_name.items()}
            for label, by_name in samples.items()}


def git(*command: str) -> None:
    subprocess.run(["git", "-C", str(ROOT), *command], check=True, stdout=subprocess.DEVNULL)


def cell(figures) -> str:
    return f"{'n/a':>17}" if figures is None else f"{figures[0]:8.1f}{figures[1]:9.1f}"


def print_table(now: dict, base: dict | None, revision: str | None) -> None:
    print(f"\n{'request':40} {'base p50':>8}{'p95':>9} {'now p50':>8}{'p95':>9} {'p95 ratio':>10}  <= {MAX_RATIO}")
    for name, figures in now.items():
        before = None if base is None else base.get(name)
        ratio = None if before is None or figures is None else figures[1] / before[1]
        verdict = "" if ratio is None else ("yes" if ratio <= MAX_RATIO else "NO")
        print(f"{name:40} {cell(before)} {cell(figures)} {'n/a' if ratio is None else f'{ratio:.2f}':>10}  {verdict}")
    print("(ms; p50 and p95 over the repeats; baseline = " + (f"{revision})" if revision else "not measured)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", metavar="REV", help="also measure this revision (e.g. eebf02f)")
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--measure-only", action="store_true", help="seed and measure --code-root's code here")
    parser.add_argument("--json", action="store_true", help="with --measure-only: measure what stdin asks for")
    parser.add_argument("--code-root", type=Path, default=ROOT, help="the tree whose webapp is measured")
    parser.add_argument("--database", default="cohort_bench_lab_now", help="throwaway database (cohort_bench_*)")
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")  # no query log: time what production would run
    # The measured tree first: `import webapp` (and benchmarks.ingest) come from it, not from this file's tree.
    sys.path[:] = [str(args.code_root.resolve())] + [p for p in sys.path if Path(p or ".").resolve() != HERE.parent]
    if args.measure_only:
        return measure_only(args)
    from benchmarks.dashboard import machine

    children, folder = [], None
    try:
        if args.baseline:
            folder = Path(tempfile.mkdtemp(prefix="cohort-baseline-"))
            git("worktree", "add", "--detach", str(folder / "tree"), args.baseline)
            print(f"Baseline {args.baseline} ({folder / 'tree'}) ...", file=sys.stderr)
            children.append(Child("baseline", folder / "tree", "cohort_bench_lab_base", args.runs))
        print("Now (this tree) ...", file=sys.stderr)
        children.append(Child("now", ROOT, "cohort_bench_lab_now", args.runs))
        results = lockstep(children, args.repeat)
    finally:
        for c in children:
            c.close()
        if folder is not None:
            git("worktree", "remove", "--force", str(folder / "tree"))
            shutil.rmtree(folder, ignore_errors=True)
    print_table(results["now"], results.get("baseline"), args.baseline)
    for c in children:
        print(f"{c.label}: the user sees {c.info['visible']:,} of {c.info['runs']:,} runs ({c.info['code']})")
    print(f"database: {children[-1].info['database']}; machine: {machine()}; {args.repeat} repeats per request"
          + (f", {BLOCK} at a time from each revision in turn" if args.baseline else ""))


if __name__ == "__main__":
    main()
