"""What a request's credentials reach in the API (issue 42): a personal token is scoped to one project or
to all its user's projects, and to reading or to reading and writing; the browser session reaches
whatever its user does.

- Every run the API answers about comes from `api_runs(request)`: the user's runs (by project,
  `run_list_for_user`) narrowed to the token's project, so a token of project A reads nothing of B.
- A read-only token is refused every POST, PATCH, PUT and DELETE with a 403 (`TokenScopePermission`,
  one of the API's default permission classes), before any view runs.
- A write token scoped to a project creates runs there only (`token_project_check`).
"""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission

from webapp.api.models import ApiToken
from webapp.runs.models import Run
from webapp.runs.selectors import run_get_among, run_list_for_user


def token_of(request) -> ApiToken | None:
    """The personal token the request authenticated with (None: the browser session)."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, ApiToken) else None


class TokenScopePermission(BasePermission):
    """A read-only token reads: any other method is a 403 that says so."""

    message = ("This token is read-only: it may not create, change or log anything. Make a token with write "
               "access on /api/tokens/.")

    def has_permission(self, request, view) -> bool:
        token = token_of(request)
        return token is None or token.can_write or request.method in SAFE_METHODS


def api_runs(request, *, ids_first: bool = False) -> QuerySet[Run]:
    """The runs this request may read through the API (`ids_first`: see `run_list_for_user`)."""
    runs = run_list_for_user(request.user, ids_first=ids_first)
    token = token_of(request)
    if token is not None and token.project_id is not None:
        runs = runs.filter(project_id=token.project_id)
    return runs


def api_run(request, run_id) -> Run:
    """One run this request may read; Http404 otherwise (also for a malformed id)."""
    return run_get_among(api_runs(request), run_id)


def token_project_check(request, project) -> None:
    """A token scoped to a project writes there only: 403 for another project."""
    token = token_of(request)
    if token is not None and token.project_id is not None and project is not None and project.pk != token.project_id:
        raise PermissionDenied(f"This token is scoped to project {token.project.name}: it cannot write to project "
                               f"{project.name}.")


def token_default_project(request):
    """The project a scoped token writes to when the request names none (None: the user's personal one)."""
    token = token_of(request)
    return token.project if token is not None and token.project_id is not None else None
