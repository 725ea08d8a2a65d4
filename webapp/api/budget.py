"""The logging API's budgets (issue 43): the training side first, and no 5xx under a lab's load.

A lab's server takes three kinds of load at once: trainers outside Cohort uploading steps (the SDK,
TRL's callback: a sweep is 32 of them), Cohort's own worker storing its runs' steps, and people with
run pages open. Each gets a budget of its own:

- **The worker** stores its steps over its own database connections, in its own process, never
  through this server: uploads cannot take its connections (PostgreSQL: the server's pool is
  COHORT_DB_POOL_SIZE, the worker's connections are its processes'), and on SQLite a worker's write
  takes the next turn, ahead of the queued uploads (webapp/db/sqlite3).
- **Uploads** store at most COHORT_LOGGING_CONCURRENCY steps posts at once (`logging_slot`); the rest
  wait their turn up to COHORT_LOGGING_QUEUE_WAIT_S, then get a 503 with Retry-After. So the pool
  always has connections left for pages. One token posting faster than COHORT_LOGGING_RATE gets a 429
  with Retry-After (`LoggingRateThrottle`), so one runaway loop cannot take the others' turns.
- **Pages** use what the uploads leave of the pool.

The SDK, the TRL callback and cohort.client wait for Retry-After and ask again: nothing is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from rest_framework.exceptions import APIException
from rest_framework.throttling import SimpleRateThrottle

_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()


class LoggingBusy(APIException):
    """Every upload slot stayed taken for COHORT_LOGGING_QUEUE_WAIT_S (a 503; DRF adds Retry-After from `wait`)."""

    status_code = 503
    default_detail = "Cohort is storing as many uploads as it takes at once; nothing was stored. Ask again shortly."
    default_code = "busy"

    def __init__(self):
        super().__init__()
        self.wait = settings.COHORT_RETRY_AFTER_S


def _semaphore() -> threading.BoundedSemaphore:
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(settings.COHORT_LOGGING_CONCURRENCY)
        return _slots


@contextmanager
def logging_slot() -> Iterator[None]:
    """One of the server's COHORT_LOGGING_CONCURRENCY upload slots for the block; LoggingBusy if none
    frees within COHORT_LOGGING_QUEUE_WAIT_S."""
    slots = _semaphore()
    if not slots.acquire(timeout=settings.COHORT_LOGGING_QUEUE_WAIT_S):
        raise LoggingBusy()
    try:
        yield
    finally:
        slots.release()


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
