"""Shared fixtures: users, clients, and real service processes (Celery worker, ASGI server).

Integration tests run against the real PostgreSQL and Redis named by DATABASE_URL / REDIS_URL
(the embedded defaults otherwise: a SQLite file and the Redis that `webapp.stack test` starts).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from tests import suites
from trainer.run.gate import GATE_ENV, StepGate
from webapp.processes import die_with_parent, stop_process_group
from webapp.stack import free_local_port as free_port  # tests import it from here

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
TEST_PLUGINS_DIR = ROOT / "build" / "test-plugins"


def _use_test_plugins() -> None:
    """`webapp.stack test` puts the test plugins (tests/plugins) on PYTHONPATH; a plain `pytest` run
    gets them here, for itself and for the workers and trainers it starts. The registries load
    plugins lazily, on first use, which is after this runs."""
    if not TEST_PLUGINS_DIR.is_dir() or str(TEST_PLUGINS_DIR) in sys.path:
        return
    sys.path.insert(0, str(TEST_PLUGINS_DIR))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TEST_PLUGINS_DIR), os.environ.get("PYTHONPATH")]))


_use_test_plugins()


@pytest.fixture(scope="session")
def test_plugins() -> Path:
    """The installed test plugins (tests/plugins/README.md); a clear failure when they are missing."""
    import importlib.util

    if importlib.util.find_spec("cohort_demo_plugin") is None:
        pytest.fail(f"the test plugins are not installed in {TEST_PLUGINS_DIR}: run `make test-plugins` "
                    "(`make test` does it)")
    return TEST_PLUGINS_DIR


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, *, staff: bool = False, password: str = "pw-for-tests-1"):
        return django_user_model.objects.create_user(username=username, password=password, is_staff=staff)

    return make


@pytest.fixture
def owner(make_user):
    return make_user("owner")


@pytest.fixture
def stranger(make_user):
    return make_user("stranger")


@pytest.fixture
def staff(make_user):
    return make_user("staffer", staff=True)


@pytest.fixture
def csrf_client():
    """A test client that enforces CSRF like a browser would meet it."""
    return Client(enforce_csrf_checks=True)


def service_env(**extra: str) -> dict[str, str]:
    """Environment for a child process that must see the *test* database and the same Redis."""
    # The test process's own settings (tests/settings.py), so a password a test sets is one the server
    # can check.
    # (pytest-django puts the module it configured in the environment; `settings.SETTINGS_MODULE` is
    # None while a test overrides settings.)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
    else:
        user = db.get("USER") or ""
        auth = f"{user}:{db['PASSWORD']}@" if db.get("PASSWORD") else (f"{user}@" if user else "")
        env["DATABASE_URL"] = f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
    env["REDIS_URL"] = settings.REDIS_URL
    # The webhook tests' receiver listens on loopback, which webhooks may not reach unless allowed.
    env["COHORT_WEBHOOK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    env.update(extra)
    return env


def wait_for(predicate, timeout_s: float, what: str, log=None):
    """The first truthy value of `predicate()`, polled until `timeout_s`; the failure names `what`
    and shows the log of the process being waited on."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{log.read_text() if log else ''}")


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory):
    """Where tiny models are built once per test session (shared with worker processes)."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The real SmolLM2-135M-Instruct folder (builtin:smollm2-135m-instruct) in the user's default model
    cache, where `make test` built it (`make model`); built here on first use otherwise. Read-only for
    tests: every test that trains writes its adapters and checkpoints elsewhere."""
    from trainer.models import ensure_smollm2

    return ensure_smollm2()


@pytest.fixture
def smollm2_in_model_cache(model_cache_dir, smollm2_dir) -> Path:
    """The session's model cache (the one workers get) with the built SmolLM2 linked in, so a run of
    builtin:smollm2-135m-instruct finds it instead of building it again."""
    link = model_cache_dir / smollm2_dir.name
    if not link.exists():
        link.symlink_to(smollm2_dir, target_is_directory=True)
    return model_cache_dir


@pytest.fixture
def runs_dir(tmp_path):
    return tmp_path / "runs"


@contextmanager
def celery_worker(log_path: Path, env: dict[str, str], *, app=None, queues: str = "gpu,default",
                  timeout_s: float = 60.0, name: str = "test") -> Iterator[subprocess.Popen]:
    """A real `celery worker` process (prefork, one child) with the environment `env`, running until
    the block ends; its output goes to `log_path` (also `process.log_path`), its Celery name begins with
    `name` (also `process.hostname`). `app` is a Celery app on
    the worker's broker (the project's app by default): the worker answers its ping before the
    block starts."""
    if app is None:
        from webapp.celery import app
    hostname = f"{name}-{os.getpid()}-{time.monotonic_ns()}@localhost"
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", queues, "--concurrency", "1",
             "--pool", "prefork", "--loglevel", "INFO", "-n", hostname, "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )
    process.log_path = log_path
    process.hostname = hostname
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"celery worker exited at start:\n{log_path.read_text()}")
            if app.control.ping(destination=[hostname], timeout=0.5):
                break
        else:
            pytest.fail(f"celery worker did not answer ping:\n{log_path.read_text()}")
        yield process
    finally:
        stop_process_group(process)


def _daphne_answers(url: str, process: subprocess.Popen, log_path: Path) -> bool:
    """Whether daphne answers HTTP yet (any status: a 503 means a dependency is down, the server is up);
    a daphne that exited fails the test with its log."""
    if process.poll() is not None:
        pytest.fail(f"daphne exited at start:\n{log_path.read_text()}")
    try:
        urllib.request.urlopen(f"{url}/healthz", timeout=1)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


@contextmanager
def asgi_server_process(log_path: Path, env: dict[str, str], *, timeout_s: float = 60.0,
                        port: int | None = None) -> Iterator[str]:
    """The real ASGI app served by daphne on a loopback port (`port`, a free one by default: a test
    that stops the server and starts it again names the same one) with the environment `env`;
    yields its base URL once it answers HTTP."""
    port = port or free_port()
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _daphne_answers(url, process, log_path), timeout_s, "daphne to answer HTTP", log_path)
        yield url
    finally:
        stop_process_group(process)


@pytest.fixture
def step_gate(tmp_path) -> StepGate:
    """The step gate of the trainers this test's workers start (trainer/run/gate.py): open until the
    test calls `step_gate.allow(n)`, then steps after n wait for the test to allow them."""
    return StepGate(tmp_path / "step-gate")


@pytest.fixture
def celery_worker_process(transactional_db, tmp_path, model_cache_dir, runs_dir, settings, step_gate):
    """A real `celery worker` process on both queues, using the test database and Redis; its
    trainers obey `step_gate`."""
    from webapp.celery import app

    settings.COHORT_RUNS_DIR = runs_dir
    app.control.purge()
    env = service_env(COHORT_RUNS_DIR=str(runs_dir), COHORT_MODEL_CACHE=str(model_cache_dir),
                      **{GATE_ENV: str(step_gate.path)})
    with celery_worker(tmp_path / "worker.log", env, app=app) as process:
        yield process


@pytest.fixture(scope="session")
def shared_asgi_server(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """One daphne for the session's tests (a start costs seconds): it keeps no state of its own between
    requests (sessions, login attempts and everything else live in the database and Redis, and every
    request opens its own database connection, DATABASE_CONN_MAX_AGE=0), so a test sees it as new once
    the test database is emptied between tests."""
    # After django_db_setup, so service_env names the test database. PGAPPNAME (read by libpq) names
    # the server's PostgreSQL connections, so a test's teardown can tell when they are done.
    # It serves this session's manual at /docs/ once `docs_site` has built it (tests/browser/test_manual.py).
    env = service_env(DATABASE_CONN_MAX_AGE="0", PGAPPNAME=SHARED_SERVER_APP_NAME,
                      COHORT_DOCS_DIR=str(docs_site_dir(tmp_path_factory)))
    with asgi_server_process(tmp_path_factory.mktemp("daphne") / "daphne.log", env) as url:
        yield url


SHARED_SERVER_APP_NAME = "cohort-tests-shared-daphne"


# --- The manual (mkdocs.yml) ------------------------------------------------------------------------
def build_manual(site_dir: Path) -> subprocess.CompletedProcess:
    """`make docs` into `site_dir`: with --strict, so a broken link, a missing page or a bad reference fails."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def docs_site_dir(tmp_path_factory) -> Path:
    """Where this session's manual is built: a folder fixed at the session's start, so the shared server,
    started before a test asks for the manual, serves it at /docs/ once `docs_site` has built it."""
    return tmp_path_factory.getbasetemp() / "docs-site"


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory) -> Path:
    """The manual, built once per test session the way `make docs` builds it: its folder (index.html,
    search/search_index.json, reference/settings/index.html...). A failed build fails every test that uses
    it, with MkDocs' own words."""
    site = docs_site_dir(tmp_path_factory)
    result = build_manual(site)
    if result.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}")
    return site


def shared_server_queries() -> list[str]:
    """The queries the shared server has running on PostgreSQL now (none on SQLite, which has no view
    of other connections)."""
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'",
            [SHARED_SERVER_APP_NAME],
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def asgi_server(transactional_db, shared_asgi_server) -> Iterator[str]:
    """The real ASGI app served by daphne on a loopback port (the session's one); its base URL. A test
    that needs a server with an environment of its own starts one with `asgi_server_process`."""
    yield shared_asgi_server
    # The test database is emptied after this teardown (a TRUNCATE of every table). A request the test
    # left behind (a page's debounced save, a client that gave up waiting) may still be writing: a
    # TRUNCATE beside that write deadlocks on PostgreSQL, so wait for the server's queries to end.
    # A page that could send more requests is closed before this (tests/browser/conftest.py).
    wait_for(lambda: not shared_server_queries(), 60, "the shared server's queries to end before the flush")


def pytest_collection_modifyitems(config, items):
    """CI's two suites (COHORT_TESTS_SUITE=services|embedded): tests/suites.py says which test runs in
    which, and checks every `backend_neutral` mark. `make test` alone runs everything."""
    suites.select(config, items, database_vendor=connection.vendor)
