"""Personal API tokens: the model and services, the /api/tokens/ page, the Bearer authentication."""

import logging
import re
from datetime import timedelta

import pytest
from django.contrib.admin.sites import site
from django.db import connection
from django.http import Http404
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from webapp.api.models import ApiToken, hash_key
from webapp.api.services import token_create, token_revoke, token_touch

pytestmark = pytest.mark.django_db

RUNS = "/api/runs/"


# --- model and services ---------------------------------------------------------------------------


def test_create_stores_the_hash_and_prefix_not_the_key(owner):
    token, key = token_create(user=owner, name="notebook")
    stored = ApiToken.objects.get(pk=token.pk)
    assert len(key) >= 40
    assert stored.key_hash == hash_key(key) and len(stored.key_hash) == 64 and stored.key_hash != key
    assert stored.prefix == key[:8]
    assert key not in {str(v) for v in ApiToken.objects.filter(pk=token.pk).values().first().values()}
    assert stored.revoked_at is None and stored.last_used_at is None and stored.is_active


def test_a_user_has_several_tokens_and_revokes_each(owner, stranger):
    first, _ = token_create(user=owner, name="laptop")
    second, _ = token_create(user=owner, name="cluster")
    token_revoke(user=owner, token_id=first.pk)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.revoked_at is not None and second.revoked_at is None
    when = first.revoked_at
    assert token_revoke(user=owner, token_id=first.pk).revoked_at == when  # revoking twice keeps the first time
    with pytest.raises(Http404):
        token_revoke(user=stranger, token_id=second.pk)  # not theirs
    second.refresh_from_db()
    assert second.revoked_at is None


def test_last_used_is_written_at_most_once_a_minute(owner):
    token, _ = token_create(user=owner, name="poller")
    token_touch(token)
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    token_touch(ApiToken.objects.get(pk=token.pk))
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    token_touch(ApiToken.objects.get(pk=token.pk))
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first - timedelta(seconds=1)


# --- authentication -------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "Token", "bearer"])
def test_valid_key_authenticates_and_stamps_last_used(owner, scheme):
    token, key = token_create(user=owner, name="t")
    response = Client(headers={"Authorization": f"{scheme} {key}"}).get(RUNS)
    assert response.status_code == 200, response.content
    token.refresh_from_db()
    assert token.last_used_at is not None and timezone.now() - token.last_used_at < timedelta(minutes=1)


def test_last_used_is_not_rewritten_on_every_request(owner):
    _, key = token_create(user=owner, name="t")
    client = Client(headers={"Authorization": f"Bearer {key}"})
    client.get(RUNS)  # the first use writes last_used_at
    with CaptureQueriesContext(connection) as queries:
        assert client.get(RUNS).status_code == 200
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]


@pytest.mark.parametrize("header", [
    "Bearer not-a-real-key", "Bearer ", "Bearer a b", "Token " + "x" * 500, "Bearer caf\u00e9",
])
def test_unknown_or_malformed_key_is_401(owner, header):
    token_create(user=owner, name="t")
    response = Client(headers={"Authorization": header}).get(RUNS)
    assert response.status_code == 401
    assert response.json()["detail"]
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_revoked_key_is_401(owner):
    token, key = token_create(user=owner, name="t")
    client = Client(headers={"Authorization": f"Bearer {key}"})
    assert client.get(RUNS).status_code == 200
    token_revoke(user=owner, token_id=token.pk)
    response = client.get(RUNS)
    assert response.status_code == 401 and response.json()["detail"] == "Token revoked."


def test_inactive_user_key_is_401(owner):
    _, key = token_create(user=owner, name="t")
    owner.is_active = False
    owner.save()
    assert Client(headers={"Authorization": f"Bearer {key}"}).get(RUNS).status_code == 401


def test_no_credentials_is_401_not_a_login_redirect():
    response = Client().get(RUNS)
    assert response.status_code == 401 and response["Content-Type"].startswith("application/json")


def test_the_api_writes_nothing_but_run_creation(owner):
    _, key = token_create(user=owner, name="t")
    client = Client(headers={"Authorization": f"Bearer {key}"})
    assert client.delete(RUNS).status_code == 405 and client.put(RUNS, {}).status_code == 405
    assert client.post(f"{RUNS}1/", {}, content_type="application/json").status_code == 405
    assert client.post(RUNS, {}, content_type="application/json").status_code == 400  # tests/webapp/api/test_launch.py


# --- the tokens page ------------------------------------------------------------------------------


def test_page_requires_login(client):
    response = client.get(reverse("api:tokens"))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_page_creates_a_token_and_shows_the_key_once(csrf_client, owner):
    csrf_client.force_login(owner)
    page = csrf_client.get(reverse("api:tokens"))
    assert page.status_code == 200 and b"No tokens yet." in page.content
    csrf = page.cookies["csrftoken"].value
    response = csrf_client.post(reverse("api:tokens"), {"name": "  my notebook  ", "csrfmiddlewaretoken": csrf})
    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(user=owner)
    assert token.name == "my notebook"
    key = response.context["new_key"]
    assert hash_key(key) == token.key_hash and key.encode() in response.content
    # The key works, and the next view of the page no longer holds it.
    assert Client(headers={"Authorization": f"Bearer {key}"}).get(RUNS).status_code == 200
    again = csrf_client.get(reverse("api:tokens"))
    assert key.encode() not in again.content and token.prefix.encode() in again.content
    assert b"my notebook" in again.content


@pytest.mark.parametrize("name, message", [
    ("", "This field is required."),
    ("   ", "This field is required."),
    ("x" * 101, "Ensure this value has at most 100 characters"),
])
def test_page_shows_a_form_error_next_to_the_name(client, owner, name, message):
    client.force_login(owner)
    response = client.post(reverse("api:tokens"), {"name": name})
    assert response.status_code == 400
    assert message in response.context["form"].errors["name"][0]
    assert b'id="name-errors"' in response.content and message.encode() in response.content
    assert not ApiToken.objects.exists()


def test_page_refuses_a_duplicate_active_name_but_allows_it_after_revoking(client, owner):
    client.force_login(owner)
    assert client.post(reverse("api:tokens"), {"name": "ci"}).status_code == 201
    response = client.post(reverse("api:tokens"), {"name": "ci"})
    assert response.status_code == 400 and "already have an active token" in response.context["form"].errors["name"][0]
    token_revoke(user=owner, token_id=ApiToken.objects.get().pk)
    assert client.post(reverse("api:tokens"), {"name": "ci"}).status_code == 201


def test_page_revokes_own_tokens_only(client, owner, stranger):
    mine, key = token_create(user=owner, name="mine")
    theirs, _ = token_create(user=stranger, name="theirs")
    client.force_login(owner)
    response = client.post(reverse("api:token_revoke", args=[mine.pk]), follow=True)
    assert response.status_code == 200 and b"is revoked" in response.content and b"revoked " in response.content
    mine.refresh_from_db()
    assert mine.revoked_at is not None
    assert Client(headers={"Authorization": f"Bearer {key}"}).get(RUNS).status_code == 401
    assert client.post(reverse("api:token_revoke", args=[theirs.pk])).status_code == 404
    assert client.get(reverse("api:token_revoke", args=[mine.pk])).status_code == 405
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_page_lists_only_own_tokens(client, owner, stranger):
    token_create(user=owner, name="own-token")
    token_create(user=stranger, name="someone-elses")
    client.force_login(owner)
    content = client.get(reverse("api:tokens")).content
    assert b"own-token" in content and b"someone-elses" not in content


def test_nav_links_the_page(client, owner):
    client.force_login(owner)
    assert reverse("api:tokens").encode() in client.get(reverse("runs:list")).content


def test_revoke_form_needs_csrf(csrf_client, owner):
    token, _ = token_create(user=owner, name="t")
    csrf_client.force_login(owner)
    assert csrf_client.post(reverse("api:token_revoke", args=[token.pk])).status_code == 403


# --- admin ----------------------------------------------------------------------------------------


def test_admin_lists_tokens_with_the_hash_read_only(client, staff, owner):
    staff.is_superuser = True
    staff.save()
    token, _ = token_create(user=owner, name="listed")
    client.force_login(staff)
    listing = client.get(reverse("admin:api_apitoken_changelist"))
    assert listing.status_code == 200 and b"listed" in listing.content
    change = client.get(reverse("admin:api_apitoken_change", args=[token.pk]))
    assert change.status_code == 200
    assert token.key_hash.encode() in change.content and b'name="key_hash"' not in change.content
    assert client.get(reverse("admin:api_apitoken_add")).status_code == 403
    admin = site._registry[ApiToken]
    assert "key_hash" in admin.readonly_fields


def test_a_wrong_token_is_looked_up_like_a_right_one_and_logged(owner, token_for, caplog):
    """No timing oracle: whatever the key, authentication runs the same one indexed SELECT on its
    SHA-256 (never a key-by-key comparison); a wrong key is logged with its address."""
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext
    from rest_framework.exceptions import AuthenticationFailed

    from webapp.api.authentication import BearerTokenAuthentication

    def selects(key: str) -> list[str]:
        request = RequestFactory().get("/api/runs/", HTTP_AUTHORIZATION=f"Bearer {key}")
        with CaptureQueriesContext(connection) as queries:
            try:
                BearerTokenAuthentication().authenticate(request)
            except AuthenticationFailed:
                pass
        return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]

    right_key = token_for(owner)
    right, wrong = selects(right_key), selects("x" * len(right_key))
    assert len(right) == len(wrong) == 1
    strip = lambda sql: re.sub(r"'[0-9a-f]{64}'", "'<hash>'", sql)  # noqa: E731
    assert strip(right[0]) == strip(wrong[0]) and "key_hash" in right[0]
    with caplog.at_level(logging.WARNING, logger="webapp.api.authentication"):
        Client(headers={"Authorization": "Bearer " + "x" * 43}).get("/api/runs/")
    assert "unknown token from 127.0.0.1" in caplog.text
