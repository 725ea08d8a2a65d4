"""Read-side queries of the Users page."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Prefetch, QuerySet
from django.http import Http404

from webapp.projects.models import Membership, Project


def lab_projects() -> QuerySet[Project]:
    """The projects people can be added to: every project but the personal ones (which take nobody)."""
    return Project.objects.filter(personal_of__isnull=True).order_by("name")


def _with_lab_memberships(users: QuerySet) -> QuerySet:
    """Each user's places in lab projects, as `.lab_memberships` (one query for the whole list)."""
    places = Membership.objects.filter(project__personal_of__isnull=True).select_related("project")
    return users.prefetch_related(Prefetch("memberships", queryset=places.order_by("project__name"),
                                           to_attr="lab_memberships"))


def people() -> QuerySet:
    """Every account, by user name, with its lab projects and roles."""
    return _with_lab_memberships(get_user_model().objects.order_by("username"))


def person_get(user_id: int):
    """The account with this id (with its lab projects); Http404 when there is none."""
    user = _with_lab_memberships(get_user_model().objects.filter(pk=user_id)).first()
    if user is None:
        raise Http404("No such user.")
    return user
