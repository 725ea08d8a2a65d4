"""`cohort import` of a W&B offline run and a TensorBoard log, in steps per second, against the
logging API's own ingest rate measured in the same sitting.

The sources are written first by the trainers' own libraries, into a temporary folder (timed, not the
measurement):

- a W&B offline run, `wandb.init(mode="offline", dir=...)`, of --steps steps (default 100,000), each
  `run.log` of --metrics scalars (default 50) at `step=`;
- a TensorBoard log, `torch.utils.tensorboard.SummaryWriter`, of --tb-steps steps (default 10,000),
  each --tb-metrics `add_scalar` calls (default 10).

Then, against daphne serving `webapp.asgi:application` on a throwaway PostgreSQL database
(`cohort_bench_imports` on DATABASE_URL's server, default postgres://postgres@127.0.0.1:5432/postgres,
migrated, dropped at the end; Redis from REDIS_URL, default redis://127.0.0.1:6379/9, under a
channel-layer prefix of its own), with a user and an API token of its own, for each source:

- read: `trainer.importers.read_runs(path)` in this process, and apart from it the check `cohort
  import` does before sending anything (`create_body`, `checked_steps`);
- logging API: the same steps (the checked ones: same step numbers, same metrics) posted straight to
  the API by a bare client, as cohort/sdk/upload.py posts them: `POST /api/external/runs/` (origin
  sdk, a client id of its own, so a fresh run), `POST /api/runs/<id>/steps/` in batches of 50 steps
  (cohort.sdk.upload.batches and body, cohort.http.send_json, retried as the uploader retries), then
  `POST /api/runs/<id>/finish/`. Each step's JSON is encoded on the clock, as any client must;
- import: the whole `cohort import PATH --url ... --task bench-import` run as the console script in a
  subprocess (token in COHORT_TOKEN): its start, reading, checking, upload and finish, wall clock.
  Its peak RSS is reported too (its VmHWM, polled every 0.1 s).

Both runs are then counted in the database (every step stored once). The per-token request throttle
(COHORT_LOGGING_RATE, 50/s by default: 2,500 steps/s in posts of 50) is raised for daphne, so both
arms measure ingest rather than the throttle. The API arm goes first for each source; before each
arm, once the arm before it is counted, its steps are truncated (runs_stepmetric) and the database is
VACUUM ANALYZEd, so both arms start from the same state even where autovacuum is off (as on this
machine's PostgreSQL: without that, the first 100,000-step arm in a fresh database slowed from 70 to
230 ms a post, and which arm went first decided the ratio). One benchmark process at a time: the
client, daphne and PostgreSQL share the machine's cores.

Run: ``.venv/bin/python -m benchmarks.imports [--steps 100000 --tb-steps 10000]``
(``--steps 2000 --tb-steps 1000`` for a quick check).

Measured (2026-12-02, this 2-core machine: PostgreSQL 15 on 127.0.0.1 with autovacuum off, daphne one
process, Python 3.11, wandb 0.31.0; the default sizes, 11.5 minutes in all):

    source          steps metrics  write s  read s check s import s import steps/s   API s API steps/s import/API import peak
    wandb         100,000      50     24.6    30.2     3.6    293.6            341   263.2         380       0.90     1145 MB
    tensorboard    10,000      10      4.3     3.0     0.1     15.1            664    11.0         913       0.73      195 MB

The import's upload runs at the API's rate: its time is the API arm's plus reading and checking (263 +
30 + 4 = 297 s against 294 s measured for W&B). Reading the W&B run is 10% of the import (300 µs a step
of 50 metrics). TensorBoard: 11.0 + 3.0 + 0.1 = 14.1 s against 15.1 s; the rest (the process's start
and its imports, about 1 s) weighs more on a run this short.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.servers import (  # noqa: E402
    PYTHON,
    close_django_connections,
    daphne,
    django_setup,
    throwaway_database,
)
from benchmarks.stream_latency import delete_redis_keys  # noqa: E402

BENCH_DATABASE = "cohort_bench_imports"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
CHANNELS_PREFIX = "cohort-bench-imports"
TASK = "bench-import"
UNTHROTTLED = "1000000/s"  # COHORT_LOGGING_RATE for daphne: ingest is measured, not the throttle
ATTEMPTS = 6  # as cohort/imports.py retries


# --- The sources, written by the trainers' own libraries ----------------------------------------


def metric_names(count: int, prefix: str) -> list[str]:
    kinds = ("loss", "reward", "kl", "grad_norm", "lr", "entropy", "accuracy", "length", "clip_ratio", "throughput")
    return [f"{prefix}/{kinds[i % len(kinds)]}_{i // len(kinds)}" for i in range(count)]


def curve(rng: random.Random, step: int, index: int) -> float:
    """A plausible training curve per metric: a decay or a rise with noise."""
    return (1.0 + index) * math.exp(-step / (5_000.0 + 100 * index)) + 0.05 * rng.random()


def write_wandb(folder: Path, steps: int, metrics: int) -> tuple[Path, float]:
    """A W&B offline run of `steps` steps of `metrics` scalars; its `wandb` folder and the seconds taken."""
    import wandb

    names = metric_names(metrics, "train")
    rng = random.Random(0)
    start = time.perf_counter()
    run = wandb.init(mode="offline", dir=str(folder), project="bench-imports", name="bench-imports",
                     config={"learning_rate": 1e-5, "steps": steps, "model": "bench"},
                     settings=wandb.Settings(silent=True, console="off", disable_git=True))
    for step in range(steps):
        run.log({name: curve(rng, step, i) for i, name in enumerate(names)}, step=step)
    run.finish()
    seconds = time.perf_counter() - start
    wandb.teardown()
    return folder / "wandb", seconds


def write_tensorboard(folder: Path, steps: int, metrics: int) -> tuple[Path, float]:
    """A TensorBoard log of `steps` steps of `metrics` scalars; its folder and the seconds taken."""
    from torch.utils.tensorboard import SummaryWriter

    names = metric_names(metrics, "train")
    rng = random.Random(1)
    start = time.perf_counter()
    writer = SummaryWriter(log_dir=str(folder))
    for step in range(steps):
        for i, name in enumerate(names):
            writer.add_scalar(name, curve(rng, step, i), step)
    writer.close()
    return folder, time.perf_counter() - start


# --- Measuring ----------------------------------------------------------------------------------


@dataclass
class Result:
    source: str
    steps: int
    metrics: int
    write_s: float
    read_s: float = 0.0
    check_s: float = 0.0
    api_s: float = 0.0
    import_s: float = 0.0
    import_peak_mb: float = 0.0
    api_stored: int = 0
    import_stored: int = 0

    @property
    def import_rate(self) -> float:
        return self.steps / self.import_s

    @property
    def api_rate(self) -> float:
        return self.steps / self.api_s


def read_and_check(path: Path) -> tuple[Any, dict[str, Any], list[dict[str, Any]], float, float]:
    """The run at `path` as `cohort import` reads it (timed), then its creation body and checked steps
    (timed apart): what the API arm posts."""
    from cohort.imports import checked_steps, create_body
    from trainer.importers import read_runs

    start = time.perf_counter()
    runs = read_runs(path)
    read_s = time.perf_counter() - start
    if len(runs) != 1:
        raise SystemExit(f"{path}: {len(runs)} runs read, expected 1")
    start = time.perf_counter()
    body = create_body(runs[0], task=TASK, project=None, tags=[])
    steps = checked_steps(runs[0])
    return runs[0], body, steps, read_s, time.perf_counter() - start


def post_to_api(url: str, token: str, body: dict[str, Any], steps: list[dict[str, Any]]) -> tuple[float, int, int]:
    """The steps posted straight to the logging API as a fresh SDK run; (seconds, run id, steps stored)."""
    from cohort.http import send_json
    from cohort.sdk.upload import batches, retrying
    from cohort.sdk.upload import body as steps_body

    create = {**body, "client_id": f"bench-api-{body['origin']}-{time.time_ns()}", "origin": "sdk"}
    start = time.perf_counter()
    run = retrying(lambda: send_json(url, token, "POST", "external/runs/", create), attempts=ATTEMPTS)
    lines = [(i, json.dumps(s, allow_nan=False, separators=(",", ":"))) for i, s in enumerate(steps)]
    stored = 0
    for batch in batches(lines):
        answer = retrying(lambda batch=batch: send_json(url, token, "POST", f"runs/{run['id']}/steps/",
                                                        steps_body(batch)), attempts=ATTEMPTS)
        stored += len(answer.get("stored") or ())
    retrying(lambda: send_json(url, token, "POST", f"runs/{run['id']}/finish/", {"state": "succeeded"}),
             attempts=ATTEMPTS)
    return time.perf_counter() - start, run["id"], stored


def cohort_command() -> list[str]:
    script = Path(PYTHON).with_name("cohort")
    return [str(script)] if script.exists() else [PYTHON, "-m", "cohort"]


def high_water_mb(pid: int) -> float:
    """The process's peak RSS so far (VmHWM, of its own address space since its exec); 0 once it is gone.
    Not `ru_maxrss`: that keeps the high-water mark of the parent it was forked from."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def run_import(path: Path, url: str, token: str, log: Path) -> tuple[float, float]:
    """`cohort import PATH` in a subprocess; (wall seconds, peak RSS in MB, polled every 0.1 s). Exits on
    a failed import."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(COHORT_TOKEN=token, PYTHONUNBUFFERED="1")
    peak = 0.0
    with open(log, "wb") as out:
        start = time.perf_counter()
        process = subprocess.Popen([*cohort_command(), "import", str(path), "--url", url, "--task", TASK],
                                   cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        while process.poll() is None:
            peak = max(peak, high_water_mb(process.pid))
            time.sleep(0.1)
        seconds = time.perf_counter() - start
    if process.returncode:
        raise SystemExit(f"cohort import {path} exited with {process.returncode}:\n{log.read_text()[-4000:]}")
    return seconds, peak


def settle(database_url: str) -> None:
    """Each arm starts from the same database: the steps of the arm before (counted already) are
    truncated and everything is VACUUM ANALYZEd. Where autovacuum is off (as on this machine's
    server), the first arm in a fresh database otherwise slowed from 70 to 230 ms a post over 2,000
    posts while the arm after it held 60-90 ms, and which arm went first decided the ratio."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE runs_stepmetric")
        conn.execute("VACUUM ANALYZE")


def autovacuum(database_url: str) -> str:
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute("SHOW autovacuum").fetchone()[0]


def stored_steps(run_id: int) -> int:
    from webapp.runs.models import StepMetric

    return StepMetric.objects.filter(run_id=run_id).count()


def imported_run_id(client_id: str) -> int:
    from webapp.runs.models import Run

    return Run.objects.get(external_id=client_id).pk


def measure(result: Result, path: Path, url: str, token: str, work: Path, database_url: str) -> None:
    run, body, steps, result.read_s, result.check_s = read_and_check(path)
    if len(steps) != result.steps or any(len(s["metrics"]) != result.metrics for s in steps):
        raise SystemExit(f"{path}: read {len(steps)} steps, expected {result.steps} of {result.metrics} metrics")
    client_id = run.client_id
    print(f"{result.source}: read {result.read_s:.1f} s, checked {result.check_s:.1f} s; posting to the API ...",
          flush=True)
    settle(database_url)
    result.api_s, api_run, result.api_stored = post_to_api(url, token, body, steps)
    del run, body, steps
    gc.collect()
    counted = stored_steps(api_run)
    if counted != result.steps or result.api_stored != result.steps:
        raise SystemExit(f"{result.source}: the API arm stored {counted} steps ({result.api_stored} answered) "
                         f"of {result.steps}")
    settle(database_url)
    print(f"{result.source}: API {result.api_s:.1f} s; cohort import ...", flush=True)
    result.import_s, result.import_peak_mb = run_import(path, url, token, work / f"import-{result.source}.log")
    result.import_stored = stored_steps(imported_run_id(client_id))
    if result.import_stored != result.steps:
        raise SystemExit(f"{result.source}: the import stored {result.import_stored} steps of {result.steps}")
    print(f"{result.source}: import {result.import_s:.1f} s (peak {result.import_peak_mb:.0f} MB)", flush=True)


def report(results: list[Result], vacuum: str) -> None:
    print()
    print(f"{'source':<12} {'steps':>8} {'metrics':>7} {'write s':>8} {'read s':>7} {'check s':>7} {'import s':>8} "
          f"{'import steps/s':>14} {'API s':>7} {'API steps/s':>11} {'import/API':>10} {'import peak':>11}")
    for r in results:
        print(f"{r.source:<12} {r.steps:>8,} {r.metrics:>7} {r.write_s:>8.1f} {r.read_s:>7.1f} {r.check_s:>7.1f} "
              f"{r.import_s:>8.1f} {r.import_rate:>14,.0f} {r.api_s:>7.1f} {r.api_rate:>11,.0f} "
              f"{r.import_rate / r.api_rate:>10.2f} {r.import_peak_mb:>8.0f} MB")
    print("read s: trainer.importers.read_runs in this process; check s: create_body + checked_steps; import s: the "
          "whole `cohort import` subprocess (start, read, check, upload, finish); API: the same steps posted by a "
          "bare client in batches of 50. Every step stored once in both runs (counted in the database). "
          f"PostgreSQL autovacuum: {vacuum} (steps truncated, VACUUM ANALYZE before each arm).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="steps of the W&B offline run")
    parser.add_argument("--metrics", type=int, default=50, help="scalars per W&B step")
    parser.add_argument("--tb-steps", type=int, default=10_000, help="steps of the TensorBoard log")
    parser.add_argument("--tb-metrics", type=int, default=10, help="scalars per TensorBoard step")
    args = parser.parse_args()

    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    os.environ.update(REDIS_URL=redis_url, CHANNELS_PREFIX=CHANNELS_PREFIX)
    os.environ.setdefault("DEBUG", "false")  # no query log: time what production would run
    with tempfile.TemporaryDirectory(prefix="cohort-bench-imports-") as folder:
        work = Path(folder)
        print(f"writing a W&B offline run of {args.steps:,} steps x {args.metrics} metrics ...", flush=True)
        wandb_path, wandb_write = write_wandb(work / "wb", args.steps, args.metrics)
        print(f"  {wandb_write:.1f} s; writing a TensorBoard log of {args.tb_steps:,} steps x {args.tb_metrics} "
              "metrics ...", flush=True)
        tb_path, tb_write = write_tensorboard(work / "tb" / "bench-imports", args.tb_steps, args.tb_metrics)
        print(f"  {tb_write:.1f} s", flush=True)
        results = [Result("wandb", args.steps, args.metrics, wandb_write),
                   Result("tensorboard", args.tb_steps, args.tb_metrics, tb_write)]
        with throwaway_database(BENCH_DATABASE) as database_url:
            try:
                django_setup(database_url)
                from django.contrib.auth import get_user_model

                from webapp.api.services import token_create

                user = get_user_model().objects.create(username="bench-imports")
                token = token_create(user=user, name="bench")[1]
                env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings", PYTHONUNBUFFERED="1",
                           COHORT_LOGGING_RATE=UNTHROTTLED)
                with daphne(env) as port:
                    url = f"http://127.0.0.1:{port}/"
                    for result, path in zip(results, (wandb_path, tb_path), strict=True):
                        measure(result, path, url, token, work, database_url)
                vacuum = autovacuum(database_url)
            finally:
                close_django_connections()
                delete_redis_keys(redis_url, CHANNELS_PREFIX)
    report(results, vacuum)


if __name__ == "__main__":
    main()
