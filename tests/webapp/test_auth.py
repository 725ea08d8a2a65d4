import re

import pytest
from django.urls import reverse

NEUTRAL = ("session login and logout, their CSRF checks and the admin's redirect of a non-staff user; "
           "django-axes's failure counting that a login passes through (select_for_update, Sum) is tested on "
           "both backends in tests/webapp/test_login_lockout.py")
pytestmark = pytest.mark.django_db


def _csrf_token(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


@pytest.mark.backend_neutral(reason=NEUTRAL)
def test_login_page_is_public_and_logs_in_with_csrf(csrf_client, owner):
    page = csrf_client.get(reverse("login"))
    assert page.status_code == 200
    response = csrf_client.post(
        reverse("login"),
        {"username": "owner", "password": "pw-for-tests-1", "csrfmiddlewaretoken": _csrf_token(page.content.decode())},
    )
    assert response.status_code == 302 and response.url == reverse("runs:list")
    assert csrf_client.get(reverse("runs:list")).status_code == 200


@pytest.mark.backend_neutral(reason=NEUTRAL)
def test_login_without_csrf_token_is_refused(csrf_client, owner):
    response = csrf_client.post(reverse("login"), {"username": "owner", "password": "pw-for-tests-1"})
    assert response.status_code == 403


@pytest.mark.backend_neutral(reason=NEUTRAL)
def test_wrong_password_shows_an_error_on_the_form(csrf_client, owner):
    page = csrf_client.get(reverse("login"))
    response = csrf_client.post(
        reverse("login"),
        {"username": "owner", "password": "nope", "csrfmiddlewaretoken": _csrf_token(page.content.decode())},
    )
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()


@pytest.mark.backend_neutral(reason=NEUTRAL)
def test_logout_needs_post_with_csrf(csrf_client, owner):
    csrf_client.force_login(owner)
    page = csrf_client.get(reverse("runs:list"))
    assert csrf_client.post(reverse("logout")).status_code == 403  # no token
    response = csrf_client.post(reverse("logout"), {"csrfmiddlewaretoken": _csrf_token(page.content.decode())})
    assert response.status_code == 302
    assert csrf_client.get(reverse("runs:list")).status_code == 302  # logged out


@pytest.mark.backend_neutral(reason=NEUTRAL)
def test_admin_refuses_non_staff(client, owner):
    client.force_login(owner)
    response = client.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response.url


def test_admin_lists_every_model_for_staff(client, staff):
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    for path in ["runs/program", "runs/task", "runs/run", "runs/stepmetric", "runs/rollout", "runs/modulecall",
                 "runs/group", "runs/groupmember", "datasets/dataset", "datasets/datasetrow"]:
        assert client.get(f"/admin/{path}/").status_code == 200, path
