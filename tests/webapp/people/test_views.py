"""The Users page (webapp/people): staff create accounts and put them in projects; everyone else gets the
403 page saying whom to ask; every bad input is an error beside its field (400), never a 500."""

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from webapp.projects.models import Membership, Project, Role
from webapp.projects.selectors import personal_project
from webapp.projects.services import member_add, project_create

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "correct-horse-battery-41"


@pytest.fixture
def lab(make_user):
    users = {"root": make_user("root", staff=True), "ada": make_user("ada"), "vi": make_user("vi")}
    p = project_create(creator=users["ada"], name="lab-p")
    member_add(p, user=users["vi"], role=Role.VIEWER)
    return {**users, "p": p}


def logs_in(username: str, password: str):
    """The account, if the login form takes this password (a browser of its own); None otherwise."""
    browser = Client()
    response = browser.post(reverse("login"), {"username": username, "password": password})
    return get_user_model().objects.get(username=username) if response.status_code == 302 else None


def text(response) -> str:
    return response.content.decode().replace("&#x27;", "'")


@pytest.mark.parametrize("who", ["ada", "vi"])
def test_anyone_but_staff_gets_the_403_page_saying_whom_to_ask(client, lab, who):
    client.force_login(lab[who])
    for response in (client.get(reverse("people:list")), client.post(reverse("people:list"), {"username": "x"}),
                     client.get(reverse("people:detail", args=[lab["vi"].pk])),
                     client.post(reverse("people:detail", args=[lab["vi"].pk]), {"project": "lab-p", "role": "admin"})):
        assert response.status_code == 403
        assert 'id="forbidden-reason"' in text(response) and "ask root" in text(response)
    assert not get_user_model().objects.filter(username="x").exists()
    assert Membership.objects.get(project=lab["p"], user=lab["vi"]).role == Role.VIEWER
    assert 'id="users-link"' not in text(client.get(reverse("projects:list")))


def test_staff_create_a_user_with_a_generated_password_shown_once_and_in_a_project(client, lab):
    client.force_login(lab["root"])
    page = client.get(reverse("people:list"), {"project": "LAB-P"})
    assert page.status_code == 200 and '<option value="lab-p" selected>' in text(page)
    assert 'id="users-link"' in text(page)  # the top bar's link, for staff

    response = client.post(reverse("people:list"), {"username": "newbie", "email": "", "password1": "",
                                                    "password2": "", "project": "lab-p", "role": "member"})

    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    password = response.context["password"]
    assert len(password) == 16 and f'value="{password}"' in text(response)
    user = logs_in("newbie", password)
    assert user is not None and not user.is_staff
    assert Membership.objects.get(project=lab["p"], user=user).role == Role.MEMBER
    assert personal_project(user).personal_of_id == user.pk
    again = client.get(reverse("people:list"))
    assert password not in text(again) and 'data-user="newbie"' in text(again)


def test_a_typed_password_is_checked_by_the_servers_validators_beside_the_field(client, lab):
    client.force_login(lab["root"])
    url = reverse("people:list")
    cases = [({"password1": "short", "password2": "short"}, "error-password2", "too short"),
             ({"password1": NEW_PASSWORD, "password2": NEW_PASSWORD + "x"}, "error-password2", "didn’t match"),
             ({"password1": NEW_PASSWORD, "password2": ""}, "error-password2", "Type the password again"),
             ({"password1": "", "password2": NEW_PASSWORD}, "error-password1", "Type the password here too")]
    for passwords, field, message in cases:
        response = client.post(url, {"username": "typed", "role": "member", **passwords})
        assert response.status_code == 400, passwords
        assert f'id="{field}"' in text(response) and message in text(response), passwords
    assert not get_user_model().objects.filter(username="typed").exists()

    response = client.post(url, {"username": "typed", "email": "t@lab.example", "password1": NEW_PASSWORD,
                                 "password2": NEW_PASSWORD, "project": "", "role": "member"})
    assert response.status_code == 201 and response.context["password"] is None
    assert NEW_PASSWORD not in text(response)
    user = logs_in("typed", NEW_PASSWORD)
    assert user.email == "t@lab.example" and not Membership.objects.filter(user=user, project=lab["p"]).exists()


def test_a_duplicate_or_bad_user_name_and_a_personal_project_are_errors_beside_their_fields(client, lab):
    client.force_login(lab["root"])
    url = reverse("people:list")
    cases = [({"username": "ADA"}, "error-username", "already exists"),
             ({"username": "has space"}, "error-username", "Enter a valid username"),
             ({"username": ""}, "error-username", "required"),
             ({"username": "fine", "email": "not-an-email"}, "error-email", "valid email"),
             ({"username": "fine", "project": personal_project(lab["ada"]).name}, "error-project", "valid choice"),
             ({"username": "fine", "project": "lab-p", "role": "owner"}, "error-role", "valid choice")]
    count = get_user_model().objects.count()
    for data, field, message in cases:
        response = client.post(url, {"role": "member", **data})
        assert response.status_code == 400, data
        assert f'id="{field}"' in text(response) and message in text(response), data
    assert get_user_model().objects.count() == count


def test_staff_add_a_user_to_a_project_or_change_their_role_there(client, lab):
    client.force_login(lab["root"])
    q = project_create(creator=lab["ada"], name="lab-q")
    url = reverse("people:detail", args=[lab["vi"].pk])
    page = client.get(url)
    assert page.status_code == 200 and 'data-project="lab-p" data-role="viewer"' in text(page)
    assert personal_project(lab["ada"]).name not in text(page).split('id="person-place"')[1]  # not offered

    added = client.post(url, {"project": "lab-q", "role": "admin"}, follow=True)
    assert "vi is an admin of lab-q now." in text(added)
    assert Membership.objects.get(project=q, user=lab["vi"]).role == Role.ADMIN
    changed = client.post(url, {"project": "lab-p", "role": "member"}, follow=True)
    assert "vi was a viewer of lab-p, and is a member now." in text(changed)
    assert Membership.objects.get(project=lab["p"], user=lab["vi"]).role == Role.MEMBER


def test_bad_input_on_a_users_page_is_a_400_beside_the_field_and_no_such_user_a_404(client, lab):
    client.force_login(lab["root"])
    url = reverse("people:detail", args=[lab["ada"].pk])
    for data, field in (({"role": "member"}, "error-project"), ({"project": "no-such", "role": "member"},
                                                                "error-project"),
                        ({"project": "lab-p", "role": "owner"}, "error-role")):
        response = client.post(url, data)
        assert response.status_code == 400 and f'id="{field}"' in text(response), data
    last_admin = client.post(url, {"project": "lab-p", "role": "viewer"})  # ada is lab-p's only admin
    assert last_admin.status_code == 400 and "last admin of lab-p" in text(last_admin)
    assert Membership.objects.get(project=lab["p"], user=lab["ada"]).role == Role.ADMIN
    assert client.get(reverse("people:detail", args=[999_999])).status_code == 404
    Project.objects.exclude(personal_of__isnull=False).delete()
    assert 'id="no-lab-projects"' in text(client.get(url))
