"""Projects and roles: each user's personal project, lab projects, and the membership rules."""

import pytest

from tests.webapp.runs.factories import make_run
from webapp.projects.models import Membership, Project, Role
from webapp.projects.selectors import has_role, personal_project, projects_for_user, role_of
from webapp.projects.services import (
    LastAdmin,
    ProjectError,
    member_add,
    member_remove,
    member_set_role,
    project_create,
)

pytestmark = pytest.mark.django_db


def test_a_new_user_has_a_personal_project_of_their_own_as_its_admin(make_user):
    alice = make_user("alice")
    project = Project.objects.get(personal_of=alice)
    assert project.name == "alice" and project.is_personal
    assert role_of(alice, project.pk) == Role.ADMIN
    assert list(projects_for_user(alice)) == [project]
    assert list(projects_for_user(make_user("bob")).filter(pk=project.pk)) == []


def test_a_personal_project_takes_a_free_name_when_a_lab_project_has_the_users(make_user):
    project_create(creator=make_user("root"), name="Vision")
    vision = make_user("vision")
    assert personal_project(vision).name == "vision-personal"


def test_a_run_without_a_project_lands_in_its_owners_personal_project(make_user):
    alice = make_user("alice")
    assert make_run(alice).project == personal_project(alice)


def test_the_creator_of_a_project_is_its_admin_and_names_are_unique_whatever_their_case(make_user):
    ada = make_user("ada")
    project = project_create(creator=ada, name="lab-p", title="The lab")
    assert Membership.objects.get(project=project, user=ada).role == Role.ADMIN
    with pytest.raises(ProjectError, match="exists already"):
        project_create(creator=ada, name="LAB-P")


def test_roles_are_ordered_and_staff_is_admin_everywhere(make_user):
    ada, vi, root = make_user("ada"), make_user("vi"), make_user("root", staff=True)
    project = project_create(creator=ada, name="lab-p")
    member_add(project, user=vi, role=Role.VIEWER)
    assert has_role(vi, project.pk, Role.VIEWER) and not has_role(vi, project.pk, Role.MEMBER)
    assert has_role(root, project.pk, Role.ADMIN) and role_of(root, project.pk) == Role.ADMIN
    assert [p.role for p in projects_for_user(root) if p.pk == project.pk] == [Role.ADMIN]


def test_adding_someone_twice_changes_their_role_and_a_bad_role_is_refused(make_user):
    ada, mo = make_user("ada"), make_user("mo")
    project = project_create(creator=ada, name="lab-p")
    member_add(project, user=mo, role=Role.VIEWER)
    member_add(project, user=mo, role=Role.MEMBER)
    assert Membership.objects.get(project=project, user=mo).role == Role.MEMBER
    with pytest.raises(ProjectError, match="Choose a role") as refused:
        member_add(project, user=mo, role="owner")
    assert refused.value.field == "role"


def test_the_last_admin_can_neither_leave_nor_be_demoted(make_user):
    ada, mo = make_user("ada"), make_user("mo")
    project = project_create(creator=ada, name="lab-p")
    member_add(project, user=mo, role=Role.MEMBER)
    with pytest.raises(LastAdmin):
        member_set_role(project, user=ada, role=Role.MEMBER)
    with pytest.raises(LastAdmin):
        member_remove(project, user=ada)
    member_set_role(project, user=mo, role=Role.ADMIN)  # with a second admin, the first may go
    member_remove(project, user=ada)
    assert list(project.memberships.values_list("user__username", "role")) == [("mo", "admin")]


def test_a_personal_project_takes_no_members_and_nobody_leaves_it(make_user):
    alice, bob = make_user("alice"), make_user("bob")
    with pytest.raises(ProjectError, match="personal project"):
        member_add(personal_project(alice), user=bob, role=Role.VIEWER)
    with pytest.raises(ProjectError):
        member_remove(personal_project(alice), user=alice)
