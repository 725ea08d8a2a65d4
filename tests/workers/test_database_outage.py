"""A run survives its database going away mid-run: the trainer's event log lets the worker catch up
with nothing lost or stored twice. The outage goes through a TCP proxy (tests/netproxy.py) between the
worker and PostgreSQL, so the server itself, which this test process uses too, keeps running. Real
processes: a Celery worker and PostgreSQL; the trainer waits at its step gate for the steps the test
allows, so the fault always lands mid-run.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from tests.conftest import ROOT, celery_worker, service_env, wait_for
from tests.netproxy import TcpProxy
from tests.webapp.runs.factories import make_run, make_task
from tests.workers.resilience import (
    TERMINAL,
    assert_every_step_stored_once,
    event_log_steps,
    stored_steps,
    worker_env,
)
from tests.workers.test_run_train import toy_config
from webapp.runs.launch.check import Launch
from webapp.runs.models import Run, StepMetric
from webapp.runs.services import run_create, runs_reap_stale
from workers.supervisor import HEARTBEAT_EVERY_S

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

needs_postgres = pytest.mark.postgresql_only(reason="the database outage is staged with a TCP proxy in front of "
                                             "PostgreSQL (SQLite is a file: it cannot go down)")

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
                run = run_create(Launch(owner=owner, task=make_task(), config=toy_config(steps=DATABASE_RUN_STEPS, checkpoint_every=0)))
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
                # The fault is 30 s long by design, so this loop paces itself by the clock; the reaper
                # looks every second meanwhile, as beat would.
                while time.monotonic() - down_since < DATABASE_DOWN_S:
                    reaped += reap()
                    time.sleep(1.0)
                # The trainer's steps decide the rest: the outage lasts until they are logged, however
                # long this machine takes for them.
                wait_for(lambda: event_log_steps(tmp_path, run) >= logged_during, 240,
                         "the trainer to log the outage's steps", log)
                # The outage was real: nothing reached the database, though the worker kept trying
                # and the trainer kept going.
                assert event_log_steps(tmp_path, run) == logged_during
                assert stored_steps(run) == stored_before
                run.refresh_from_db()
                assert run.heartbeat_at == heartbeat_before and run.state == Run.State.RUNNING
                assert proxy.refused > 0
                proxy.up()
                # A slow machine may have stretched the outage past the reaper's timeout: the reaper
                # looks again only once the worker has reported back (its heartbeat moved).
                wait_for(lambda: Run.objects.get(pk=run.pk).heartbeat_at != heartbeat_before, 120,
                         "the worker's heartbeat after the outage", log)

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
    from tests.webapp.runs.ingest.test_store import mhgpo_step_event

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
