"""The logging API's budgets (issue 43): the training side first, and no 5xx under a lab's load.

A lab's server takes three kinds of load at once: trainers outside Cohort uploading steps (the SDK,
TRL's callback: a sweep is 32 of them), Cohort's own worker storing its runs' steps, and people with
run pages open. Each gets a budget of its own:

- **The worker** stores its steps over its own database connections, in its own process, never
  through this server: uploads cannot take its connections (PostgreSQL: the server's pool is
  COHORT_DB_POOL_SIZE, the worker's connections are its processes'), and on SQLite a worker's write
  takes the next turn, ahead of the queued uploads (webapp/db/sqlite3).
- **Uploads** store at most COHORT_LOGGING_CONCURRENCY steps posts at once (`upload_turn`); the rest
  wait their turn, holding no database connection, up to COHORT_LOGGING_QUEUE_WAIT_S, then get a 503
  with Retry-After. So the pool always has connections left for pages. One token has at most
  COHORT_LOGGING_PER_TOKEN posts in the server; one more is a 429 at once. One token posting faster than COHORT_LOGGING_RATE gets a 429
  with Retry-After (`LoggingRateThrottle`), so one runaway loop cannot take the others' turns.
- **Pages** use what the uploads leave of the pool.

The SDK, the TRL callback and cohort.client wait for Retry-After and ask again: nothing is lost.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import Counter
from collections.abc import Callable

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from rest_framework.throttling import SimpleRateThrottle

from webapp.overload import unavailable_response

_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()
_in_flight: Counter[str] = Counter()  # client -> its steps posts in the server (waiting or stored)


BUSY = ("Cohort is storing as many uploads as it takes at once, and this one waited its turn too long; "
        "nothing was stored. Ask again after Retry-After seconds.")


def _semaphore() -> threading.BoundedSemaphore:
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(settings.COHORT_LOGGING_CONCURRENCY)
        return _slots


def upload_turn(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`view` (a DRF view) run in one of the server's COHORT_LOGGING_CONCURRENCY upload slots.

    - A client (a token) with COHORT_LOGGING_PER_TOKEN posts in the server already gets a 429 with
      Retry-After at once: one client's flood (a sweep of 200 runs on one token) queues no deeper
      than the server works, and other clients' posts are not stuck behind it.
    - A post that finds no slot free within COHORT_LOGGING_QUEUE_WAIT_S gets a 503 with Retry-After:
      many clients together are more than the server can store.

    Both are decided before DRF authenticates the request, the view's first query: a request holds
    its database connection until it ends, so 200 posts waiting for a slot after authenticating held
    200 of the pool's connections, and the pages waiting for one got 503s."""

    @functools.wraps(view)  # keeps DRF's attributes (cls, csrf_exempt) that the URLconf and the schema read
    def in_turn(request, *args, **kwargs):
        client = _client_key(request)
        with _slots_lock:
            if _in_flight[client] >= settings.COHORT_LOGGING_PER_TOKEN:
                return too_many_in_flight(request)
            _in_flight[client] += 1
        try:
            slots = _semaphore()
            if not slots.acquire(timeout=settings.COHORT_LOGGING_QUEUE_WAIT_S):
                return unavailable_response(request, message=BUSY)
            try:
                return view(request, *args, **kwargs)
            finally:
                slots.release()
        finally:
            with _slots_lock:
                _in_flight[client] -= 1
                if not _in_flight[client]:
                    del _in_flight[client]

    return in_turn


def _client_key(request) -> str:
    """Who posts, without a query: a digest of the token as sent (or of the session cookie). A wrong
    token is a client of its own, refused by the view's authentication in its turn."""
    credential = request.headers.get("Authorization") or request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")
    return hashlib.sha256(credential.encode("utf-8", "replace")).hexdigest()[:24]


def too_many_in_flight(request) -> JsonResponse:
    response = JsonResponse({"detail": (
        f"This token has {settings.COHORT_LOGGING_PER_TOKEN} uploads in the server already; nothing of this one was "
        "stored. Ask again after Retry-After seconds.")}, status=429)
    response["Retry-After"] = str(settings.COHORT_RETRY_AFTER_S)
    return response


class LoggingRateThrottle(SimpleRateThrottle):
    """COHORT_LOGGING_RATE requests per token (per user for the session) on the logging API; over it, a
    429 whose Retry-After says when the token's next request is taken."""

    scope = "logging"

    def get_rate(self) -> str:
        return settings.COHORT_LOGGING_RATE

    def get_cache_key(self, request, view) -> str | None:
        token = getattr(request.auth, "pk", None)
        ident = f"token-{token}" if token is not None else f"user-{request.user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
