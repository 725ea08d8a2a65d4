"""Cohort's own "not found": its 404 page (templates/404.html) for a page, JSON for the API and the
pages' JSON endpoints, whether DEBUG is on or off; and an address with a trailing slash too many
(`/runs/new/`) redirected to the page it names.

Why also under DEBUG: `make run` serves with DEBUG on (webapp/stack.py `debug_for_bind`, on a loopback
bind), and it is what a new user runs. A missing run there is the reader's mistake, not a bug to debug,
and Django's technical 404 (the URL patterns tried, "you're seeing this because DEBUG = True") reads as
if Cohort broke. DEBUG still shows the technical page of a 500, which is what a developer needs; the
404 patterns list is a `manage.py show_urls` away.

Why the slash: Django's APPEND_SLASH adds a missing trailing slash (`/runs` -> `/runs/`); most of
Cohort's pages end with one, so a reader types it also where a page has none (`/runs/new/`,
`/runs/compare/`). The other way round is done here, for every page at once: a GET or HEAD that
matches no URL pattern, whose address without its trailing slash does, is redirected there (301, as
APPEND_SLASH does).

A view's own 404 answer (the runs table's "No project 'x' of yours", a rendered form) is left as it is:
only an Http404 a view raised, or an address no URL pattern matches, is answered here.
"""

from __future__ import annotations

from django.http import Http404, HttpResponsePermanentRedirect, JsonResponse
from django.shortcuts import render
from django.urls import is_valid_path

DEFAULT_MESSAGE = "There is nothing at this address."


class NotFoundMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != 404 or request.resolver_match is not None:
            return response  # found, or a view's own 404 (raised ones come through process_exception)
        target = without_trailing_slash(request)
        if target is not None:
            return HttpResponsePermanentRedirect(target)
        return not_found(request, None)

    def process_exception(self, request, exception):
        if isinstance(exception, Http404):
            return not_found(request, exception)
        return None


def without_trailing_slash(request) -> str | None:
    """The address to redirect a GET or HEAD to: the path without its trailing slash, when that path
    is a page (None otherwise)."""
    path = request.path_info
    if request.method not in ("GET", "HEAD") or not path.endswith("/") or path == "/":
        return None
    if not is_valid_path(path.rstrip("/"), getattr(request, "urlconf", None)):
        return None
    target = request.path.rstrip("/")  # under SCRIPT_NAME, if any
    if target.startswith("//"):
        return None  # "//host" would leave the site
    query = request.META.get("QUERY_STRING", "")
    return f"{target}?{query}" if query else target


def message_of(exception: Exception | None) -> str:
    """What the view said was missing ("Step 12 of this run is not stored."), as Django's own 404
    handler shows it: a plain message only (a URL resolver's 404 carries the patterns it tried)."""
    if exception is not None and exception.args and isinstance(exception.args[0], str) and exception.args[0]:
        return exception.args[0]
    return DEFAULT_MESSAGE


def not_found(request, exception: Exception | None):
    """404 in the form the address's clients read (as webapp/nul_guard.py `bad_request` answers 400):
    DRF's `{"detail"}` under /api/, `{"error"}` for the pages' JSON endpoints, the 404 page otherwise."""
    message = message_of(exception)
    if request.path.startswith("/api/") and not request.path.startswith("/api/tokens/"):
        return JsonResponse({"detail": message}, status=404)
    if request.path.endswith(".json"):
        return JsonResponse({"error": message}, status=404)
    return render(request, "404.html", {"message": message, "request_path": request.path}, status=404)
