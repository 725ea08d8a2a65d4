"""Websocket consumer of a run's live notices."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from webapp.runs.access import GRANT_ATTRIBUTE, GRANT_REFRESH, NO_GRANT, LinkGrant, anonymized
from webapp.runs.hooks import badge_count
from webapp.runs.live.notices import AlertNotice, StatusNotice, StepNotice, run_group_name
from webapp.runs.selectors import run_get_for_user, run_linked

# Application close codes (4000-4999): the browser can tell "log in again" from "no such run".
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Joins `run-<id>` after checking the user may read that run (a member of its project, or staff), or
    that a share link this browser opened reads it, and then forwards its notices. A link holder gets no
    alert notices (they belong to the project's members), and an anonymous link's no error paths."""

    via_link = False
    anonymous = False

    async def connect(self):
        user = self.scope.get("user")
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        grant: LinkGrant = self.scope.get(GRANT_ATTRIBUTE, NO_GRANT)
        signed_in = user is not None and user.is_authenticated
        run = None
        if signed_in:
            try:
                run = await database_sync_to_async(run_get_for_user)(user, run_id)
            except Http404:
                run = None
        if run is None and run_id in grant.runs:
            self.via_link, self.anonymous = True, run_id in grant.anonymous
            run = await database_sync_to_async(run_linked)(run_id)
        if run is None:
            await self.close(code=CLOSE_NOT_FOUND if signed_in else CLOSE_UNAUTHENTICATED)
            return
        self.run_id = run.pk
        self.group_name = run_group_name(run.pk)
        await self.channel_layer.group_add(self.group_name, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if getattr(self, "group_name", None):
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # The socket is one-way; commands go through HTTP where CSRF and forms apply.
        pass

    async def _link_still_opens(self) -> bool:
        """A link holder's socket stays only while a link still opens the run: one revoked or expired
        since the socket opened closes it at the next notice (as the pages answer at the next request)."""
        if not self.via_link:
            return True
        refresh = self.scope.get(GRANT_REFRESH)
        grant = await database_sync_to_async(refresh)() if refresh is not None else None
        if grant is not None and self.run_id in grant.runs:
            return True
        await self.close(code=CLOSE_UNAUTHENTICATED)
        return False

    async def run_step(self, event):
        notice: StepNotice = event["notice"]
        if await self._link_still_opens():
            await self.send_json(notice)

    async def run_status(self, event):
        if not await self._link_still_opens():
            return
        notice: StatusNotice = event["notice"]
        if self.anonymous and notice.get("error"):
            # As the page shows it: read afresh, since the worker that claimed the run names its host.
            run = await database_sync_to_async(run_linked)(notice["run"])
            notice = {**notice, "error": anonymized(notice["error"], run) if run else ""}
        await self.send_json(notice)

    async def run_prompts(self, event):
        if await self._link_still_opens():
            await self.send_json(event["notice"])  # phase 1's record (webapp/runs/ingest/prompt_phase.py)

    async def run_slurm(self, event):
        # The Slurm job's state, reason and nodes as the slurm queue's tick read them
        # (webapp/scheduling/slurm/services.py); only the signed-in readers' page shows its panel.
        if not self.via_link:
            await self.send_json(event["notice"])

    async def run_alert(self, event):
        # Every watcher sees the alert row (the run page lists all its alerts); the badge is the
        # watcher's own count of unseen open alerts, as the topbar shows it on the next page load
        # (counted by the alerts app, which registers its counter in webapp/runs/hooks.py).
        notice: AlertNotice = event["notice"]
        if self.via_link:
            return
        badge = await database_sync_to_async(badge_count)(self.scope["user"])
        await self.send_json({**notice, "badge": badge})
