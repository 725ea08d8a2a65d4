"""The manual at /docs/: the site `make docs` builds from docs/ (mkdocs.yml) into COHORT_DOCS_DIR, served by
Cohort itself, as the API's Swagger page is, so a lab server with no internet access still has it.

It is public: it describes Cohort and nothing of anyone's runs, and a new user reads it before they have an
account. A folder is served as its index.html (MkDocs' use_directory_urls); a path that leaves the folder
(`..`, encoded or not) is a 404. Without a built site every address answers a page that says how to build
it, never a 500; while `make run` builds it beside the running server (webapp/manual/building.py), a 503
page that says so and reloads itself until the manual is there.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404, HttpResponse, HttpResponsePermanentRedirect
from django.shortcuts import render
from django.utils._os import safe_join
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from django.views.static import serve

from webapp.manual.building import manual_being_built

# The types of the files MkDocs and Material write, named here: Python's `mimetypes` reads the machine's
# /etc/mime.types, and without one (python:3.11-slim) it knows no .woff2 and calls .js application/javascript.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".gif": "image/gif",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
    ".ttf": "font/ttf",
    ".xml": "application/xml",
    ".txt": "text/plain; charset=utf-8",
    ".inv": "application/octet-stream",  # mkdocstrings' objects.inv
}
# Material's bundles carry their content's hash in their names (main.57a0d79d.min.css): a new build names
# a changed file anew, so a browser keeps one for a year. Everything else (the pages, the search index)
# is asked again each time and answered 304 while unchanged (Last-Modified).
HASHED = re.compile(r"\.[0-9a-f]{8,}(\.min)?\.(css|js)$")
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
# How soon a browser (the page's refresh, a client's Retry-After) asks again for a manual being built:
# the build takes 5 to 20 s.
BUILDING_RETRY_S = 3


def docs_dir() -> Path:
    return Path(str(settings.COHORT_DOCS_DIR))


@login_not_required
@require_safe
def manual(request, path: str = "") -> HttpResponse:
    root = docs_dir()
    if not (root / "index.html").is_file():
        return being_built(request) if manual_being_built() else not_built(request, root)
    try:
        target = Path(safe_join(root, path))
    except SuspiciousFileOperation:  # ../ out of the folder
        return missing(request, path)
    if target.is_dir():
        if path and not path.endswith("/"):  # the pages' relative links assume the slash
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(request.path + "/" + (f"?{query}" if query else ""))
        path = posixpath.join(path, "index.html")
    try:
        response = serve(request, path, document_root=root)
    except Http404:
        return missing(request, path)
    suffix = posixpath.splitext(path)[1].lower()
    if response.status_code == 200 and suffix in CONTENT_TYPES:
        response["Content-Type"] = CONTENT_TYPES[suffix]
    response["Cache-Control"] = IMMUTABLE if HASHED.search(path) else REVALIDATE
    return response


@never_cache
def missing(request, path: str) -> HttpResponse:
    return render(request, "manual/missing.html", {"path": path}, status=404)


@never_cache
def not_built(request, root: Path) -> HttpResponse:
    """Said on every address of the manual until it is built; the folder only to staff or in development
    (a stranger has no use for the server's paths)."""
    show_folder = settings.DEBUG or request.user.is_staff
    return render(request, "manual/not_built.html", {"folder": root if show_folder else None}, status=404)


@never_cache
def being_built(request) -> HttpResponse:
    """Said on every address of the manual while `make run` builds it beside the running server: 503 with
    Retry-After (it is there in seconds, not missing), and the page reloads itself until it is."""
    response = render(request, "manual/being_built.html", {"retry_s": BUILDING_RETRY_S}, status=503)
    response["Retry-After"] = str(BUILDING_RETRY_S)
    return response
