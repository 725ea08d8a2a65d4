"""A share link's websocket: it opens for the link's run, extends the charts live, and a link revoked
while the page is open closes the socket at the next notice."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tests.webapp.runs.factories import make_run
from webapp.asgi import application
from webapp.runs.live.consumers import CLOSE_UNAUTHENTICATED
from webapp.runs.live.notices import run_group_name
from webapp.sharing.models import ShareLink
from webapp.sharing.services import share_link_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_revoked_links_open_socket_closes_at_the_next_notice(owner):
    run = make_run(owner, name="shared live")
    link = share_link_create(creator=owner, runs=[run])
    browser = Client()
    assert browser.get(f"/share/{link.token}/").status_code == 302
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    notice = {"type": "step", "run": run.pk, "seq": 1, "step": 1, "metrics": {"reward/mean": 0.5}}

    def revoke():
        ShareLink.objects.filter(pk=link.pk).update(revoked_at=timezone.now())

    async def scenario():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=[
            (b"host", b"localhost"), (b"origin", b"http://localhost"), (b"cookie", cookie)])
        connected, _ = await comm.connect(timeout=5)
        assert connected
        layer = get_channel_layer()
        await layer.group_send(run_group_name(run.pk), {"type": "run.step", "notice": notice})
        assert (await comm.receive_json_from(timeout=5))["step"] == 1
        await database_sync_to_async(revoke)()
        await layer.group_send(run_group_name(run.pk), {"type": "run.step", "notice": {**notice, "seq": 2}})
        closed = await comm.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}
        await comm.disconnect()

    async_to_sync(scenario)()
