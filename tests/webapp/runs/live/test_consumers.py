"""The run websocket through the real ASGI application (Origin check, session auth, scoped run)."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from tests.webapp.runs.factories import make_run
from webapp.alerts.models import Alert, Kind
from webapp.asgi import application
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.live.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from webapp.runs.live.notices import run_group_name

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://localhost")


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


def communicator(run_id, *headers):
    return WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=[(b"host", b"localhost"), *headers])


async def connect(run_id, *headers):
    comm = communicator(run_id, *headers)
    connected, code = await comm.connect(timeout=5)
    return comm, connected, code


def run_async(coro_fn):
    return async_to_sync(coro_fn)()


def test_anonymous_connection_is_refused(owner):
    run = make_run(owner)

    async def scenario():
        comm, connected, code = await connect(run.pk, ORIGIN)
        assert not connected and code == CLOSE_UNAUTHENTICATED
        await comm.disconnect()

    run_async(scenario)


def test_foreign_origin_is_refused_even_with_a_valid_session(owner):
    run = make_run(owner)
    cookie = session_cookie(owner)

    async def scenario():
        comm, connected, _ = await connect(run.pk, (b"origin", b"http://evil.example"), (b"cookie", cookie))
        assert not connected
        await comm.disconnect()

    run_async(scenario)


def test_another_users_run_is_refused(owner, stranger):
    run = make_run(owner)
    cookie = session_cookie(stranger)

    async def scenario():
        comm, connected, code = await connect(run.pk, ORIGIN, (b"cookie", cookie))
        assert not connected and code == CLOSE_NOT_FOUND
        await comm.disconnect()

    run_async(scenario)


def test_owner_receives_notices_sent_to_the_run_group(owner):
    run = make_run(owner)
    cookie = session_cookie(owner)

    async def scenario():
        comm, connected, _ = await connect(run.pk, ORIGIN, (b"cookie", cookie))
        assert connected
        layer = get_channel_layer()
        for seq in (1, 2):
            notice = {"type": "step", "run": run.pk, "seq": seq, "step": seq, "metrics": {"reward/mean": 0.1 * seq}}
            await layer.group_send(run_group_name(run.pk), {"type": "run.step", "notice": notice})
        first, second = await comm.receive_json_from(timeout=5), await comm.receive_json_from(timeout=5)
        assert [first["seq"], second["seq"]] == [1, 2]
        assert first["type"] == "step" and first["metrics"] == {"reward/mean": 0.1}
        await comm.disconnect()

    run_async(scenario)


def test_staff_may_watch_any_run(owner, staff):
    run = make_run(owner)
    cookie = session_cookie(staff)

    async def scenario():
        comm, connected, _ = await connect(run.pk, ORIGIN, (b"cookie", cookie))
        assert connected
        await comm.disconnect()

    run_async(scenario)



def test_a_fired_alert_reaches_every_watcher_with_their_own_badge_count(owner, staff):
    """The ingest that fires a nonfinite alert pushes it to the run's open pages (issue 25, item 5):
    the owner's badge counts the new alert, staff watching the same run see the row but keep their
    own count (0: the alert is the owner's)."""
    run = make_run(owner, state="running")
    owner_cookie, staff_cookie = session_cookie(owner), session_cookie(staff)
    nan_step = {"type": "step", "attempt": 1, "step": 3, "metrics": {"loss": None, "grad_norm": 1.0},
                "rollouts": [], "groups": []}

    async def scenario():
        mine, connected, _ = await connect(run.pk, ORIGIN, (b"cookie", owner_cookie))
        theirs, also, _ = await connect(run.pk, ORIGIN, (b"cookie", staff_cookie))
        assert connected and also
        # the real ingest; the alert's delivery runs when its transaction commits
        await database_sync_to_async(step_events_ingest)(run, [nan_step])
        # On the ingest's commit: the step's notice, then the alert its listener fired.
        for watcher in (mine, theirs):
            step = await watcher.receive_json_from(timeout=10)
            assert step["type"] == "step" and step["step"] == 3
        notice = await mine.receive_json_from(timeout=10)
        seen_by_staff = await theirs.receive_json_from(timeout=10)
        alert = await database_sync_to_async(Alert.objects.get)(run=run, kind=Kind.NONFINITE)
        assert notice["type"] == "alert" and notice["alert"] == alert.pk and notice["step"] == 3
        assert notice["kind"] == "nonfinite" and "loss is not finite" in notice["message"]
        assert notice["badge"] == 1
        assert seen_by_staff["alert"] == alert.pk and seen_by_staff["badge"] == 0
        await mine.disconnect()
        await theirs.disconnect()

    run_async(scenario)
