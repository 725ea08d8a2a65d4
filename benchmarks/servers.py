"""What the benchmarks that need live servers share: free ports, waiting for a server to answer,
stopping process groups, daphne alone (`daphne`), the whole embedded stack (`Stack`: `python -m
webapp.stack up` on a throwaway COHORT_VAR_DIR), throwaway databases (`throwaway_database` on
PostgreSQL, `throwaway` on PostgreSQL or SQLite), Django in the benchmark's own process against one
of them (`django_setup`, `django_connect`), and a session cookie for a websocket or page client.

Used by benchmarks/stream_latency.py, cohort_vs_trl.py, first_start.py, lab_load.py, lab_tables.py,
ingest.py, pages.py, storage.py and trl_callback.py. Importing it loads neither Django nor the
project's settings: first_start.py measures a fresh clone and only needs the process helpers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
READY = "Cohort is running at"  # what `webapp.stack up` prints once its health wait passed
DEFAULT_SERVER_URL = "postgres://postgres@127.0.0.1:5432/postgres"
T = TypeVar("T")


# --- processes and ports ------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, *, every_s: float = 0.2,
               alive: Callable[[], str | None] | None = None) -> T:
    """The first truthy value of `predicate()`, polled until `timeout_s`. `alive()` answers why the
    awaited thing can no longer happen (a process exited), or None; either failure raises RuntimeError."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        dead = alive() if alive else None
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {dead or f'not within {timeout_s:.0f} s'}")
        time.sleep(every_s)


def answers(url: str) -> bool:
    """Whether an HTTP server answers `url` at all (an error status counts: the server is up)."""
    try:
        urllib.request.urlopen(url, timeout=1)
        return True
    except urllib.error.HTTPError:  # 503 from /healthz: a dependency is down, the server is up
        return True
    except OSError:
        return False


def interrupt_group(process: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGINT to the child's process group, as Ctrl-C would (a stack stops its own children then);
    SIGKILL to the group if it is still there after `grace_s`."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=grace_s)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


# --- daphne alone -------------------------------------------------------------------------------

@contextmanager
def daphne(env: dict[str, str], timeout_s: float = 60.0) -> Iterator[int]:
    """daphne serving the ASGI app on a free loopback port; yields the port once /healthz answers."""
    from webapp.processes import die_with_parent, stop_process_group

    port = free_port()
    with tempfile.NamedTemporaryFile(prefix="cohort-bench-daphne-", suffix=".log") as log:
        process = subprocess.Popen(
            [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )
        try:
            try:
                wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), timeout_s, "daphne did not start",
                           alive=lambda: process.poll() is not None and f"exited with {process.returncode}")
            except RuntimeError as exc:
                raise SystemExit(f"{exc}\n{Path(log.name).read_text()[-4000:]}") from None
            yield port
        finally:
            stop_process_group(process)


# --- the whole stack ----------------------------------------------------------------------------

class Stack:
    """`python -m webapp.stack up` (daphne, a Celery worker with beat, embedded Redis) on a throwaway
    COHORT_VAR_DIR and a free port, in a process group of its own. Its database is SQLite under
    `var_dir` unless `database_url` names another (a throwaway PostgreSQL database); `env` adds to
    its environment (limits, concurrency). `manage_shell()` runs Django code against its database."""

    def __init__(self, var_dir: Path, model_cache: Path, *, database_url: str | None = None,
                 env: dict[str, str] | None = None, root: Path = ROOT):
        self.root = Path(root)  # the checkout it serves (another one: a page of before a change)
        self.var_dir = var_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
        self.env.update(COHORT_VAR_DIR=str(var_dir), COHORT_PORT=str(self.port), COHORT_MODEL_CACHE=str(model_cache),
                        PYTHONUNBUFFERED="1", **(env or {}))
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.database_url = database_url or f"sqlite:///{var_dir / 'cohort.sqlite3'}"
        self.runs_dir = var_dir / "runs"
        self.log = var_dir / "stack.log"
        self.process: subprocess.Popen | None = None
        self.pgids: list[int] = []

    @property
    def redis_url(self) -> str:
        """The embedded Redis the stack started (it writes the URL down once Redis answers)."""
        return (self.var_dir / "embedded-redis.url").read_text().strip()

    def start(self, timeout_s: float = 300.0) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        # The log is appended to: a var dir used before already holds an earlier start's READY line.
        before = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([PYTHON, "-m", "webapp.stack", "up"], cwd=self.root, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_until(lambda: READY in self.log.read_bytes()[before:].decode(errors="replace"), timeout_s,
                       "the stack did not start",
                       every_s=0.3, alive=lambda: self.process.poll() is not None and f"exited with {self.process.returncode}")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}:\n{self.tail()}") from None
        pids = self.var_dir / "stack.pids"
        self.pgids = [int(p) for p in pids.read_text().split()] if pids.exists() else []

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def manage_shell(self, code: str, extra_env: dict[str, str] | None = None) -> str:
        done = subprocess.run([PYTHON, "manage.py", "shell", "-c", code], cwd=self.root, env={**self.env, **(extra_env or {})},
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"manage.py shell failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def user_and_token(self, username: str, password: str) -> str:
        """A new user of the stack's database and a new API token for it; returns the token's key."""
        code = ("import os\n"
                "from django.contrib.auth import get_user_model\n"
                "from webapp.api.services import token_create\n"
                "user = get_user_model().objects.create_user(os.environ['BENCH_USER'], password=os.environ['BENCH_PASSWORD'])\n"
                "print('KEY=' + token_create(user=user, name='benchmark')[1])\n")
        out = self.manage_shell(code, {"BENCH_USER": username, "BENCH_PASSWORD": password})
        return next(line[4:] for line in out.splitlines() if line.startswith("KEY="))

    def step_times(self, run_id: int) -> list[float]:
        """The stored steps' `StepMetric.created_at` (epoch seconds) in step order, the newest attempt's."""
        code = ("import json\n"
                "from webapp.runs.models import StepMetric\n"
                f"rows = StepMetric.objects.filter(run_id={int(run_id)}).order_by('step', 'attempt')\n"
                "print('JSON=' + json.dumps({r.step: r.created_at.timestamp() for r in rows}))\n")
        out = self.manage_shell(code)
        by_step = json.loads(next(line[5:] for line in out.splitlines() if line.startswith("JSON=")))
        return [by_step[k] for k in sorted(by_step, key=int)]

    def stop(self) -> None:
        """SIGINT to the stack's group (Ctrl-C); the stack stops its children. Then any group it
        recorded that is still there is killed."""
        if self.process is None:
            return
        interrupt_group(self.process)
        for pgid in self.pgids:
            try:
                wait_until(lambda pgid=pgid: not group_alive(pgid), 10, f"process group {pgid}", every_s=0.5)
            except RuntimeError:
                print(f"process group {pgid} outlived the stack; killing it", file=sys.stderr)
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# --- throwaway databases ------------------------------------------------------------------------

def server_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_SERVER_URL


def url_with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@contextmanager
def throwaway_database(name: str) -> Iterator[str]:
    """Creates database `name` on DATABASE_URL's server (default: a local PostgreSQL), yields its
    URL, drops it afterwards.

    Only `cohort_bench_*` names are accepted: other databases on a shared server (a test run's)
    must never be dropped by a benchmark.
    """
    import psycopg
    from psycopg import sql

    if not name.startswith("cohort_bench_"):
        raise ValueError(f"benchmark databases are named cohort_bench_*, not {name!r}")
    url = server_url()
    if not urlsplit(url).scheme.startswith("postgres"):
        raise SystemExit(f"DATABASE_URL must name a PostgreSQL server for this benchmark, not {url!r}")
    admin_url = url_with_database(url, "postgres")
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(drop)  # left over by an interrupted run
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield url_with_database(url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(drop)


@contextmanager
def throwaway(name: str) -> Iterator[str]:
    """The URL of a fresh database: `name` on DATABASE_URL's PostgreSQL server, else a temporary SQLite file."""
    if os.environ.get("DATABASE_URL"):
        with throwaway_database(name) as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="cohort-bench-") as folder:
            yield f"sqlite:///{folder}/bench.sqlite3"


# --- Django in the benchmark's own process ------------------------------------------------------

def django_connect(database_url: str, redis_url: str | None = None) -> None:
    """Points the settings at `database_url` (and `redis_url`) before they are read, and sets Django up."""
    os.environ["DATABASE_URL"] = database_url
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def django_setup(database_url: str) -> None:
    """`django_connect`, then migrate the database."""
    django_connect(database_url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def close_django_connections() -> None:
    from django.db import connections

    connections.close_all()


def session_cookie(user) -> str:
    """`Cookie` header value of a fresh login of `user` (a session row in the database the server reads)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def planner_statistics() -> None:
    """VACUUM ANALYZE the seeded database, as autovacuum does on a stock PostgreSQL after a bulk load.
    Where autovacuum is off (as on this machine's server) the planner otherwise plans the pages over
    millions of rows it believes are not there, and the figures measure that rather than the pages."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        setting = cursor.fetchone()[0]
        started = time.perf_counter()
        cursor.execute("VACUUM ANALYZE")
    print(f"  VACUUM ANALYZE in {time.perf_counter() - started:.0f} s (the server's autovacuum: {setting})")
