"""What the outage tests share (tests/workers/test_redis_outage.py, test_database_outage.py): counting
what a run stored, the worker's environment and Celery app on a Redis of the test's own, and reading
the dashboard as a logged-in browser would.

The tests decide when steps happen: the trainer waits at its step gate (trainer/run/gate.py) for the
steps the test allows, so a fault always lands mid-run and the steps before and during it are known
exactly, however fast or busy the machine is.
"""

from __future__ import annotations

import json
import urllib.request
from urllib.parse import urlsplit

from celery import Celery
from django.conf import settings as django_settings
from django.test import Client
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from tests.conftest import service_env, wait_for
from tests.webapp.runs.factories import make_task
from tests.workers.test_run_train import toy_config
from trainer.run.gate import GATE_ENV, StepGate
from webapp.projects.services import personal_project_ensure
from webapp.runs.models import Run, StepMetric

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
    return Run.objects.create(owner=owner, project=personal_project_ensure(owner), task=make_task(), config=config.to_dict(), total_steps=steps,
                              state=Run.State.QUEUED)


# --- the run page's websocket, as a browser opens it ----------------------------------------------


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
    return wait_for(lambda: _try_socket(url, cookie), timeout_s, "the run socket to accept a connection")


def _try_socket(url: str, cookie: str) -> ClientConnection | None:
    try:
        return open_socket(url, cookie)
    except (InvalidHandshake, ConnectionClosed, OSError):
        return None
