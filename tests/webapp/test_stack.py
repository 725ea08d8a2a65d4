"""The quick-start run command: embedded SQLite + Redis, a real worker and ASGI server; a second
start reuses everything; stopping it leaves no process behind."""

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.conftest import ROOT, asgi_server_process, free_port, service_env, wait_for
from webapp.stack import EmbeddedRedis, cpu_threads_for, debug_for_bind


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.read().decode()
    except OSError:
        return None


def start_stack(var_dir, port):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(COHORT_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")
    log = open(var_dir.parent / f"stack-{port}.log", "w")  # noqa: SIM115 - closed by the test
    process = subprocess.Popen([sys.executable, "-m", "webapp.stack", "up", "--port", str(port)], cwd=ROOT,
                               env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return process, log


def run_once(var_dir) -> str:
    port = free_port()
    process, log = start_stack(var_dir, port)
    log_path = var_dir.parent / f"stack-{port}.log"
    try:
        base = f"http://127.0.0.1:{port}"
        # The ready line is what a user waits for; /healthz alone can answer a moment before it.
        wait_for(lambda: "Cohort is running at" in log_path.read_text(), 180, "the ready line")
        status, body = get(f"{base}/healthz")
        assert status == 200 and json.loads(body) == {"status": "ok", "database": "ok", "redis": "ok"}
        status, body = get(f"{base}/login/")
        assert status == 200 and "Log in to Cohort" in body
        pgids = [int(p) for p in (var_dir / "stack.pids").read_text().split()]
        assert len(pgids) == 3  # worker, web, redis
        os.kill(process.pid, signal.SIGINT)  # what Ctrl-C sends
        assert process.wait(timeout=60) == 0
        for pgid in pgids:
            wait_for(lambda pgid=pgid: not process_group_alive(pgid), 15, f"process group {pgid} to end")
        assert not (var_dir / "embedded-redis.url").exists()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
    return log_path.read_text()


@pytest.mark.slow
def test_run_command_serves_then_stops_cleanly_and_reuses_state(tmp_path):
    var_dir = tmp_path / "var"
    first = run_once(var_dir)
    assert "Created admin account. Log in as 'admin' with password" in first
    assert "Cohort is running at http://127.0.0.1:" in first
    assert "DEBUG on: 127.0.0.1 is this machine's own loopback address" in first
    assert "Stopping Cohort" in first
    second = run_once(var_dir)
    assert "Reusing admin account. Log in as 'admin'" in second
    assert "No migrations to apply" in second


def test_each_run_the_worker_trains_at_once_gets_its_share_of_the_cores():
    assert cpu_threads_for({}, 2, 2) == {"OMP_NUM_THREADS": "1"}
    assert cpu_threads_for({}, 2, 16) == {"OMP_NUM_THREADS": "8"}
    assert cpu_threads_for({}, 4, 2) == {"OMP_NUM_THREADS": "1"}  # never none
    assert cpu_threads_for({}, 1, None) == {"OMP_NUM_THREADS": "1"}
    assert cpu_threads_for({"OMP_NUM_THREADS": "3"}, 2, 2) == {}  # the operator's choice stands


def test_run_command_refuses_a_busy_port(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "webapp.stack", "up", "--port", str(port)], cwd=ROOT,
                                env=dict(os.environ, COHORT_VAR_DIR=str(tmp_path)), capture_output=True, text=True,
                                timeout=60)
    assert result.returncode == 2 and f"Port {port} on 127.0.0.1 is in use" in result.stderr


def test_embedded_redis_starts_answers_and_stops(tmp_path):
    import redis

    server = EmbeddedRedis(tmp_path / "redis")
    url = server.start()
    try:
        assert redis.Redis.from_url(url).ping() is True
    finally:
        server.stop()
    assert server.child.exited() is not None
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()


def test_test_command_passes_every_argument_after_test_to_pytest(monkeypatch):
    """`make test ARGS="-k healthz"` runs `webapp.stack test -k healthz`: options first are pytest's."""
    from webapp import stack

    seen = []
    monkeypatch.setattr(stack, "test", lambda args: seen.append(args) or 0)
    assert stack.main(["test", "-k", "healthz", "-q"]) == 0
    assert stack.main(["test", "tests/workers", "-x"]) == 0
    assert seen == [["-k", "healthz", "-q"], ["tests/workers", "-x"]]


@pytest.mark.parametrize("host, environ, debug", [
    ("127.0.0.1", {}, True),
    ("localhost", {}, True),
    ("::1", {}, True),
    ("127.0.0.1", {"DEBUG": "0"}, False),
    ("127.0.0.1", {"DJANGO_ENV": "production"}, False),
    ("0.0.0.0", {}, False),
    ("::", {}, False),
    ("192.168.1.20", {}, False),
    ("0.0.0.0", {"DEBUG": "1"}, False),  # asked for, and still refused
    ("cohort.lan", {}, False),           # a name may resolve to an address others reach
])
def test_debug_stays_on_only_for_a_loopback_bind_outside_production(host, environ, debug):
    on, line = debug_for_bind(host, environ)
    assert on is debug
    assert line.startswith("DEBUG on" if debug else "DEBUG off")


@pytest.mark.backend_neutral(reason="Django's error pages read no table: the same on either database")
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_missing_page_is_cohorts_own_404_whatever_the_bind(transactional_db, tmp_path, host):
    """Issue 35: the embedded default served Django's technical page (settings included) to anyone
    who reached the port; the server gets the DEBUG that `make run` gives it for each bind (the test
    above). A missing page is Cohort's own 404 either way (webapp/not_found.py), with DEBUG on too."""
    on, _ = debug_for_bind(host, {})
    env = service_env(DEBUG="1" if on else "0")
    with asgi_server_process(tmp_path / "daphne.log", env) as url:
        try:
            urllib.request.urlopen(f"{url}/no-such-page/", timeout=30)
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read().decode()
    assert status == 404
    assert "Using the URLconf defined in" not in body
    assert "Not found" in body


def test_after_ready_builds_the_manual_then_compiles_saying_how_it_went(tmp_path, monkeypatch, capsys):
    """`make run` builds the manual beside the ready stack (`up --build-manual`): /docs/ says it is being built
    while the builder lives, the stack says when it is there or that it failed, and serves on either way;
    the next job (the packages' bytecode) starts after it, and stopping the stack stops a job midway."""
    from webapp import stack
    from webapp.manual import building

    monkeypatch.setattr(building, "MANUAL_BUILD_FILE", tmp_path / "manual-build.pid")
    monkeypatch.setattr(stack, "PIDS_FILE", tmp_path / "stack.pids")
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    running = stack.Stack()
    after = stack.AfterReady(running, "http://127.0.0.1:8123", tmp_path, f"cat {gate} >/dev/null", True, dict(os.environ))
    after.poll()
    manual = after.current
    assert manual.name == "manual" and manual in running.jobs and building.manual_being_built()
    assert str(manual.pid) in (tmp_path / "stack.pids").read_text().split()  # .ci/run checks every group ends
    assert "The manual is being built beside it" in capsys.readouterr().out
    after.poll()
    assert after.current is manual  # one job at a time
    with open(gate, "w") as writer:  # the build ends
        writer.write("done\n")
    wait_for(lambda: manual.exited() is not None, 10, "the manual's build to end")
    after.poll()
    assert "The manual is built: http://127.0.0.1:8123/docs/" in capsys.readouterr().out
    assert not building.manual_being_built()
    assert after.current.name == "bytecode" and "compileall" in after.current.argv
    assert str(after.current.pid) in (tmp_path / "stack.pids").read_text().split()
    running.stop()
    assert after.current.exited() is not None

    failing = stack.AfterReady(stack.Stack(), "http://127.0.0.1:8123", tmp_path, "exit 3", False, dict(os.environ))
    failing.poll()
    wait_for(lambda: failing.current.exited() is not None, 10, "the failing build to end")
    failing.poll()
    assert "The manual could not be built (exit 3;" in capsys.readouterr().err
    assert failing.current is None and not building.manual_being_built()
