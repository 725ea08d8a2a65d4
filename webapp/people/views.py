"""The Users page (`/users/`: every account, and the form to create one) and a user's page
(`/users/<id>/`: their projects, and the form to add them to one). Staff only."""

from __future__ import annotations

import functools

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.people.forms import PersonCreateForm, PersonPlaceForm
from webapp.people.selectors import lab_projects, people, person_get
from webapp.people.services import PersonError, person_create, person_place
from webapp.projects.models import role_with_article
from webapp.projects.selectors import site_staff_names
from webapp.projects.services import ProjectError


def staff_only(view):
    """A 403 that says whom to ask for anyone but site staff (checked before any object is looked up)."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_staff:
            names = ", ".join(site_staff_names())
            raise PermissionDenied("Only site staff create accounts and add people to projects from this page"
                                   + (f": ask {names}." if names else ".")
                                   + " An admin of a project adds people who have an account on its members page.")
        return view(request, *args, **kwargs)

    return wrapped


@require_http_methods(["GET", "POST"])
@staff_only
def people_page(request):
    """Every account with its projects; POST creates one (the password, if generated, shown this once)."""
    created = password = None
    status = 200
    wanted = lab_projects().filter(name__iexact=request.GET.get("project", "")).first()
    form = PersonCreateForm(request.POST if request.method == "POST" else None, initial={"project": wanted})
    if request.method == "POST":
        status = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                created = person_create(username=data["username"], email=data["email"], password=data["password1"],
                                        project=data["project"], role=data["role"])
            except PersonError as exc:
                form.add_error(exc.field, str(exc))
            else:
                password, status = form.generated_password, 201
                created.joined = data["project"]
                created.role_text = role_with_article(data["role"])
                form = PersonCreateForm(initial={"project": data["project"]})
    response = render(request, "people/list.html", {
        "form": form, "people": people(), "created": created, "password": password,
    }, status=status)
    if password:
        response["Cache-Control"] = "no-store"  # the only page that ever shows the generated password
    return response


@require_http_methods(["GET", "POST"])
@staff_only
def person_page(request, user_id: int):
    """One account's projects and roles; POST adds them to a project (or changes their role there)."""
    person = person_get(user_id)
    form = PersonPlaceForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if form.is_valid():
            project, role = form.cleaned_data["project"], form.cleaned_data["role"]
            try:
                _, before = person_place(person, project=project, role=role)
            except ProjectError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, str(exc))
            else:
                messages.success(request, _placed_text(person.get_username(), project.name, before, role))
                return redirect("people:detail", user_id=person.pk)
    return render(request, "people/detail.html", {"person": person, "form": form,
                                                  "projects_exist": lab_projects().exists()},
                  status=400 if form.is_bound else 200)


def _placed_text(name: str, project: str, before: str | None, role: str) -> str:
    if before is None:
        return f"{name} is {role_with_article(role)} of {project} now."
    if before != role:
        return f"{name} was {role_with_article(before)} of {project}, and is {role_with_article(role)} now."
    return f"{name} is {role_with_article(role)} of {project} already."
