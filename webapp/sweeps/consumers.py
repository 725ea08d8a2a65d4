"""Websocket consumer of a sweep's notices (`/ws/sweeps/<id>/`): "the sweep changed", after which the
page refetches its data.json (the database is the source of truth, as for runs)."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from webapp.runs.live.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from webapp.sweeps.messages import SweepNotice, sweep_group_name
from webapp.sweeps.selectors import sweep_get_for_user


class SweepConsumer(AsyncJsonWebsocketConsumer):
    """Joins `sweep-<id>` after checking the user may read that sweep (a member of its project, or staff),
    then forwards its notices. The close codes are the run socket's, so the browser tells "log in
    again" (4401) from "no such sweep" (4404). Share links open runs, never sweeps."""

    async def connect(self):
        user = self.scope.get("user")
        sweep_id = self.scope["url_route"]["kwargs"]["sweep_id"]
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        try:
            sweep = await database_sync_to_async(sweep_get_for_user)(user, sweep_id)
        except Http404:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group_name = sweep_group_name(sweep.pk)
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if getattr(self, "group_name", None):
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # The socket is one-way; commands (Cancel) go through HTTP where CSRF and permissions apply.
        pass

    async def sweep_notice(self, event):
        notice: SweepNotice = event["notice"]
        await self.send_json(notice)
