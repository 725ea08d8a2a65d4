"""The sweep websocket (`/ws/sweeps/<id>/`) through the real ASGI application and channel layer: members of
the sweep's project and staff join and receive its notices (as `sweep_notice_send` sends them); strangers
and anonymous browsers are closed with the run socket's codes; a share link opens no sweep."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from tests.webapp.runs.factories import make_run
from tests.webapp.runs.live.test_consumers import ORIGIN, session_cookie
from tests.webapp.sweeps.world import make_sweep
from webapp.asgi import application
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.live.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from webapp.sharing.services import share_link_create
from webapp.sweeps.messages import sweep_notice_after_commit, sweep_notice_send

pytestmark = pytest.mark.django_db(transaction=True)


async def connect(sweep_id, *headers):
    comm = WebsocketCommunicator(application, f"/ws/sweeps/{sweep_id}/", headers=[(b"host", b"localhost"), *headers])
    connected, code = await comm.connect(timeout=5)
    return comm, connected, code


def test_anonymous_connection_is_refused(owner):
    sweep = make_sweep(owner)

    async def scenario():
        comm, connected, code = await connect(sweep.pk, ORIGIN)
        assert not connected and code == CLOSE_UNAUTHENTICATED
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_strangers_sweep_and_a_missing_one_are_not_found(owner, stranger):
    sweep = make_sweep(owner)
    cookie = session_cookie(stranger)

    async def scenario():
        for sweep_id in (sweep.pk, 999999):
            comm, connected, code = await connect(sweep_id, ORIGIN, (b"cookie", cookie))
            assert not connected and code == CLOSE_NOT_FOUND
            await comm.disconnect()

    async_to_sync(scenario)()


def test_a_foreign_origin_is_refused_even_with_a_valid_session(owner):
    sweep = make_sweep(owner)
    cookie = session_cookie(owner)

    async def scenario():
        comm, connected, _ = await connect(sweep.pk, (b"origin", b"http://evil.example"), (b"cookie", cookie))
        assert not connected
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_share_link_to_one_of_its_runs_opens_no_sweep(client, owner):
    sweep = make_sweep(owner)
    link = share_link_create(creator=owner, runs=[make_run(owner)], label="a run")
    assert client.get(f"/share/{link.token}/").status_code == 302
    from django.conf import settings

    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()

    async def scenario():
        comm, connected, code = await connect(sweep.pk, ORIGIN, (b"cookie", cookie))
        assert not connected and code == CLOSE_UNAUTHENTICATED
        await comm.disconnect()

    async_to_sync(scenario)()


def test_members_and_staff_receive_the_sweeps_notices(owner, make_user, staff):
    admin = make_user("ada")
    project = project_create(creator=admin, name="lab-p")
    viewer = make_user("vi")
    member_add(project, user=owner, role=Role.MEMBER)
    member_add(project, user=viewer, role=Role.VIEWER)
    sweep = make_sweep(owner, project=project)
    other = make_sweep(owner, project=project, name="another")
    cookies = [session_cookie(user) for user in (owner, viewer, staff)]

    async def scenario():
        watchers = []
        for cookie in cookies:
            comm, connected, _ = await connect(sweep.pk, ORIGIN, (b"cookie", cookie))
            assert connected
            watchers.append(comm)
        await database_sync_to_async(sweep_notice_send)(other.pk)  # another sweep's: nobody here hears it
        await database_sync_to_async(sweep_notice_send)(sweep.pk)
        for comm in watchers:
            assert await comm.receive_json_from(timeout=5) == {"type": "sweep", "sweep": sweep.pk}
            assert await comm.receive_nothing(timeout=0.2)
            await comm.disconnect()

    async_to_sync(scenario)()


def test_a_notice_after_commit_arrives_once_the_transaction_commits(owner):
    sweep = make_sweep(owner)
    cookie = session_cookie(owner)

    def send_in_a_transaction():
        from django.db import transaction

        with transaction.atomic():
            sweep_notice_after_commit(sweep.pk)

    async def scenario():
        comm, connected, _ = await connect(sweep.pk, ORIGIN, (b"cookie", cookie))
        assert connected
        await database_sync_to_async(send_in_a_transaction)()
        assert await comm.receive_json_from(timeout=5) == {"type": "sweep", "sweep": sweep.pk}
        await comm.send_json_to({"type": "cancel"})  # the socket is one-way: ignored, not an error
        assert await comm.receive_nothing(timeout=0.2)
        await comm.disconnect()

    async_to_sync(scenario)()
