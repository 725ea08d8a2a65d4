"""Notices reach a watching websocket after each committed step, with increasing seq."""

import json

import pytest
from asgiref.sync import async_to_sync

from tests.webapp.runs.factories import make_run
from tests.webapp.runs.live.test_consumers import ORIGIN, connect, session_cookie
from webapp.runs.models import Run, StepMetric
from workers.supervisor import Supervisor

NEUTRAL = ("the supervisor's notices after each shipped batch: in seq order, the alert before its step, "
           "nothing for a re-shipped log; the run's websocket through the channel layer and the alert it "
           "pushes are tested on both backends in tests/webapp/runs/live/test_consumers.py, the ingest returning "
           "only the new rows in tests/webapp/runs/ingest/test_store.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def write_steps(path, steps, attempt=1):
    with open(path, "a") as log:
        for step in steps:
            log.write(json.dumps({"type": "step", "attempt": attempt, "step": step,
                                  "metrics": {"reward/mean": step / 10, "loss": None}}) + "\n")


def test_shipped_steps_are_notified_in_seq_order_and_a_reshipped_log_sends_nothing(owner, settings, tmp_path):
    settings.COHORT_RUNS_DIR = tmp_path
    run = make_run(owner, state=Run.State.RUNNING)
    supervisor = Supervisor(run)
    supervisor.run_dir.mkdir(parents=True)
    cookie = session_cookie(owner)

    async def watch(batches):
        comm, connected, _ = await connect(run.pk, ORIGIN, (b"cookie", cookie))
        assert connected
        seen, others = [], []
        for steps in batches:
            write_steps(supervisor.tail.path, steps)
            await _ship(supervisor)
            while len(seen) < sum(map(len, batches[:batches.index(steps) + 1])):
                notice = await comm.receive_json_from(timeout=5)
                (seen if notice["type"] == "step" else others).append(notice)
        supervisor.tail.offset = 0  # as after a restart of the supervisor: the whole log again
        await _ship(supervisor)
        assert await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()
        # step 1's null loss fires the owner's default nonfinite alert, pushed once, before its step
        assert [(n["type"], n["step"]) for n in others] == [("alert", 1)]
        return seen

    notices = async_to_sync(watch)([[1, 2], [3], [4, 5, 6]])
    assert [n["seq"] for n in notices] == [1, 2, 3, 4, 5, 6]
    assert [n["step"] for n in notices] == [1, 2, 3, 4, 5, 6]
    assert all(n["type"] == "step" and n["run"] == run.pk for n in notices)
    assert notices[0]["metrics"] == {"reward/mean": 0.1, "loss": None}
    assert StepMetric.objects.filter(run=run).count() == 6


async def _ship(supervisor):
    from channels.db import database_sync_to_async

    await database_sync_to_async(supervisor.ship)()
