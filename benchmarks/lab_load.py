"""A lab's load on one Cohort server (issue 43): many runs logging through the SDK at once, Cohort's
own runs training on the worker beside them, people watching run pages and reloading the runs table.

What runs at once:
- N SDK runs (`--runs N --steps S --rollouts R --group G`), each a process of its own
  (benchmarks/lab_load_sdk.py): a real `cohort.init(...)` run that logs S steps of R rollouts in groups
  of G as fast as its loop goes, then `finish()`; every HTTP exchange it makes is timed on the wire.
  All are created first and released together once the viewers are connected (so a viewer sees its
  run from the first step) and each Cohort run has loaded its model.
- K Cohort runs (`--cohort-runs K`) of the built-in `toy` task on the tiny local model, queued through
  the API and trained by the stack's Celery worker; their event logs are watched for the ingest lag.
  On a throwaway stack they wait before their first step at the step gate (trainer/run/gate.py), which
  the release opens, so they train beside the SDK runs however fast the machine is.
- M websocket viewers (`--viewers M`) spread over the runs, alternating SDK and Cohort runs, and one
  logged-in client reloading `/runs/<id>/` and `/runs/` (benchmarks/lab_load_clients.py).

It prints stored steps/s and rollouts/s (from the database), step post latency (p50/p95/p99), the
answers by status (5xx by status and path; 503 and 429 apart: backpressure the SDK waits out), lost
and duplicated steps per run, lost notices and their delay, the worker's ingest lag and the pages'
latency; the definitions are in benchmarks/lab_load_report.py. It exits 1 on any 5xx other than 503,
an exchange with no answer, a lost or duplicated step or rollout, or a Cohort run that did not succeed.

The server: by default a throwaway embedded stack (benchmarks/servers.py `Stack`: daphne, a Celery
worker, embedded Redis) on SQLite, or on a throwaway PostgreSQL database `cohort_bench_load` (created
and dropped here) when DATABASE_URL names a PostgreSQL server. Or a running one: `--url` with
`--token` (an API key with write access), `--session` (a logged-in `sessionid` cookie, for the
viewers and the pages) and `--database-url` (its database, only read here: the figures come from
it); `--runs-dir` (its COHORT_RUNS_DIR, when on this machine) for the ingest lag.

    .venv/bin/python benchmarks/lab_load.py --runs 8 --steps 20 --rollouts 64 --group 8 \\
        --cohort-runs 1 --viewers 4 [--json out.json]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/lab_load.py --runs 32
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dashboard import LoadSampler, machine  # noqa: E402
from benchmarks.lab_load_clients import EventWatcher, PageClient, Viewer  # noqa: E402
from benchmarks.lab_load_report import summarize, text  # noqa: E402
from benchmarks.lab_load_sdk import SdkProcess  # noqa: E402
from benchmarks.servers import Stack, django_connect, session_cookie, throwaway_database, wait_until  # noqa: E402
from cohort.http import base_url, send_json  # noqa: E402
from trainer.run.gate import GATE_ENV, StepGate  # noqa: E402

DATABASE = "cohort_bench_load"
SDK_TASK = "lab-load"
TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")


def cohort_config(steps: int, seed: int) -> dict[str, Any]:
    """The toy task's suggestion, smaller: 2 examples x 4 rollouts a step, no evaluation or checkpoints."""
    return {"steps": steps, "seed": seed, "examples_per_step": 2, "group_size": 4, "rollouts_per_example": 4,
            "eval_every": 0, "checkpoint_every": 0}


@contextlib.contextmanager
def server(args, work: Path, gate: StepGate):
    """(url, token, cookie, runs dir or None, what the server is) of the server to load; a throwaway
    stack with a new user, whose trainers wait at `gate`, unless --url names one."""
    if args.url:
        django_connect(args.database_url)
        from django.conf import settings

        cookie = f"{settings.SESSION_COOKIE_NAME}={args.session}"
        yield base_url(args.url).rstrip("/"), args.token, cookie, args.runs_dir, args.url
        return
    with contextlib.ExitStack() as cleanup:
        database_url = None
        if os.environ.get("DATABASE_URL"):
            database_url = cleanup.enter_context(throwaway_database(DATABASE))
        # Every run is the bench user's, so the default active-run limit (10) must not refuse the load.
        limit = str(args.runs + args.cohort_runs + 10)
        stack = Stack(work / "var", work / "models", database_url=database_url,
                      env={"COHORT_LIMIT_ACTIVE_RUNS_PER_USER": limit, "COHORT_LIMIT_QUEUED_RUNS_PER_USER": limit,
                           GATE_ENV: str(gate.path)})
        cleanup.callback(stack.stop)
        stack.start()
        os.environ["COHORT_VAR_DIR"] = str(stack.var_dir)  # this process's settings: the stack's folder, not var/
        django_connect(stack.database_url, stack.redis_url)
        cleanup.callback(close_connections)
        from django.contrib.auth import get_user_model

        from webapp.api.services import token_create

        user = get_user_model().objects.create_user("bench-load", password=secrets.token_urlsafe(16))
        token = token_create(user=user, name="lab-load")[1]
        yield stack.url, token, session_cookie(user), stack.runs_dir, database_name(stack)


def close_connections() -> None:
    from django.db import connections

    connections.close_all()


def database_name(stack: Stack) -> str:
    from django.db import connection

    if connection.vendor == "postgresql":
        version = connection.pg_version
        return f"throwaway stack on PostgreSQL {version // 10000}.{version % 10000} ({DATABASE})"
    return f"throwaway stack on SQLite {connection.Database.sqlite_version}"


def run_ended(run_id: int) -> bool:
    from webapp.runs.models import Run

    return Run.objects.get(pk=run_id).state in TERMINAL


def run_ready(run_id: int, watcher: EventWatcher | None) -> bool:
    """Whether a Cohort run is ready to train beside the SDK runs: its trainer said "running" in its
    event log (model loaded, waiting at the gate), or, where the log is out of reach, it stored a step;
    or it ended (it never will)."""
    from webapp.runs.models import StepMetric

    ready = run_id in watcher.running if watcher else StepMetric.objects.filter(run_id=run_id).exists()
    return ready or run_ended(run_id)


def viewed_runs(sdk: list[int], cohort: list[int], viewers: int) -> list[int]:
    """The run each viewer watches: SDK and Cohort runs in turn, round and round.

    >>> viewed_runs([1, 2, 3], [9], 5)
    [1, 9, 2, 3, 1]
    """
    order = [run for pair in zip(sdk, cohort, strict=False) for run in pair]
    order += sdk[len(cohort):] + cohort[len(sdk):]
    return [order[i % len(order)] for i in range(viewers)] if order else []


def stored_rows(run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Per run: its state, StepMetric rows (attempt, step, seq, created_at epoch) and rollouts per step."""
    from django.db.models import Count

    from webapp.runs.models import Rollout, Run, StepMetric

    runs = {}
    for run in Run.objects.filter(pk__in=run_ids):
        rows = [(a, s, q, at.timestamp()) for a, s, q, at in
                StepMetric.objects.filter(run=run).values_list("attempt", "step", "seq", "created_at")]
        counts = (Rollout.objects.filter(run=run).order_by().values("attempt", "step").annotate(n=Count("id"))
                  .values_list("attempt", "step", "n"))
        runs[run.pk] = {"state": run.state, "rows": rows, "rollouts": {(a, s): n for a, s, n in counts}}
    return runs


def measure(args, work: Path) -> dict[str, Any]:
    # The Cohort runs load their model, then wait for the SDK runs' release to train: a toy step takes
    # a fraction of a second, so a run left alone would be over before the SDK runs start, and steps
    # stored before the viewers connect would count as lost notices. (A running server's trainers are
    # not held: they train as they go.)
    gate = StepGate(work / "step-gate")
    gate.allow(0)
    with server(args, work, gate) as (url, token, cookie, runs_dir, described):
        cohort_ids = [send_json(base_url(url), token, "POST", "runs/", {
            "task": "toy", "name": f"lab-load toy {i}", "tags": ["lab-load"],
            "config": cohort_config(args.cohort_steps, i)})["id"] for i in range(args.cohort_runs)]
        watcher = EventWatcher(Path(runs_dir), cohort_ids).start() if runs_dir and cohort_ids else None
        children = [SdkProcess({"url": url, "task": SDK_TASK, "name": f"lab-load sdk {i}", "seed": i,
                                "steps": args.steps, "rollouts": args.rollouts, "group": args.group,
                                "dir": str(work / "sdk"), "timeout": args.timeout}, token, work / f"sdk-{i}.log")
                    for i in range(args.runs)]
        viewers: list[Viewer] = []
        pages = None
        try:
            for child in children:
                child.start()
            sdk_ids = [child.read_run_id() for child in children]
            for run_id in viewed_runs(sdk_ids, cohort_ids, args.viewers):
                viewers.append(Viewer(run_id))
                viewers[-1].open(url, cookie)
            for run_id in cohort_ids:
                wait_until(lambda run_id=run_id: run_ready(run_id, watcher), args.timeout,
                           f"Cohort run {run_id} to start training", every_s=0.2)
            pages = PageClient(url, cookie, sdk_ids + cohort_ids).start()
            released_at = time.time()
            gate.allow(args.cohort_steps)
            for child in children:
                child.release()
            deadline = time.monotonic() + args.timeout
            with LoadSampler(every_s=1.0) as load:  # a shared machine: what else ran beside the load
                results = [child.result(max(1.0, deadline - time.monotonic())) for child in children]
                for run_id in cohort_ids:
                    wait_until(lambda run_id=run_id: run_ended(run_id), max(1.0, deadline - time.monotonic()),
                               f"Cohort run {run_id} to end", every_s=0.5)
            pages.stop()
            if watcher:
                watcher.stop()  # its last poll: the last steps' lines
            runs = stored_rows(sdk_ids + cohort_ids)
            grace = time.monotonic() + args.grace  # notices still on their way: one grace for all viewers
            for viewer in viewers:
                viewer.wait_for_all({q for _, _, q, at in runs[viewer.run_id]["rows"] if at >= viewer.connected_at},
                                    grace)
        finally:
            if pages is not None:
                pages.stop()
            for viewer in viewers:
                if getattr(viewer, "websocket", None) is not None:
                    viewer.close()
            for child in children:
                child.kill()
        for run_id, result in zip(sdk_ids, results, strict=True):
            runs[run_id].update(kind="sdk", logged=set(range(1, args.steps + 1)), logged_rollouts=result["rollouts"])
        for run_id in cohort_ids:
            read = watcher is not None and watcher.offsets[run_id] > 0  # else the configured steps
            written = watcher.written[run_id] if read else range(1, args.cohort_steps + 1)
            runs[run_id].update(kind="cohort", logged=set(written))
        settings = {k: getattr(args, k) for k in ("runs", "steps", "rollouts", "group", "cohort_runs", "cohort_steps",
                                                   "viewers")}
        return {"settings": settings, "server": described, "released_at": released_at,
                "machine": f"{machine()}, 1-min load average {load.mean:.1f} during the load",
                "runs": runs, "sdk": results, "pages": pages.samples, "grace_s": args.grace,
                "viewers": [{"run": v.run_id, "connected_at": v.connected_at, "arrived": dict(v.arrived)}
                            for v in viewers],
                "written": {run_id: watcher.written[run_id] for run_id in cohort_ids} if watcher else {}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8, help="SDK runs logging at once")
    parser.add_argument("--steps", type=int, default=20, help="steps each SDK run logs")
    parser.add_argument("--rollouts", type=int, default=64, help="rollouts a step")
    parser.add_argument("--group", type=int, default=8, help="rollouts a group")
    parser.add_argument("--cohort-runs", type=int, default=1, help="toy runs trained by the worker meanwhile")
    parser.add_argument("--cohort-steps", type=int, help="steps of each Cohort run (default: --steps)")
    parser.add_argument("--viewers", type=int, default=4, help="websocket viewers, spread over the runs")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds the viewers may catch up at the end")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the whole load may take")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway folder (stack and SDK logs)")
    parser.add_argument("--url", help="a running Cohort server (default: start a throwaway one)")
    parser.add_argument("--token", default=os.environ.get("COHORT_TOKEN"), help="an API key of --url's server")
    parser.add_argument("--session", help="a logged-in sessionid cookie of --url's server (viewers, pages)")
    parser.add_argument("--database-url", help="--url's database, read for the figures")
    parser.add_argument("--runs-dir", help="--url's COHORT_RUNS_DIR, if on this machine (ingest lag)")
    args = parser.parse_args(argv)
    args.cohort_steps = args.cohort_steps or args.steps
    if args.url and not (args.token and args.session and args.database_url):
        parser.error("--url needs --token, --session and --database-url")
    if args.rollouts % args.group:
        parser.error("--rollouts must be a multiple of --group")
    work = Path(tempfile.mkdtemp(prefix="cohort-lab-load-"))
    try:
        report = summarize(measure(args, work))
    finally:
        if args.keep:
            print(f"Kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(text(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
