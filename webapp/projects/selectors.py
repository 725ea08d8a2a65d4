"""Read-side queries for projects and roles. Site staff hold the admin role in every project; everyone
else holds the role of their membership, or none (the project is then as absent as a missing one)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Case, CharField, F, OuterRef, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.http import Http404

from webapp.projects.models import ROLE_RANK, Membership, Project, Role


def readable_project_ids(user) -> QuerySet | None:
    """The ids of the projects `user` reads, as a subquery; None for staff (every project)."""
    if user.is_staff:
        return None
    return Membership.objects.filter(user_id=user.pk).values("project_id")


def projects_for_user(user) -> QuerySet[Project]:
    """The projects the user reads, personal first, each with `.role` (staff: admin where not a member).
    A member's role comes from the one membership join that also selects the projects."""
    if not user.is_authenticated:
        return Project.objects.none()
    personal_first = Case(When(personal_of_id=user.pk, then=Value(0)), default=Value(1))
    if not user.is_staff:
        projects = Project.objects.filter(memberships__user_id=user.pk).annotate(role=F("memberships__role"))
        return projects.order_by(personal_first, "name")
    own = Membership.objects.filter(project=OuterRef("pk"), user_id=user.pk).values("role")[:1]
    role = Coalesce(Subquery(own, output_field=CharField()), Value(Role.ADMIN.value))
    # Staff read everyone's personal project: the pages name whose it is (`personal_of`), in this one query.
    return Project.objects.annotate(role=role).select_related("personal_of").order_by(personal_first, "name")


def project_named(name: str) -> Project | None:
    """The project of this name, whatever its case; None when there is none."""
    return Project.objects.filter(name__iexact=name).first() if name else None


def project_get_for_user(user, name: str) -> Project:
    """The project of this name if the user reads it; Http404 otherwise (a stranger's project too)."""
    project = projects_for_user(user).filter(name__iexact=name).first() if name else None
    if project is None:
        raise Http404("No such project.")
    return project


def may_change_owned(user, project_id: int | None, owner_id: int | None, role: str | None = None) -> bool:
    """The rule for changing something a user owns in a project (a run, a sweep): staff or an admin of
    the project, or its owner while at least a member there. `role`: the user's role, if already known."""
    if not user.is_authenticated:
        return False
    role = role if role is not None else role_of(user, project_id)
    if role is None:
        return False
    if ROLE_RANK[role] >= ROLE_RANK[Role.ADMIN]:
        return True
    return owner_id == user.pk and ROLE_RANK[role] >= ROLE_RANK[Role.MEMBER]


def role_of(user, project_id: int | None) -> str | None:
    """The user's role in the project (staff: admin), or None when they hold none."""
    if project_id is None or not user.is_authenticated:
        return None
    if user.is_staff:
        return Role.ADMIN.value
    return Membership.objects.filter(user_id=user.pk, project_id=project_id).values_list("role", flat=True).first()


def roles_of(user) -> dict[int, str] | None:
    """project id -> the user's role, for every project they are in; None for staff (admin everywhere)."""
    if user.is_staff:
        return None
    return dict(Membership.objects.filter(user_id=user.pk).values_list("project_id", "role"))


def role_in(roles: dict[int, str] | None, project_id: int) -> str | None:
    """The role `roles_of` gives for one project."""
    return Role.ADMIN.value if roles is None else roles.get(project_id)


def has_role(user, project_id: int | None, at_least: str) -> bool:
    role = role_of(user, project_id)
    return role is not None and ROLE_RANK[role] >= ROLE_RANK[at_least]


def launchable_projects(user) -> QuerySet[Project]:
    """The projects the user may launch into: where they are a member or an admin (staff: every one)."""
    projects = projects_for_user(user)
    if user.is_staff:
        return projects
    writes = Membership.objects.filter(user_id=user.pk, role__in=[Role.MEMBER, Role.ADMIN]).values("project_id")
    return projects.filter(pk__in=writes)


def personal_project(user) -> Project | None:
    """The user's personal project (made with the account, webapp/projects/services.py `on_user_saved`;
    a writer that needs it for certain calls `personal_project_ensure`)."""
    return Project.objects.filter(personal_of=user).first()


def project_members(project: Project) -> list[Membership]:
    return list(project.memberships.select_related("user").order_by("user__username"))


def site_staff_names() -> list[str]:
    """The user names of the active site staff: who creates accounts (the 403 and members pages say it)."""
    return list(get_user_model().objects.filter(is_staff=True, is_active=True).order_by("username")
                .values_list("username", flat=True))
