"""Project pages: the user's projects (and a form to start one), and a project's members page, where
its admins (and staff) add people, change roles and remove them; every member may leave."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from webapp.projects.forms import MemberAddForm, MemberRoleForm, ProjectCreateForm
from webapp.projects.models import ROLE_RANK, Role, role_with_article
from webapp.projects.selectors import (
    project_get_for_user,
    project_members,
    projects_for_user,
    site_staff_names,
)
from webapp.projects.services import ProjectError, member_add, member_remove, member_set_role, project_create


@require_http_methods(["GET", "POST"])
def project_list(request):
    """`/projects/`: every project the user reads, with their role; POST starts a project."""
    form = ProjectCreateForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            project = project_create(creator=request.user, **form.cleaned_data)
        except ProjectError as exc:
            form.add_error(exc.field, str(exc))
        else:
            messages.success(request, f"Project {project.name} is yours to share: add its members below.")
            return redirect("projects:members", name=project.name)
    return render(request, "projects/list.html", {"projects": projects_for_user(request.user), "form": form},
                  status=400 if form.is_bound else 200)


def _manageable(request, name: str):
    """The project, and whether the user manages its members (its admins and staff)."""
    project = project_get_for_user(request.user, name)
    return project, ROLE_RANK[project.role] >= ROLE_RANK[Role.ADMIN]


def _admin_only(project, manages: bool) -> None:
    if not manages:
        raise PermissionDenied(f"Only an admin of project {project.name} manages its members.")


@require_http_methods(["GET", "POST"])
def project_members_page(request, name: str):
    """`/projects/<name>/members`: who is in the project with which role; admins add members (POST)."""
    project, manages = _manageable(request, name)
    form = MemberAddForm(request.POST if request.method == "POST" else None)
    status = 200
    if request.method == "POST":
        _admin_only(project, manages)
        if form.is_valid():
            try:
                membership = member_add(project, user=form.cleaned_data["user"], role=form.cleaned_data["role"])
            except ProjectError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, str(exc))
            else:
                messages.success(request, f"{membership.user.get_username()} is {role_with_article(membership.role)} "
                                          f"of {project.name}.")
                return redirect("projects:members", name=project.name)
        status = 400
    members = project_members(project)
    return render(request, "projects/members.html", {
        "project": project, "members": members, "manages": manages, "form": form,
        "roles": Role.choices, "last_admin": _sole_admin(project),
        # Whom to ask: its admins, for who may not add people; site staff, for an account that does not exist.
        "admin_names": [m.user.get_username() for m in members if m.role == Role.ADMIN],
        "staff_names": site_staff_names() if manages and not request.user.is_staff else [],
    }, status=status)


def _sole_admin(project) -> int | None:
    admins = [m.user_id for m in project.memberships.all() if m.role == Role.ADMIN]
    return admins[0] if len(admins) == 1 else None


def _member_user(user_id: int):
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise Http404("No such member.")
    return user


@require_POST
def project_member_role(request, name: str, user_id: int):
    project, manages = _manageable(request, name)
    _admin_only(project, manages)
    form = MemberRoleForm(request.POST)
    user = _member_user(user_id)
    if not form.is_valid():
        messages.error(request, f"Not changed: {' '.join(form.errors['role'])}")
        return redirect("projects:members", name=project.name)
    try:
        member_set_role(project, user=user, role=form.cleaned_data["role"])
    except ProjectError as exc:
        messages.error(request, f"Not changed: {exc}")
    else:
        messages.success(request, f"{user.get_username()} is now {role_with_article(form.cleaned_data['role'])} of "
                                  f"{project.name}.")
    return redirect("projects:members", name=project.name)


@require_POST
def project_member_remove(request, name: str, user_id: int):
    """An admin removes a member; any member removes themselves (leaves). The last admin cannot go."""
    project, manages = _manageable(request, name)
    user = _member_user(user_id)
    leaving = user.pk == request.user.pk
    if not leaving:
        _admin_only(project, manages)
    try:
        member_remove(project, user=user)
    except ProjectError as exc:
        messages.error(request, f"Not removed: {exc}")
        return redirect("projects:members", name=project.name)
    if leaving:
        messages.success(request, f"You left {project.name}.")
        return redirect("projects:list")
    messages.success(request, f"{user.get_username()} is no longer in {project.name}.")
    return redirect("projects:members", name=project.name)
