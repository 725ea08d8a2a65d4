"""Making, opening and revoking share links, and what a browser's links let it read."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Iterable

from django.core import signing
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F
from django.http import Http404
from django.utils import timezone

from webapp.projects.models import Role
from webapp.projects.selectors import has_role
from webapp.runs.access import LinkGrant, can_change
from webapp.runs.models import Run
from webapp.sharing.models import ShareLink, signer

DEFAULT_DAYS = 30
MAX_DAYS = 365
MAX_RUNS = 20  # a compare view's runs (webapp/runs/charts/views.py COMPARE_MAX_RUNS)
SESSION_KEY = "share_links"  # the ids of the links this browser opened
SESSION_MAX_LINKS = 20


def share_refusal(user, runs: list[Run]) -> str | None:
    """Why `user` may not share these runs (None: they may). One run: its owner (a member) or an admin
    of its project. A compare view: a member or admin of every run's project. A viewer shares nothing."""
    if len(runs) == 1:
        run = runs[0]
        if not can_change(user, run):
            return (f"Only run {run.pk}'s owner or an admin of project {run.project.name} may share it.")
        return None
    for run in runs:
        if not has_role(user, run.project_id, Role.MEMBER):
            return (f"Sharing a compare view takes being a member of every run's project; you are not one of "
                    f"project {run.project.name} (run {run.pk}).")
    return None


def share_link_create(*, creator, runs: list[Run], anonymous: bool = False, allow_adapter: bool = False,
                      days: int = DEFAULT_DAYS, label: str = "", metrics: Iterable[str] = ()) -> ShareLink:
    """A new link to one run, or to a compare view of several; PermissionDenied (with the reason) when
    the creator may not share them."""
    if not 1 <= len(runs) <= MAX_RUNS:
        raise ValueError(f"A link opens 1 to {MAX_RUNS} runs.")
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"A link lasts 1 to {MAX_DAYS} days.")
    refused = share_refusal(creator, runs)
    if refused:
        raise PermissionDenied(refused)
    view = ShareLink.View.RUN if len(runs) == 1 and not list(metrics) else ShareLink.View.COMPARE
    with transaction.atomic():
        link = ShareLink.objects.create(
            created_by=creator, view=view, metrics=list(metrics), label=label, anonymous=anonymous,
            allow_adapter=allow_adapter, expires_at=timezone.now() + dt.timedelta(days=days))
        link.runs.set(runs)
    return link


def share_link_for_token(token: str) -> ShareLink | None:
    """The valid link a token names: None when the signature is wrong, the link unknown, its secret
    different, revoked or expired (the caller answers each with the same 404)."""
    try:
        payload = signer().unsign(token)
    except signing.BadSignature:
        return None
    link_id, _, secret = payload.partition(".")
    if not link_id.isdigit():
        return None
    link = ShareLink.objects.filter(pk=int(link_id)).first()
    if link is None or not secrets.compare_digest(link.secret, secret) or not link.is_valid():
        return None
    if not link.runs.exists():  # every run it opened was deleted
        return None
    return link


def share_link_open(token: str) -> ShareLink:
    """Counts one use of the link a token names; Http404 for any token that opens nothing."""
    link = share_link_for_token(token)
    if link is None:
        raise Http404("No such link.")
    ShareLink.objects.filter(pk=link.pk).update(uses=F("uses") + 1, last_used_at=timezone.now())
    return link


def share_link_revoke(*, user, link_id) -> ShareLink:
    """Revokes one of the user's links (staff: anyone's); Http404 for another user's or an unknown id."""
    links = ShareLink.objects.all() if user.is_staff else ShareLink.objects.filter(created_by=user)
    link = links.filter(pk=link_id).first()
    if link is None:
        raise Http404("No such link.")
    ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    link.refresh_from_db()
    return link


def session_remember(session, link: ShareLink) -> None:
    """The browser holds this link from now on (newest last; the oldest forgotten past the cap)."""
    held = [i for i in session.get(SESSION_KEY, []) if i != link.pk] + [link.pk]
    session[SESSION_KEY] = held[-SESSION_MAX_LINKS:]


def grant_for_session(session) -> LinkGrant | None:
    """What the links this browser opened let it read now (two queries); None when it holds none. A
    link revoked or expired since is forgotten."""
    held = session.get(SESSION_KEY) if session is not None else None
    if not held:
        return None
    now = timezone.now()
    links = {link.pk: link for link in ShareLink.objects.filter(pk__in=held, revoked_at__isnull=True, expires_at__gt=now)}
    if len(links) != len(held):
        session[SESSION_KEY] = [i for i in held if i in links]
    members: dict[int, set[int]] = {}
    for link_id, run_id in ShareLink.runs.through.objects.filter(sharelink_id__in=links).values_list(
            "sharelink_id", "run_id"):
        members.setdefault(link_id, set()).add(run_id)
    runs = set().union(*members.values()) if members else set()
    named = {r for link_id, ids in members.items() if not links[link_id].anonymous for r in ids}
    adapters = {r for link_id, ids in members.items() if links[link_id].allow_adapter for r in ids}
    compares = tuple(frozenset(ids) for link_id, ids in members.items() if links[link_id].view == ShareLink.View.COMPARE)
    return LinkGrant(runs=frozenset(runs), anonymous=frozenset(runs - named), adapters=frozenset(adapters),
                     compares=compares)


def share_links_for_user(user):
    """The user's links, newest first, with their runs."""
    return ShareLink.objects.filter(created_by=user).prefetch_related("runs")
