"""Puts what a browser's share links let it read on each request (`request.share_grant`) and on each
websocket's scope (`scope["share_grant"]`, with a function that reads it again), where
webapp/runs/access.py and the run's consumer read it. Only a browser that opened a link pays the two
queries."""

from __future__ import annotations

from functools import partial

from channels.db import database_sync_to_async

from webapp.runs.access import GRANT_ATTRIBUTE, GRANT_REFRESH
from webapp.sharing.services import grant_for_session


class ShareGrantMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        grant = grant_for_session(getattr(request, "session", None))
        if grant is not None:
            setattr(request, GRANT_ATTRIBUTE, grant)
        return self.get_response(request)


class ShareGrantASGIMiddleware:
    """The same for websockets, inside Channels' session middleware."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        session = scope.get("session")
        grant = await database_sync_to_async(_grant)(session) if session is not None else None
        if grant is not None:
            scope = dict(scope, **{GRANT_ATTRIBUTE: grant, GRANT_REFRESH: partial(_grant, session)})
        return await self.inner(scope, receive, send)


def _grant(session):
    # The session loads lazily and may be empty (no cookie): then no link is held.
    return grant_for_session(session) if session.get("share_links") else None
