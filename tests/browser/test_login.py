"""Log in and out in a real browser against the real ASGI server."""

import pytest

NEUTRAL = ("logging in and out and the lockout page as a person meets them in a real browser; django-axes's "
           "failure counting and lock (select_for_update, Sum) is tested on both backends in "
           "tests/webapp/test_login_lockout.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_login_lands_on_runs_and_logout_returns_to_login(page, screenshot, asgi_server, make_user):
    make_user("alice", password="a-long-test-password")
    page.goto(f"{asgi_server}/")
    assert page.url.startswith(f"{asgi_server}/login/")  # every page requires login
    screenshot("login")

    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong-password")
    page.click("button[type=submit]")
    assert "Please enter a correct username and password" in page.inner_text(".errors")

    page.fill("#id_password", "a-long-test-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/")
    assert page.inner_text("h1") == "Runs"
    assert page.inner_text(".who") == "alice"
    screenshot("runs-empty")

    page.click("text=Log out")
    page.wait_for_url(f"{asgi_server}/login/")


def test_a_guessed_password_locks_the_login_with_a_page_that_says_why(page, screenshot, asgi_server, make_user):
    """django-axes (issue 25, item 2), as a person meets it: the Nth wrong password shows the lockout
    page, and the right password is refused there until the lock ends."""
    from django.conf import settings

    make_user("alice", password="a-long-test-password")
    for attempt in range(settings.AXES_FAILURE_LIMIT):
        page.goto(f"{asgi_server}/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", f"guess-{attempt}")
        page.click("button[type=submit]")
        page.wait_for_load_state()
    assert page.inner_text("h1") == "Too many failed logins"
    assert f"After {settings.AXES_FAILURE_LIMIT} wrong passwords for alice" in page.inner_text("[role=alert]")
    screenshot("login-locked")

    page.click("text=Back to the login page")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "a-long-test-password")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert page.inner_text("h1") == "Too many failed logins" and page.locator(".who").count() == 0
