"""People and roles in a real browser: a viewer's run page and runs table show no button their role
would get a 403 for, while the run's owner sees them all; staff create an account on the Users page and
add it to a project, and the new user logs in with the password shown once and finds the project."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.suites import UI_ONLY
from tests.webapp.runs.seeding import make_run
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

RUN_CHANGES = ("#run-edit", "#share-link", "#cancel-form", "#archive-form", "#delete-link")


def lab(make_user):
    users = {name: make_user(name, password=PASSWORD) for name in ("ada", "alice", "mo", "vi")}
    project = project_create(creator=users["ada"], name="lab-p")
    for name, role in (("alice", Role.MEMBER), ("mo", Role.MEMBER), ("vi", Role.VIEWER)):
        member_add(project, user=users[name], role=role)
    return project, users


def log_out(page) -> None:
    page.click("form.logout button")
    page.wait_for_url("**/login/")


def test_a_viewer_sees_no_button_their_role_cannot_use_and_the_owner_sees_them(page, asgi_server, make_user):
    project, users = lab(make_user)
    run = make_run(users["alice"], project=project, state=Run.State.RUNNING, name="alice run")
    mos = make_run(users["mo"], project=project, name="mo run")
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    log_in(page, asgi_server, "vi")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_selector("#viewer-note")
    for control in RUN_CHANGES:
        assert page.locator(control).count() == 0, control
    page.goto(f"{asgi_server}/?project=lab-p")
    assert page.locator("#runs-table tbody tr").count() == 2
    assert page.locator("a.row-edit-link").count() == 0
    assert page.locator("#compare-runs button[name=action]").count() == 0
    assert page.inner_text("#selection-count") == "Tick runs to compare them."
    log_out(page)

    # mo, a member, changes his own run from the table, not alice's: ticking hers turns the actions off.
    log_in(page, asgi_server, "mo")
    page.goto(f"{asgi_server}/?project=lab-p")
    assert page.locator("a.row-edit-link").count() == 1
    assert page.locator(f'tr[data-run="{mos.pk}"] a.row-edit-link').count() == 1
    archive = page.locator("#compare-runs button[value=archive]")
    page.check(f'tr[data-run="{mos.pk}"] input[name=runs]')
    assert archive.is_enabled()
    page.check(f'tr[data-run="{run.pk}"] input[name=runs]')
    assert archive.is_disabled() and "1 of the selected runs" in archive.get_attribute("title")
    log_out(page)

    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    for control in RUN_CHANGES:
        assert page.locator(control).is_visible(), control
    assert page.locator("#viewer-note").count() == 0
    assert errors == []


def test_staff_create_a_user_who_logs_in_and_finds_the_project(page, screenshot, asgi_server, make_user):
    """docs/screenshots/users-page.png is this test's screenshot (test-artifacts/, copied there by hand)."""
    make_user("root", staff=True, password=PASSWORD)
    lab(make_user)
    log_in(page, asgi_server, "root")
    page.goto(f"{asgi_server}/projects/lab-p/members")
    page.click("#create-user-link")  # from the members page, with the project chosen
    page.wait_for_selector("#user-create")
    assert page.input_value("#id_project") == "lab-p"
    page.fill("#id_username", "ada")  # taken: the error stands beside the field
    page.click("#user-create button[type=submit]")
    assert "already exists" in page.inner_text("#error-username")

    page.fill("#id_username", "newbie")
    page.select_option("#id_role", "viewer")
    page.click("#user-create button[type=submit]")
    page.wait_for_selector("#user-created")
    password = page.input_value("#created-password")
    assert page.inner_text("#created-username") == "newbie" and len(password) == 16
    assert "a viewer of lab-p" in page.inner_text("#user-created")
    assert page.locator('#users-table tr[data-user="newbie"] .person-projects').inner_text() == "lab-p viewer"
    screenshot("users-page")
    page.click("#users-link")  # the top bar's link: the password is not shown again
    assert page.locator("#created-password").count() == 0
    log_out(page)

    log_in(page, asgi_server, "newbie", password)
    page.goto(f"{asgi_server}/projects/")
    assert page.inner_text('tr[data-project="lab-p"] .role') == "viewer"
    assert page.locator("#users-link").count() == 0
    page.goto(f"{asgi_server}/users/")
    assert "Only site staff create accounts" in page.inner_text("#forbidden-reason")
