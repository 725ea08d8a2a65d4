"""Who may do what to a run (docs/explanation/architecture.md "A lab's runs"): read it, change it, share it.

- **Read**: site staff, any member of the run's project (viewer, member or admin), or a browser holding
  a share link to it (`LinkGrant`, which webapp/sharing puts on the request and on the websocket's scope).
- **Change** (edit its labels, cancel, resume, archive, delete, move): staff, an admin of its project,
  or its owner while at least a member there. A viewer reads and nothing else.
- **Share** (make a link to it): whoever may change it.

A reader who may not change a run gets a 403 that says why; someone who may not read it gets the 404
of a run that does not exist, and an anonymous browser without a link the login page, as everywhere.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404

from webapp.projects.models import Role
from webapp.projects.selectors import may_change_owned, readable_project_ids, role_of
from webapp.runs.models import Run
from webapp.runs.selectors import run_get_for_user, run_linked, run_list_for_user


@dataclass(frozen=True)
class LinkGrant:
    """What the share links this browser opened let it read. `anonymous`: the runs it reads only
    through anonymous links (no owner, user, host, worker or path is shown); `adapters`: the runs whose
    links include the adapter download; `compares`: each compare link's runs."""

    runs: frozenset[int] = frozenset()
    anonymous: frozenset[int] = frozenset()
    adapters: frozenset[int] = frozenset()
    compares: tuple[frozenset[int], ...] = field(default=())


NO_GRANT = LinkGrant()
GRANT_ATTRIBUTE = "share_grant"  # on the request (webapp/sharing/middleware.py) and in the websocket's scope
# In the websocket's scope too: a function that reads the grant again (an open socket outlives a revoke).
GRANT_REFRESH = "share_grant_refresh"


def link_grant(request) -> LinkGrant:
    return getattr(request, GRANT_ATTRIBUTE, NO_GRANT)


@dataclass(frozen=True)
class RunAccess:
    """What the current reader may do to one run (templates read `run.access`)."""

    role: str | None  # the reader's role in the run's project; None when they read through a link only
    can_change: bool
    via_link: bool
    anonymous: bool  # hide the owner, user names, hosts, workers and paths
    adapter: bool  # may download the trained adapter

    @property
    def can_share(self) -> bool:
        return self.can_change

    @property
    def signed_in_reader(self) -> bool:
        """Reads as a project member (alerts, experiments, the edit form): not through a link only."""
        return self.role is not None


class LoginNeeded(Exception):
    """An anonymous browser asked for a run no link of it opens: the login page answers, as it would
    for any page (whether the run exists stays unsaid)."""


def can_change(user, run: Run, role: str | None = None) -> bool:
    """Staff, an admin of the run's project, or its owner while at least a member there."""
    return may_change_owned(user, run.project_id, run.owner_id, role)


def change_refusal(user, run: Run) -> str:
    """Why `user` (who reads the run) may not change it, for the 403 page."""
    role = role_of(user, run.project_id)
    if role == Role.VIEWER:
        return (f"You are a viewer of project {run.project.name}: viewers read its runs and change nothing. "
                "Ask one of its admins to make you a member.")
    return (f"Run {run.pk} is {run.owner.get_username()}'s: only its owner or an admin of project "
            f"{run.project.name} may change it.")


def run_change_check(user, run: Run) -> None:
    """PermissionDenied (a 403 with the reason) unless `user` may change the run."""
    if not can_change(user, run):
        raise PermissionDenied(change_refusal(user, run))


def runs_change_check(user, runs) -> None:
    for run in runs:
        run_change_check(user, run)


def run_read(request, run_id) -> Run:
    """The run if this request may read it, with `.access` set; Http404 for a signed-in user who may
    not, LoginNeeded for an anonymous browser whose links do not open it."""
    user = request.user
    grant = link_grant(request)
    if user.is_authenticated:
        try:
            run = run_get_for_user(user, run_id)
        except Http404:
            run = None
        if run is not None:
            role = role_of(user, run.project_id)
            run.access = RunAccess(role=role, can_change=can_change(user, run, role), via_link=False,
                                   anonymous=False, adapter=True)
            return run
    try:
        pk = int(run_id)
    except (TypeError, ValueError):
        pk = None
    if pk is not None and pk in grant.runs:
        run = run_linked(pk)
        if run is not None:
            run.access = RunAccess(role=None, can_change=False, via_link=True, anonymous=pk in grant.anonymous,
                                   adapter=pk in grant.adapters)
            return run
    if not user.is_authenticated:
        raise LoginNeeded
    raise Http404("No such run.")


def runs_readable(request) -> QuerySet[Run]:
    """Every run this request may read: its user's (by project) and those its share links open."""
    grant = link_grant(request)
    user = request.user
    if not grant.runs or (user.is_authenticated and user.is_staff):
        return run_list_for_user(user)
    readable = Q(pk__in=grant.runs)
    if user.is_authenticated:
        readable |= Q(project_id__in=readable_project_ids(user))
    return Run.objects.select_related("task", "task__program", "owner", "project").filter(readable)


def link_readable(view):
    """Marks a run page that a share link opens: no login is required up front (LoginRequiredMiddleware
    lets it through), and an anonymous browser whose links do not open the run is sent to log in."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated and not link_grant(request).runs:
            return redirect_to_login(request.get_full_path())
        try:
            return view(request, *args, **kwargs)
        except LoginNeeded:
            return redirect_to_login(request.get_full_path())

    wrapped.login_required = False  # Django 5.1's LoginRequiredMiddleware reads this (login_not_required)
    return wrapped


# --- what an anonymous link hides ----------------------------------------------------------------

# An absolute path (POSIX, or a Windows drive) of two or more parts, or a home folder.
PATH = re.compile(r"(?<![\w.])(?:/[\w.@+-]+){2,}/?|(?<![\w.])[A-Za-z]:\\[^\s\"']+|~/[^\s\"']+")
HIDDEN_PATH = "<path>"


def scrub_text(text: str | None) -> str | None:
    """`text` with every file path replaced (tracebacks, errors, settings that name folders)."""
    if not text:
        return text
    return PATH.sub(HIDDEN_PATH, text)


def scrub_value(value):
    """A JSON value with every string scrubbed, recursively (a run's config, a rollout's error)."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, list):
        return [scrub_value(v) for v in value]
    if isinstance(value, dict):
        return {k: scrub_value(v) for k, v in value.items()}
    return value


def anonymized(text, run: Run) -> str:
    """`text` as an anonymous link shows it: no path, no worker or host name, no owner's user name."""
    text = scrub_text(str(text)) if text is not None else ""
    names = [run.worker, run.worker.partition("@")[2]] if run.worker else []
    names.append(run.owner.get_username())
    for name in sorted(filter(None, names), key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", "<hidden>", text)
    return text
