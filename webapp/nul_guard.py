"""A middleware that answers 400 to a request whose path or query string holds a NUL character.

PostgreSQL text cannot hold NUL, so a `?q=%00` that reaches a filter is a DataError (a 500) in any
view that passes a query parameter to the database. Django's form fields already refuse NUL; this
covers the query parameters and path segments views read directly, in one place, so a new view
cannot forget it. Found by fuzzing the API against its schema (tests/webapp/api/test_schema_fuzz.py).
"""

from __future__ import annotations

from django.http import JsonResponse
from django.shortcuts import render

MESSAGE = "The request's address holds a NUL character (%00), which no parameter accepts."


class RejectNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or any("\x00" in key or any("\x00" in v for v in values)
                                         for key, values in request.GET.lists()):
            return bad_request(request, MESSAGE)
        return self.get_response(request)


def holds_nul(value) -> bool:
    """Whether a JSON value (a request body, a stored preference) holds a NUL anywhere, keys included:
    PostgreSQL's text and jsonb refuse it, as a DataError (a 500) if it reached them."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_nul(v) for v in value)
    return False


def nul_replaced(value, replacement: str = "\ufffd"):
    """A JSON value with every NUL (in strings and keys) replaced, for free-form JSON a client sends to
    be shown back (a run's config from its trainer): stored, where PostgreSQL would refuse it."""
    if isinstance(value, str):
        return value.replace("\x00", replacement)
    if isinstance(value, dict):
        return {nul_replaced(k, replacement): nul_replaced(v, replacement) for k, v in value.items()}
    if isinstance(value, list):
        return [nul_replaced(v, replacement) for v in value]
    return value


def bad_request(request, message: str):
    """400 in the form the endpoint's clients read: DRF's `{"detail"}` under /api/, `{"error"}` for the
    pages' JSON endpoints, the bad-request page otherwise."""
    if request.path.startswith("/api/") and not request.path.startswith("/api/tokens/"):
        return JsonResponse({"detail": message}, status=400)
    if request.path.endswith(".json"):
        return JsonResponse({"error": message}, status=400)
    return render(request, "runs/bad_request.html", {"message": message}, status=400)
