"""The API tokens page in a real browser: reach it from the nav, see the form error, create a
token, copy its key (shown once), read the API with it, revoke it."""

import json
import urllib.error
import urllib.request

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def api_status(url: str, key: str) -> int:
    request = urllib.request.Request(f"{url}/api/runs/", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            json.loads(response.read())
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_create_use_and_revoke_a_token(page, screenshot, asgi_server, make_user):
    make_user("alice", password="a-long-test-password")
    page.goto(f"{asgi_server}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "a-long-test-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/")
    page.click("nav >> text=API tokens")
    page.wait_for_url(f"{asgi_server}/api/tokens/")
    assert page.inner_text("h1") == "API tokens" and page.is_visible("text=No tokens yet.")

    page.click("text=Create token")  # empty name: the error sits under the field
    assert "This field is required." in page.inner_text("#name-errors")
    screenshot("api-tokens-error")

    page.fill("#id_name", "laptop notebook")
    page.click("text=Create token")
    page.wait_for_selector("#new-token-key")
    key = page.input_value("#new-token-key")
    assert len(key) >= 40 and key[:8] in page.inner_text("table.api-tokens")
    assert "shown only this once" in page.inner_text(".api-new-key")
    screenshot("api-tokens-created")
    assert api_status(asgi_server, key) == 200

    page.goto(f"{asgi_server}/api/tokens/")  # a later visit no longer shows the key
    assert not page.is_visible("#new-token-key") and key not in page.content()
    page.click("button[aria-label='revoke laptop notebook']")
    page.wait_for_selector("text=is revoked")
    assert "revoked" in page.inner_text("table.api-tokens tbody tr")
    screenshot("api-tokens-revoked")
    assert api_status(asgi_server, key) == 401
