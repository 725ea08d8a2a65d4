"""POSTing JSON to a webhook: plain HTTP, no Django (the Celery task imports the errors at load time).

A 2xx is a delivery. A connection error, a timeout or a 5xx is temporary (`WebhookTemporaryError`,
worth retrying); any other answer, a 4xx or a redirect (never followed: a redirected POST would turn
into a GET), is a refusal (`WebhookRejected`): retrying would get the same answer.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

USER_AGENT = "Cohort-alerts/1"


class WebhookError(Exception):
    """The webhook did not take the alert."""


class WebhookTemporaryError(WebhookError):
    """Unreachable, too slow, or a 5xx: try again later."""


class WebhookRejected(WebhookError):
    """The server answered and refused (4xx, or a redirect): do not retry."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx code


_opener = urllib.request.build_opener(_NoRedirects)


def post_json(url: str, payload: dict[str, Any], *, timeout_s: float) -> int:
    """POSTs `payload` as JSON to `url`; returns the 2xx status, raises a WebhookError otherwise.
    `timeout_s` bounds the connect and each read."""
    body = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": USER_AGENT})
    try:
        with _opener.open(request, timeout=timeout_s) as response:
            response.read(65536)
            return response.status
    except urllib.error.HTTPError as exc:
        reason = f"HTTP {exc.code} {exc.reason}"
        if exc.code >= 500:
            raise WebhookTemporaryError(reason) from None
        raise WebhookRejected(reason) from None
    except TimeoutError as exc:
        raise WebhookTemporaryError(f"no answer within {timeout_s:g} s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise WebhookTemporaryError(f"no answer within {timeout_s:g} s") from exc
        raise WebhookTemporaryError(f"cannot connect: {exc.reason}") from exc
    except (ConnectionError, OSError) as exc:  # reset mid-answer, a closed connection
        raise WebhookTemporaryError(f"connection failed: {exc}") from exc
