"""The SQLite backend's write turns (webapp/db/sqlite3): a process's transactions, and its write
statements outside one, wait for the one writer in turn, also one in another process; one that waits
past COHORT_SQLITE_WRITE_WAIT_S raises DatabaseBusy (a 503 to the client), and nothing of it is written."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from django.db import connection, connections, transaction

from tests.conftest import ROOT, service_env
from tests.suites import SUITE_ENV
from tests.webapp.runs.factories import make_run
from webapp.db.sqlite3.base import DatabaseBusy
from webapp.runs.models import Run

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # Run once, in the embedded suite (tests/suites.py EMBEDDED_ONCE_PATHS): the backend under test is SQLite's.
    pytest.mark.backend_neutral(reason="tests Cohort's SQLite backend itself; PostgreSQL has row locks and a pool"),
]


@pytest.fixture(autouse=True)
def on_sqlite():
    """In CI's embedded suite a database other than SQLite is a broken setup: a failure, never a skip."""
    if connection.vendor != "sqlite":
        if os.environ.get(SUITE_ENV):
            pytest.fail(f"{SUITE_ENV}={os.environ[SUITE_ENV]} runs this SQLite backend test on {connection.vendor}")
        pytest.skip("a plain `make test` on PostgreSQL: this tests the SQLite backend")


class HeldWriter(threading.Thread):
    """A thread that holds a write transaction from `held` until `release`."""

    def __init__(self, run_id: int):
        super().__init__()
        self.run_id, self.held, self.release = run_id, threading.Event(), threading.Event()

    def run(self):
        try:
            with transaction.atomic():
                Run.objects.filter(pk=self.run_id).update(name="held")
                self.held.set()
                assert self.release.wait(30)
        finally:
            self.held.set()
            connections.close_all()


def in_thread(work):
    """work()'s result or exception, from a thread of its own (a connection of its own)."""
    outcome = {}

    def target():
        try:
            outcome["value"] = work()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    return outcome


def test_a_writer_waits_for_the_one_before_it_and_gives_up_busy_past_the_wait(owner, settings):
    settings.COHORT_SQLITE_WRITE_WAIT_S = 0.2
    run = make_run(owner, name="before")
    holder = HeldWriter(run.pk)
    holder.start()
    assert holder.held.wait(30)

    def write_in_transaction():
        with transaction.atomic():
            Run.objects.filter(pk=run.pk).update(notes="second")

    def write_alone():
        return Run.objects.filter(pk=run.pk).update(tags=["alone"])

    try:
        for work in (write_in_transaction, write_alone):  # a statement outside a transaction queues too
            outcome = in_thread(work)
            assert isinstance(outcome.get("error"), DatabaseBusy), outcome
            assert "no write turn within 0.2 s" in str(outcome["error"])
    finally:
        holder.release.set()
        holder.join(30)
    settings.COHORT_SQLITE_WRITE_WAIT_S = 30
    assert in_thread(write_in_transaction) == {"value": None} and in_thread(write_alone) == {"value": 1}
    assert Run.objects.values_list("name", "notes", "tags").get(pk=run.pk) == ("held", "second", ["alone"])


def test_a_failed_transaction_frees_the_writer(owner, settings):
    settings.COHORT_SQLITE_WRITE_WAIT_S = 0.2
    run = make_run(owner)
    with pytest.raises(RuntimeError), transaction.atomic():
        Run.objects.filter(pk=run.pk).update(name="rolled back")
        raise RuntimeError("the transaction fails")
    assert in_thread(lambda: Run.objects.filter(pk=run.pk).update(name="next")) == {"value": 1}
    assert Run.objects.get(pk=run.pk).name == "next"


# Another process (a worker) that holds a write transaction until told to commit.
OTHER_PROCESS = """
import sys, django
django.setup()
from django.db import transaction
from webapp.runs.models import Run
with transaction.atomic():
    Run.objects.filter(pk=int(sys.argv[1])).update(name="other process")
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_the_server_waits_for_another_processs_write_and_not_for_sqlites_busy_handler(owner, settings):
    settings.COHORT_SQLITE_WRITE_WAIT_S, settings.COHORT_SQLITE_WRITER_YIELDS = 0.2, True  # as the server
    run = make_run(owner)
    other = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, str(run.pk)], cwd=ROOT,
                             env=service_env(COHORT_SQLITE_BUSY_TIMEOUT_S="60"), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held", other.stderr.read()
        outcome = in_thread(lambda: Run.objects.filter(pk=run.pk).update(notes="server"))
        # Refused at 0.2 s, its turn not given: SQLite's busy handler would have waited 60 s.
        assert isinstance(outcome.get("error"), DatabaseBusy), outcome
    finally:
        other.communicate("commit\n", timeout=60)
    assert other.returncode == 0
    assert in_thread(lambda: Run.objects.filter(pk=run.pk).update(notes="server")) == {"value": 1}
    assert Run.objects.values_list("name", "notes").get(pk=run.pk) == ("other process", "server")
