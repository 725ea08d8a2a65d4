"""Write-side operations on projects: each user's personal project, lab projects, and their members.

A project keeps at least one admin: the last admin can neither leave nor be demoted (`LastAdmin`), so
no project is ever left without someone who manages it (site staff aside).
"""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction

from webapp.projects.models import NAME_MAX, Membership, Project, Role


class ProjectError(ValueError):
    """A request about a project that cannot be done; the message says why (shown beside the field)."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


class LastAdmin(ProjectError):
    """The change would leave the project without an admin."""


def _personal_name(user) -> str:
    """The user's name as a project name: characters a project name cannot hold become '-'."""
    name = re.sub(r"[^A-Za-z0-9@.+_-]", "-", user.get_username()).lstrip("@.+_-")[: NAME_MAX - 12]
    return name or f"user-{user.pk}"


def personal_project_ensure(user) -> Project:
    """The user's personal project, created with the user as its admin when missing. Named after the
    user, or `<name>-personal` (then a number) when a lab project already has that name."""
    project = Project.objects.filter(personal_of=user).first()
    if project is not None:
        return project
    base = _personal_name(user)
    for attempt in range(100):
        name = base if attempt == 0 else f"{base}-personal" if attempt == 1 else f"{base}-personal-{attempt}"
        if Project.objects.filter(name__iexact=name).exists():
            continue
        try:
            with transaction.atomic():
                project = Project.objects.create(name=name, title=f"{user.get_username()} (personal)",
                                                 personal_of=user, created_by=user)
                Membership.objects.create(project=project, user=user, role=Role.ADMIN)
            return project
        except IntegrityError:  # another process made it (or took the name) meanwhile
            existing = Project.objects.filter(personal_of=user).first()
            if existing is not None:
                return existing
    raise ProjectError(f"No free name for {user.get_username()}'s personal project.")


def on_user_saved(sender, instance, created: bool, raw: bool = False, **kwargs) -> None:
    """post_save of the user model: a new account gets its personal project at once."""
    if created and not raw:
        personal_project_ensure(instance)


def project_create(*, creator, name: str, title: str = "", description: str = "") -> Project:
    """A lab project with `creator` as its first admin."""
    name = name.strip()
    if Project.objects.filter(name__iexact=name).exists():
        raise ProjectError(f"A project named {name!r} exists already: choose another name.", field="name")
    try:
        with transaction.atomic():
            project = Project.objects.create(name=name, title=title, description=description, created_by=creator)
            Membership.objects.create(project=project, user=creator, role=Role.ADMIN)
    except IntegrityError:
        raise ProjectError(f"A project named {name!r} exists already: choose another name.", field="name") from None
    return project


def _refuse_personal(project: Project) -> None:
    if project.is_personal:
        raise ProjectError(f"{project.name} is a personal project: only its owner sees it. Create a project "
                           "to share runs, and move the runs there.")


def member_add(project: Project, *, user, role: str) -> Membership:
    """Adds `user` with `role`; a user already in the project gets the role instead."""
    _refuse_personal(project)
    if role not in Role.values:
        raise ProjectError(f"Choose a role: {', '.join(Role.values)}.", field="role")
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            project=project, user=user, defaults={"role": role})
        if not created and membership.role != role:
            return member_set_role(project, user=user, role=role)
    return membership


def _admins_left(project: Project, without_user_id: int) -> int:
    return Membership.objects.filter(project=project, role=Role.ADMIN).exclude(user_id=without_user_id).count()


def member_set_role(project: Project, *, user, role: str) -> Membership:
    """Changes a member's role; refuses to demote the project's last admin."""
    if role not in Role.values:
        raise ProjectError(f"Choose a role: {', '.join(Role.values)}.", field="role")
    with transaction.atomic():
        # Locking the project's admins serializes two admins demoting each other at once.
        list(Membership.objects.select_for_update().filter(project=project, role=Role.ADMIN))
        membership = Membership.objects.filter(project=project, user=user).first()
        if membership is None:
            raise ProjectError(f"{user.get_username()} is not a member of {project.name}.", field="user")
        if membership.role == Role.ADMIN and role != Role.ADMIN and not _admins_left(project, user.pk):
            raise LastAdmin(f"{user.get_username()} is the last admin of {project.name}: make someone else an "
                            "admin first.", field="role")
        membership.role = role
        membership.save(update_fields=["role"])
    return membership


def member_remove(project: Project, *, user) -> None:
    """Removes a member (also oneself: leaving); refuses to remove the project's last admin. The runs
    they launched stay in the project, readable by its members."""
    if project.personal_of_id == user.pk:
        raise ProjectError("Nobody leaves their personal project.")
    with transaction.atomic():
        list(Membership.objects.select_for_update().filter(project=project, role=Role.ADMIN))
        membership = Membership.objects.filter(project=project, user=user).first()
        if membership is None:
            return
        if membership.role == Role.ADMIN and not _admins_left(project, user.pk):
            raise LastAdmin(f"{user.get_username()} is the last admin of {project.name}: make someone else an "
                            "admin first.")
        membership.delete()
