"""An overloaded server answers 503 with `Retry-After`, never 500 (issue 43).

A request that finds the database busy or unreachable raises Django's OperationalError:
- no pooled PostgreSQL connection was free within COHORT_DB_POOL_WAIT_S;
- PostgreSQL refused one more client;
- the SQLite write lock stayed taken (webapp/db/sqlite3 `DatabaseBusy`).

Nothing was stored then: the request's transaction rolled back. So asking again later is the right
answer, and clients that retry (the SDK, the TRL callback, cohort.client) wait for `Retry-After`.

Such an exception can be raised in a view, in DRF's handling or in a middleware that touches the
session or the user. Django turns each one into a 500 where it happens: in DEBUG, its technical page.
So the exception is noted on the request when Django reports it (`got_request_exception`), and
`OverloadMiddleware`, the outermost, swaps whatever 500 came back for the 503.
"""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import OperationalError
from django.dispatch import receiver
from django.http import HttpResponse, JsonResponse
from django.utils.html import escape

_UNAVAILABLE = "_cohort_database_unavailable"
MESSAGE = "Cohort is busy: the database could not take this request now. Nothing was stored; ask again shortly."


def unavailable_response(request, message: str = MESSAGE) -> HttpResponse:
    """503 with Retry-After: JSON for the API and for a client that asks for JSON, a short page otherwise."""
    wait = str(settings.COHORT_RETRY_AFTER_S)
    if request.path.startswith("/api/") or "json" in request.headers.get("Accept", ""):
        response = JsonResponse({"detail": message}, status=503)
    else:
        response = HttpResponse(f"<!doctype html><title>Busy</title><h1>Busy</h1><p>{escape(message)}</p>",
                                status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = wait
    return response


@receiver(got_request_exception)
def _note_unavailable(sender, request=None, **kwargs) -> None:
    if request is not None and isinstance(sys.exc_info()[1], OperationalError):
        setattr(request, _UNAVAILABLE, True)


class OverloadMiddleware:
    """The outermost middleware: a request whose database was unavailable is answered 503."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if getattr(request, _UNAVAILABLE, False) and response.status_code >= 500:
            return unavailable_response(request)
        return response
