"""Cohort's HTTP transport: JSON over urllib with a bearer token, and the one error type.

Standard library only, on purpose: the read client (cohort/client.py, which needs pandas) and the
SDK that streams a run from any trainer (cohort/sdk/, which must install anywhere a trainer runs and
import in milliseconds) share it, so neither drags the other's dependencies in.
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

# Statuses worth asking again: the server (or a proxy before it) was busy or restarting.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 300.0  # a Retry-After longer than this (or a date far off) is waited this long


class CohortAPIError(Exception):
    """A request the API refused (`status`: the HTTP status, 0 when the server could not be reached)."""

    def __init__(self, status: int, message: str, errors: dict[str, list[str]] | None = None, *,
                 retry_after: float | None = None, answer: dict[str, Any] | None = None):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.errors = errors or {}  # a refused run creation: field -> what is wrong with it
        # An overloaded server's 503, or a 429, says how long to wait before asking again (seconds).
        self.retry_after = retry_after
        # The whole JSON object the server answered, when it sent one: a steps post whose bad per-token
        # arrays were left out says there which steps it stored all the same.
        self.answer = answer or {}

    def wait_s(self, backoff_s: float) -> float:
        """How long to wait before asking again: the server's Retry-After when it gave one (at most
        MAX_RETRY_AFTER_S), else the caller's backoff."""
        if self.retry_after is None:
            return backoff_s
        return min(MAX_RETRY_AFTER_S, max(backoff_s, self.retry_after))

    @property
    def retryable(self) -> bool:
        """True when asking again later may succeed: no answer at all, a 5xx, 408 or 429."""
        return self.status == 0 or self.status in RETRYABLE_STATUSES


def base_url(url: str) -> str:
    """`url` with one trailing slash; ValueError unless it is http(s)."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"url must start with http:// or https://, not {url!r}")
    return url.rstrip("/") + "/"


def send(url: str, token: str, method: str, path: str, data: bytes | None = None, *, timeout: float = 60.0) -> bytes:
    """The body of `<method> <url>api/<path>` (`url` as `base_url` gives it). Raises CohortAPIError:
    the server's status and message, or status 0 when it could not be reached or the answer broke off."""
    target = urllib.parse.urljoin(url, "api/" + path.lstrip("/"))
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(target, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise api_error(exc) from None
    except urllib.error.URLError as exc:
        raise CohortAPIError(0, f"cannot reach {url}: {exc.reason}") from None
    except (OSError, http.client.HTTPException) as exc:  # reset, timed out or cut off mid-answer
        raise CohortAPIError(0, f"no answer from {url}: {exc!r}") from None


def send_json(url: str, token: str, method: str, path: str, body: Any = None, *, timeout: float = 60.0) -> Any:
    """`send` with `body` encoded as JSON (None: no body) and the answer decoded."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode("utf-8"))
    answer = send(url, token, method, path, data, timeout=timeout)
    try:
        return json.loads(answer.decode("utf-8")) if answer else None
    except (ValueError, UnicodeDecodeError):
        raise CohortAPIError(0, f"{url} answered something that is not JSON: {answer[:200]!r}") from None


def api_error(exc: urllib.error.HTTPError) -> CohortAPIError:
    """The error of an HTTP error answer, with the API's `detail` (and `errors` by field) when it sent one."""
    try:
        body = json.loads(exc.read().decode("utf-8"))
        detail, errors = body.get("detail") or body.get("error"), body.get("errors")
    except (ValueError, AttributeError, UnicodeDecodeError, OSError, http.client.HTTPException):
        body, detail, errors = None, None, None
    if exc.code == 401:
        message = f"token rejected ({detail})" if detail else "token rejected"
    elif exc.code == 404:
        message = "no such run" if detail in (None, "No such run.") else f"not found: {detail}"
    else:
        message = detail or exc.reason or "request failed"
    return CohortAPIError(exc.code, str(message), errors if isinstance(errors, dict) else None,
                          retry_after=retry_after_s(exc.headers.get("Retry-After") if exc.headers else None),
                          answer=body if isinstance(body, dict) else None)


def retry_after_s(value: str | None) -> float | None:
    """A Retry-After header in seconds: delay-seconds or an HTTP date (RFC 9110 10.2.3); None if absent
    or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())
