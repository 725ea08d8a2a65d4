"""Browsers ask every page for /favicon.ico: WhiteNoise serves one (it was a 404 on every page load)."""

import pytest

NEUTRAL = ("WhiteNoise serving /favicon.ico and the login page linking it, to an anonymous client; neither "
           "depends on a stored row (no session, no alert badge count for an anonymous user)")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db]


def test_the_favicon_is_served_at_the_root_without_a_login(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO file


def test_every_page_points_at_it(client):
    assert '<link rel="icon" href="/favicon.ico"' in client.get("/login/").content.decode()
