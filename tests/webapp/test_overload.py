"""A crowd of step posts at once against the real ASGI server (webapp/overload.py, webapp/db/sqlite3,
the PostgreSQL pool in settings.py): no answer is a 5xx, and every step is stored exactly once.

The failure shape of issue 43, small enough for CI, on each database:
- PostgreSQL: the server connects as a role allowed 6 connections; 24 clients post at once. Before
  the pool, each request thread opened a connection of its own and the 7th got "too many connections
  for role" as a 500, as 100 runs got "too many clients" from max_connections.
- SQLite: SQLite's busy timeout is 0.5 s instead of 30; 24 clients post at once. Before the writer
  queue, the request threads contended in SQLite's busy handler and some waited past it: "database
  is locked", a 500, as 32 runs got past 30 s.

The clients post with plain urllib, no retries: what a script without the SDK sees.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest
from django.db import OperationalError, connection
from django.test import Client

from tests.conftest import asgi_server_process, service_env
from tests.webapp.runs.factories import make_run, make_task
from webapp.api.services import token_create
from webapp.runs.models import StepMetric

CLIENTS = 24
STEPS = 3
ROLLOUTS, GROUP = 32, 8
ROLE_CONNECTIONS = 6  # what the PostgreSQL role may open
POOL_SIZE = 4  # the server's pool, within the role's connections


def post(url: str, token: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"{url}/api/{path}", data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, {"detail": refused.read()[:300].decode(errors="replace"),
                              "retry_after": refused.headers.get("Retry-After")}


def step_body(step: int) -> dict:
    rollouts = [{"prompt": f"Say word {i // GROUP}.", "completion": f"word {i} of step {step} " * 8,
                 "rewards": {"format": float(i % 2), "content": float(i % 3 == 0)}, "group": i // GROUP}
                for i in range(ROLLOUTS)]
    return {"steps": [{"step": step, "metrics": {"loss": 1.0 / step}, "rollouts": rollouts}]}


@pytest.fixture
def crowded_server_env(tmp_path):
    """The server's environment on this suite's database, made as scarce as the issue's load made it."""
    extra = {"COHORT_LIMIT_ACTIVE_RUNS_PER_USER": str(CLIENTS + 1)}
    if connection.vendor != "postgresql":
        yield service_env(COHORT_SQLITE_BUSY_TIMEOUT_S="0.5", **extra)
        return
    role = f"cohort_crowd_{connection.settings_dict['NAME']}"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP OWNED BY {role}" if _role_exists(cursor, role) else "SELECT 1")
        cursor.execute(f"DROP ROLE IF EXISTS {role}")
        cursor.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT {ROLE_CONNECTIONS}")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        cursor.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    env = service_env(COHORT_DB_POOL_SIZE=str(POOL_SIZE), **extra)
    env["DATABASE_URL"] = env["DATABASE_URL"].replace("//postgres@", f"//{role}@", 1)
    assert role in env["DATABASE_URL"], env["DATABASE_URL"]
    try:
        yield env
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")


def _role_exists(cursor, role: str) -> bool:
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    return cursor.fetchone() is not None


@pytest.mark.django_db(transaction=True)
def test_a_crowd_of_step_posts_gets_no_5xx_and_every_step_is_stored_once(tmp_path, owner, crowded_server_env):
    make_task("toy_format")
    tokens = [token_create(user=owner, name=f"trainer {n}")[1] for n in range(CLIENTS)]  # one per trainer: a lab
    answers: Counter[tuple[str, int]] = Counter()
    failures: list[str] = []
    run_ids: list[int] = []
    together = threading.Barrier(CLIENTS, timeout=120)

    def client(number: int, url: str) -> None:
        try:
            token = tokens[number]
            status, run = post(url, token, "external/runs/", {"client_id": f"crowd-{number}", "task": "toy_format"})
            answers["create", status] += 1
            if status != 201:
                raise AssertionError(f"creation answered {status} {run}")
            together.wait()  # every step is posted by all clients at once: the burst is the test
            for step in range(1, STEPS + 1):
                status, body = post(url, token, f"runs/{run['id']}/steps/", step_body(step))
                answers["step", status] += 1
                if status >= 500:
                    failures.append(f"client {number} step {step}: {status} {body}")
                together.wait()
            run_ids.append(run["id"])
        except Exception as exc:  # a broken client must not leave the others waiting at the barrier
            failures.append(f"client {number}: {exc!r}")
            together.abort()

    with asgi_server_process(tmp_path / "daphne.log", crowded_server_env) as url:
        threads = [threading.Thread(target=client, args=(n, url)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert not failures, "\n".join(failures[:10])
    assert answers == {("create", 201): CLIENTS, ("step", 200): CLIENTS * STEPS}, answers
    stored = Counter(StepMetric.objects.filter(run_id__in=run_ids).values_list("run_id", "step"))
    assert len(run_ids) == CLIENTS and sorted(stored) == sorted((run, step) for run in run_ids
                                                               for step in range(1, STEPS + 1))
    assert set(stored.values()) == {1}, "a step stored twice"


# --- the answer of a database that cannot take the request ---------------------------------------


def unavailable(*args, **kwargs):
    raise OperationalError("connection failed: FATAL: sorry, too many clients already")


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True])  # DEBUG would show its technical page instead of a 500
@pytest.mark.parametrize("patched, path, kind", [
    ("webapp.runs.table.views.runs_page", "/runs/", "text/html"),  # a page's view
    ("webapp.api.views.selectors.run_list_api", "/api/runs/", "application/json"),  # the API's (DRF)
    ("webapp.sharing.middleware.ShareGrantMiddleware.__call__", "/runs/", "text/html"),  # a middleware
    ("webapp.sharing.middleware.ShareGrantMiddleware.__call__", "/api/runs/", "application/json"),
])
def test_a_database_that_cannot_take_the_request_is_a_503_with_retry_after(owner, settings, monkeypatch, debug,
                                                                          patched, path, kind):
    settings.DEBUG = debug
    make_run(owner)  # the table reads a page of runs only when there is one
    monkeypatch.setattr(patched, unavailable)
    browser = Client(raise_request_exception=False)
    browser.force_login(owner)
    answer = browser.get(path)
    assert (answer.status_code, answer.get("Retry-After")) == (503, "2")
    assert answer["Content-Type"].startswith(kind) and b"Cohort is busy" in answer.content
    assert b"too many clients" not in answer.content  # nothing of the database's own words


@pytest.mark.django_db
def test_any_other_error_is_still_a_500(owner, monkeypatch):
    monkeypatch.setattr("webapp.runs.table.views.runs_page", lambda *args, **kwargs: 1 / 0)
    make_run(owner)
    browser = Client(raise_request_exception=False)
    browser.force_login(owner)
    answer = browser.get("/runs/")
    assert answer.status_code == 500 and "Retry-After" not in answer
