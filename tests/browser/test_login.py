"""Log in and out in a real browser against the real ASGI server."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


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
