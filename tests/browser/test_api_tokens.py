"""The API tokens page in a real browser: reach it from the nav, see the form error, create a
token, copy its key (shown once), read the API with it, revoke it."""

import json
import urllib.error
import urllib.request

import pytest

NEUTRAL = ("the API tokens page (form error, key shown once, revoke) and the Swagger docs page in a real "
           "browser; creating, authenticating and revoking tokens and the runs list they read are tested on "
           "both backends in tests/webapp/api/test_tokens.py and tests/webapp/api/test_endpoints.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


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


def test_the_api_docs_page_lists_every_endpoint_and_tries_one(page, screenshot, asgi_server, make_user):
    """Swagger UI from the project's own static files (no CDN: a lab server may be offline), reading
    the schema with the browser's session, and "Try it out" answering from the real API."""
    make_user("alice", password="a-long-test-password")
    outside = []
    page.on("request", lambda request: None if request.url.startswith(asgi_server) else outside.append(request.url))
    page.goto(f"{asgi_server}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "a-long-test-password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{asgi_server}/")
    page.goto(f"{asgi_server}/api/tokens/")
    page.click("text=API docs")
    page.wait_for_url(f"{asgi_server}/api/docs/")
    page.wait_for_selector(".opblock-summary-path")
    paths = {p.get_attribute("data-path") for p in page.query_selector_all(".opblock-summary-path")}
    assert paths == {"/api/runs/", "/api/runs/{run_id}/", "/api/runs/{run_id}/metrics/", "/api/runs/{run_id}/adapter/",
                     "/api/runs/{run_id}/steps/{step}/rollouts/", "/api/runs/{run_id}/steps/{step}/groups/",
                     # the logging API of runs trained elsewhere (the SDK, TRL's callback)
                     "/api/external/runs/", "/api/runs/{run_id}/steps/", "/api/runs/{run_id}/finish/",
                     "/api/sweeps/", "/api/sweeps/{sweep_id}/",  # sweeps (webapp/api/sweep_views.py)
                     "/api/examples/diff/"}  # where two runs part (webapp/api/examples_views.py)
    page.click("#operations-runs-runs_list .opblock-summary")
    page.click("text=Try it out")
    page.click("text=Execute")
    status = page.wait_for_selector(".live-responses-table tbody .response-col_status")
    assert status.inner_text().strip().startswith("200")
    assert '"count": 0' in page.inner_text(".live-responses-table tbody .response-col_description")
    screenshot("api-docs")
    assert not outside, f"the docs page fetched from outside the server: {outside}"
