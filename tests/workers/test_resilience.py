"""A run survives its services going away mid-run (DESIGN.md "How a run flows": the database is
the source of truth, the websocket only notifies, the trainer's event log lets the worker catch up).

The test decides when steps happen: the trainer waits at its step gate (trainer/gate.py) for the
steps the test allows, so a fault always lands mid-run and the steps before and during it are known
exactly, however fast or busy the machine is.

Real processes only: a Celery worker (prefork, as deployed), daphne serving the ASGI app, Redis,
PostgreSQL. Redis is a private server per test (it gets SIGKILLed and restarted on its port); the
database outage goes through a TCP proxy (tests/netproxy.py) between the worker and PostgreSQL, so
the server itself, which this test process uses too, keeps running.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlsplit

import pytest
from celery import Celery
from channels_redis.core import RedisChannelLayer
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from tests.conftest import ROOT, asgi_server_process, celery_worker, service_env, wait_for
from tests.netproxy import TcpProxy
from tests.webapp.runs.factories import make_run, make_task
from tests.workers.test_run_train import toy_config, wait_for_state
from trainer.gate import GATE_ENV, StepGate
from webapp.runs.models import Run, StepMetric
from webapp.runs.services import TRAIN_TASK, run_create, runs_reap_stale
from webapp.stack import EmbeddedRedis
from workers.supervisor import HEARTBEAT_EVERY_S

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ON_POSTGRES = django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
needs_postgres = pytest.mark.skipif(not ON_POSTGRES, reason="the database outage is staged with a TCP proxy in "
                                    "front of PostgreSQL (SQLite is a file: it cannot go down)")

TERMINAL = {Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED, Run.State.INTERRUPTED}


def stored_steps(run: Run) -> int:
    return StepMetric.objects.filter(run=run).count()


def event_log_steps(tmp_path, run: Run) -> int:
    """Steps the trainer has written to its event log (stored or not; a torn last line is not one)."""
    text = (tmp_path / "runs" / f"run-{run.pk}" / "events.jsonl").read_text()
    return sum(1 for line in text[:text.rfind("\n") + 1].splitlines() if line.startswith('{"type": "step"'))


def assert_every_step_stored_once(run: Run, steps: int) -> None:
    rows = list(StepMetric.objects.filter(run=run).order_by("seq").values_list("attempt", "step", "seq"))
    assert rows == [(1, step, step) for step in range(1, steps + 1)]  # no loss, no duplicate, seq dense
    run.refresh_from_db()
    assert run.last_seq == steps and run.current_step == steps


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"


def get_json(url: str, cookie: str) -> dict:
    request = urllib.request.Request(url, headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        return json.loads(response.read())


def celery_app_for(redis_url: str) -> Celery:
    """The project's Celery configuration on another broker (the project's app is bound to the
    session's Redis)."""
    app = Celery("cohort-resilience", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(broker_url=redis_url, result_backend=redis_url)
    return app


def worker_env(tmp_path, model_cache_dir, gate: StepGate, **extra: str) -> dict[str, str]:
    return service_env(COHORT_RUNS_DIR=str(tmp_path / "runs"), COHORT_MODEL_CACHE=str(model_cache_dir),
                       **{GATE_ENV: str(gate.path)}, **extra)


def queued_run(owner, steps: int) -> Run:
    """A queued toy run that nobody has enqueued yet (the test sends its task where it wants)."""
    config = toy_config(steps=steps, checkpoint_every=0)
    return Run.objects.create(owner=owner, task=make_task(), config=config.to_dict(), total_steps=steps,
                              state=Run.State.QUEUED)


def open_socket(url: str, cookie: str) -> ClientConnection:
    """A websocket to `url` (http://host:port/path) with the browser's headers: the session cookie and
    the page's Origin, which the server checks against ALLOWED_HOSTS. Raises InvalidHandshake when the
    server refuses (e.g. HTTP 403), OSError (TimeoutError included) when it cannot be reached in time.
    No client pings (a browser sends none) and no proxy (the server is on loopback)."""
    netloc = urlsplit(url).netloc
    return connect(url.replace("http://", "ws://", 1), origin=f"http://{netloc}",
                   additional_headers={"Cookie": cookie}, open_timeout=10, ping_interval=None, proxy=None,
                   legacy=True)  # connects now, so that connect_when_ready can retry


def receive_json(ws: ClientConnection, timeout_s: float) -> dict:
    """The next message, decoded; TimeoutError if none comes in time, ConnectionClosed if the server
    closed the socket."""
    return json.loads(ws.recv(timeout=timeout_s))


def connect_when_ready(url: str, cookie: str, timeout_s: float = 30.0) -> ClientConnection:
    """Connects as soon as the server can join the socket to its group again (Redis reachable)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return open_socket(url, cookie)
        except (InvalidHandshake, ConnectionClosed, OSError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"the run socket did not accept a connection within {timeout_s:.0f} s") from exc
            time.sleep(0.3)


# --- Redis restarted mid-run ----------------------------------------------------------------

REDIS_RUN_STEPS = 8
STEPS_BEFORE_REDIS_DIES = 3
STEPS_WHILE_REDIS_IS_DOWN = 2
REDIS_DOWN_AT_LEAST_S = 3.0


@pytest.mark.backend_neutral(reason=(
    "a Redis outage under a real worker and daphne: the run's steps are stored through it and the page "
    "resyncs from its last seq; the metrics-after-seq query it reads is tested on both backends in "
    "tests/webapp/runs/test_series_views.py, the ingest in tests/webapp/runs/test_ingest.py"))
def test_redis_restarted_mid_run_loses_no_step_and_the_page_resyncs(owner, tmp_path, model_cache_dir, step_gate):
    redis = EmbeddedRedis(tmp_path / "redis")
    redis_url = redis.start()
    app = celery_app_for(redis_url)
    env = worker_env(tmp_path, model_cache_dir, step_gate, REDIS_URL=redis_url)
    cookie = session_cookie(owner)
    step_gate.allow(STEPS_BEFORE_REDIS_DIES)
    try:
        with (celery_worker(tmp_path / "worker.log", env, app=app) as worker,
              asgi_server_process(tmp_path / "daphne.log", env) as base_url):
            log = worker.log_path
            run = queued_run(owner, REDIS_RUN_STEPS)
            socket_url = f"{base_url}/ws/runs/{run.pk}/"
            with open_socket(socket_url, cookie) as before:
                # A quiet socket stays open: the consumer blocks in Redis for `brpop_timeout` per
                # read (redis-py 8's default 5 s socket timeout once made it crash right then).
                time.sleep(RedisChannelLayer.brpop_timeout + 1.5)
                app.send_task(TRAIN_TASK, args=[run.pk], queue="gpu")
                # The claim is announced: an open page sees queued -> running.
                assert receive_json(before, timeout_s=120) == {
                    "type": "status", "run": run.pk, "state": "running", "current_step": 0, "error": ""}
                seen = [receive_json(before, timeout_s=120) for _ in range(STEPS_BEFORE_REDIS_DIES)]
                assert [(n["type"], n["seq"], n["step"]) for n in seen] == [("step", 1, 1), ("step", 2, 2), ("step", 3, 3)]
                last_seen = seen[-1]["seq"]

                redis.kill()
                down_since = time.monotonic()
                # Without Redis, training and shipping to the database go on; the trainer then
                # waits at the gate, so the test knows which steps came before the page resyncs.
                stored_while_down = STEPS_BEFORE_REDIS_DIES + STEPS_WHILE_REDIS_IS_DOWN
                step_gate.allow(stored_while_down)
                wait_for(lambda: stored_steps(run) == stored_while_down, 120, "steps stored while Redis is down", log)
                # Their notices were tried and lost (not merely late: one must not reach the new socket).
                failed_notice = f"could not notify run {run.pk} watchers"
                wait_for(lambda: log.read_text().count(failed_notice) >= STEPS_WHILE_REDIS_IS_DOWN, 60,
                         "the lost notices of the steps stored while Redis is down", log)
                assert event_log_steps(tmp_path, run) == stored_while_down
                time.sleep(max(0.0, REDIS_DOWN_AT_LEAST_S - (time.monotonic() - down_since)))  # the outage's length
                assert worker.poll() is None, log.read_text()
                redis.start(port=redis.port)

            # The page resyncs: reconnect (group membership died with Redis), then refetch after
            # the last seq it saw: exactly the points it missed.
            with connect_when_ready(socket_url, cookie) as after:
                missed = get_json(f"{base_url}/runs/{run.pk}/metrics.json?after={last_seen}", cookie)
                assert [p["seq"] for p in missed["points"]] == list(range(last_seen + 1, stored_while_down + 1))
                stored = StepMetric.objects.filter(run=run, seq__gt=last_seen).order_by("seq")
                assert [(p["step"], p["metrics"]) for p in missed["points"]] == [(m.step, m.metrics) for m in stored]

                step_gate.allow(REDIS_RUN_STEPS)
                notices = []
                while not notices or notices[-1]["type"] != "status":
                    notices.append(receive_json(after, timeout_s=120))
            # Notices arrive again, from the next seq on: the chart has no hole and no repeat.
            assert [(n["type"], n["seq"]) for n in notices[:-1]] == [
                ("step", seq) for seq in range(stored_while_down + 1, REDIS_RUN_STEPS + 1)]
            assert notices[-1]["state"] == Run.State.SUCCEEDED and notices[-1]["current_step"] == REDIS_RUN_STEPS

            run = wait_for_state(run, TERMINAL, log=log)
            assert run.state == Run.State.SUCCEEDED, run.error
            assert_every_step_stored_once(run, REDIS_RUN_STEPS)
            # The worker outlived its broker: it reconnected and takes new tasks.
            assert worker.poll() is None
            # A client of its own: this test's app subscribed to its results before Redis died, and
            # Celery's result consumer can miss a result published while it re-subscribes.
            assert celery_app_for(redis_url).send_task("workers.tasks.ping_task").get(timeout=60)["pid"] > 0
    finally:
        step_gate.allow(REDIS_RUN_STEPS)  # never leave a trainer waiting
        redis.stop()
        app.close()


# --- Database down for 30 s mid-run ------------------------------------------------------------

DATABASE_RUN_STEPS = 10
STEPS_BEFORE_THE_OUTAGE = 3
STEPS_DURING_THE_OUTAGE = 2
DATABASE_DOWN_S = 30.0


def proxied_database_url(proxy: TcpProxy) -> str:
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    auth = f"{user}:{db['PASSWORD']}@" if db.get("PASSWORD") else f"{user}@"
    return f"postgres://{auth}127.0.0.1:{proxy.port}/{db['NAME']}"


def postgres_proxy() -> TcpProxy:
    db = connection.settings_dict
    return TcpProxy(db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432))


def proxied_backends(proxy: TcpProxy) -> int:
    """Server processes still serving a connection that came through the proxy. Once there are
    none, a statement that was on its way when the proxy went down has landed or never will."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)",
                       [sorted(proxy.upstream_ports)])
        return cursor.fetchone()[0]


def reap() -> list[int]:
    """What the periodic reaper (beat; its own database connection) would do now."""
    return runs_reap_stale(timeout=dt.timedelta(seconds=django_settings.COHORT_HEARTBEAT_TIMEOUT_S))


@needs_postgres
def test_database_down_30_s_mid_run_the_run_catches_up_with_nothing_lost(owner, tmp_path, model_cache_dir, step_gate):
    from webapp.celery import app

    # The heartbeat is at most the outage + one heartbeat period old when the database returns.
    assert django_settings.COHORT_HEARTBEAT_TIMEOUT_S > DATABASE_DOWN_S + HEARTBEAT_EVERY_S + 1, (
        "the reaper would interrupt a healthy run during a 30 s database outage")
    app.control.purge()
    step_gate.allow(STEPS_BEFORE_THE_OUTAGE)
    with postgres_proxy() as proxy:
        # Persistent connections, as in production (the suite's default of 0 is for daphne's
        # thread pool): the outage then cuts a connection the worker holds, not only new ones.
        env = worker_env(tmp_path, model_cache_dir, step_gate, DATABASE_URL=proxied_database_url(proxy),
                         DATABASE_CONN_MAX_AGE="60")
        try:
            with celery_worker(tmp_path / "worker.log", env, app=app) as worker:
                log = worker.log_path
                run = run_create(owner=owner, task=make_task(),
                                 config=toy_config(steps=DATABASE_RUN_STEPS, checkpoint_every=0))
                # The trainer waits at the gate with every step so far stored: a run mid-training.
                wait_for(lambda: stored_steps(run) == STEPS_BEFORE_THE_OUTAGE, 240, "the first steps", log)

                proxy.down()
                down_since = time.monotonic()
                wait_for(lambda: proxied_backends(proxy) == 0, 30, "the server to drop the cut connections", log)
                stored_before = stored_steps(run)
                run.refresh_from_db()
                heartbeat_before = run.heartbeat_at
                assert run.state == Run.State.RUNNING and stored_before == STEPS_BEFORE_THE_OUTAGE

                # The trainer goes on during the outage: it logs the steps the test now allows.
                logged_during = STEPS_BEFORE_THE_OUTAGE + STEPS_DURING_THE_OUTAGE
                step_gate.allow(logged_during)
                reaped = []
                while time.monotonic() - down_since < DATABASE_DOWN_S or event_log_steps(tmp_path, run) < logged_during:
                    assert time.monotonic() - down_since < DATABASE_DOWN_S + HEARTBEAT_EVERY_S, (
                        f"the trainer logged {event_log_steps(tmp_path, run)} of {logged_during} steps during the "
                        f"outage\n{log.read_text()}")
                    reaped += reap()
                    time.sleep(1.0)
                # The outage was real: nothing reached the database, though the worker kept trying
                # and the trainer kept going.
                assert event_log_steps(tmp_path, run) == logged_during
                assert stored_steps(run) == stored_before
                run.refresh_from_db()
                assert run.heartbeat_at == heartbeat_before and run.state == Run.State.RUNNING
                assert proxy.refused > 0
                proxy.up()

                # The steps logged during the outage are shipped before the run may go on.
                wait_for(lambda: stored_steps(run) == logged_during, 120, "the outage's steps to be shipped", log)
                step_gate.allow(DATABASE_RUN_STEPS)
                deadline = time.monotonic() + 120
                while run.state not in TERMINAL and time.monotonic() < deadline:
                    reaped += reap()
                    time.sleep(0.5)
                    run.refresh_from_db()
                assert reaped == []
                assert run.state == Run.State.SUCCEEDED, f"{run.state}: {run.error}\n{log.read_text()}"
                assert_every_step_stored_once(run, DATABASE_RUN_STEPS)
                assert worker.poll() is None
        finally:
            step_gate.allow(DATABASE_RUN_STEPS)  # never leave a trainer waiting


FINISH_ONLY = """
import sys
import django
django.setup()
from webapp.runs.models import Run
from workers.supervisor import Supervisor

supervisor = Supervisor(Run.objects.get(pk=int(sys.argv[1])))
supervisor.final_status = {"type": "status", "state": "succeeded"}
print("loaded", flush=True)
sys.stdin.readline()
print(supervisor.finish(0), flush=True)
"""


@needs_postgres
def test_a_run_that_ends_while_the_database_is_down_is_recorded_when_it_returns(owner, tmp_path):
    """The supervisor's last write (the final state) waits for the database instead of failing
    the task and leaving the run `running` until the reaper calls it lost."""
    run = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now())
    with postgres_proxy() as proxy:
        env = service_env(DATABASE_URL=proxied_database_url(proxy), COHORT_RUNS_DIR=str(tmp_path / "runs"))
        stderr = open(tmp_path / "finish.log", "wb")  # noqa: SIM115 - closed below
        process = subprocess.Popen([sys.executable, "-c", FINISH_ONLY, str(run.pk)], cwd=ROOT, env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            assert process.stdout.readline().strip() == "loaded", (tmp_path / "finish.log").read_text()
            proxy.down()
            process.stdin.write("go\n")
            process.stdin.flush()
            # It tried, failed, and waits to try again (not crashed, not given up).
            wait_for(lambda: "database unavailable while recording run" in (tmp_path / "finish.log").read_text(),
                     60, "the final write to meet the outage", tmp_path / "finish.log")
            assert process.poll() is None, (tmp_path / "finish.log").read_text()
            run.refresh_from_db()
            assert run.state == Run.State.RUNNING
            proxy.up()
            out, _ = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            stderr.close()
    assert process.returncode == 0, (tmp_path / "finish.log").read_text()
    assert out.strip() == "succeeded"
    assert "database unavailable while recording run" in (tmp_path / "finish.log").read_text()
    run.refresh_from_db()
    assert run.state == Run.State.SUCCEEDED and run.finished_at is not None


SHIP_ONLY = """
import sys
import django
django.setup()
from webapp.runs.models import Run
from workers.supervisor import Supervisor

supervisor = Supervisor(Run.objects.get(pk=int(sys.argv[1])))
for _ in range(2):
    print("ready", flush=True)
    sys.stdin.readline()
    supervisor.ship()
    print(supervisor.tail.offset, flush=True)
"""


@needs_postgres
@pytest.mark.parametrize("stay_down", [False, True], ids=["connection-cut", "outage"])
def test_a_connection_lost_in_the_middle_of_a_steps_copy_is_retried_from_the_event_log(owner, tmp_path, stay_down):
    """The ingest writes rollouts with psycopg's COPY, whose errors Django does not translate: the
    supervisor must take those for an outage too, not crash the task. (While the database stays
    down, Django's failed reconnect in the rollback happens to replace that error with its own;
    when only the connection was lost, the driver's error is what reaches the supervisor.)"""
    from tests.webapp.runs.test_ingest import mhgpo_step_event

    run = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now())
    events = [mhgpo_step_event(step) for step in (1, 2)]
    log_path = tmp_path / "runs" / f"run-{run.pk}" / "events.jsonl"
    log_path.parent.mkdir(parents=True)
    log_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    with postgres_proxy() as proxy:
        env = service_env(DATABASE_URL=proxied_database_url(proxy), COHORT_RUNS_DIR=str(tmp_path / "runs"))
        stderr = open(tmp_path / "ship.log", "wb")  # noqa: SIM115 - closed below
        process = subprocess.Popen([sys.executable, "-c", SHIP_ONLY, str(run.pk)], cwd=ROOT, env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)

        def ship() -> int:
            assert process.stdout.readline().strip() == "ready", (tmp_path / "ship.log").read_text()
            process.stdin.write("go\n")
            process.stdin.flush()
            line = process.stdout.readline().strip()
            assert line.isdigit(), (tmp_path / "ship.log").read_text()
            return int(line)

        try:
            proxy.down_on(b"COPY ", stay_down=stay_down)
            assert ship() == 0  # nothing counted as shipped
            assert proxy.triggered == 1  # the connection was lost in the COPY
            assert stored_steps(run) == 0  # the step's transaction was rolled back whole
            proxy.up()
            assert ship() == log_path.stat().st_size
            process.stdin.close()
            assert process.wait(timeout=30) == 0, (tmp_path / "ship.log").read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            stderr.close()
    assert "database unavailable; run" in (tmp_path / "ship.log").read_text()
    assert list(StepMetric.objects.filter(run=run).order_by("seq").values_list("step", "seq")) == [(1, 1), (2, 2)]
    assert run.rollouts.count() == sum(len(e["rollouts"]) for e in events)
