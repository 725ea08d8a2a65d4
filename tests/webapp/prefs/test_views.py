"""`GET/PUT /prefs/<key>`: each user reads and writes only their own preferences; bad input is a 4xx."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from webapp.prefs.models import UserPreference
from webapp.prefs.services import MAX_VALUE_BYTES

pytestmark = pytest.mark.django_db

LEGEND = {"reward": {"mean": True, "recall": False}, "system/memory": {"gpu_mem_reserved_gb": False}}


def url(key: str) -> str:
    return reverse("prefs:preference", args=[key])


def put(client, key, body, *, content_type="application/json"):
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.put(url(key), data=data, content_type=content_type)


def test_a_stored_value_comes_back_and_is_replaced(client, owner):
    client.force_login(owner)
    assert client.get(url("legend")).json() == {"key": "legend", "value": None}  # never stored
    response = put(client, "legend", LEGEND)
    assert response.status_code == 200 and response.json()["value"] == LEGEND
    assert client.get(url("legend")).json()["value"] == LEGEND
    assert put(client, "legend", {"reward": {"mean": False}}).status_code == 200
    assert client.get(url("legend")).json()["value"] == {"reward": {"mean": False}}
    assert UserPreference.objects.filter(user=owner, key="legend").count() == 1


def test_a_user_only_sees_their_own_preferences(client, owner, stranger, staff):
    client.force_login(owner)
    put(client, "legend", LEGEND)
    for other in (stranger, staff):  # not even staff reads someone else's
        client.force_login(other)
        assert client.get(url("legend")).json()["value"] is None
        assert put(client, "legend", {"reward": {"mean": False}}).status_code == 200
    client.force_login(owner)
    assert client.get(url("legend")).json()["value"] == LEGEND
    assert UserPreference.objects.filter(key="legend").count() == 3


def test_anonymous_requests_are_401(client, owner):
    assert client.get(url("legend")).status_code == 401
    response = put(client, "legend", LEGEND)
    assert response.status_code == 401 and response.json()["error"]
    assert not UserPreference.objects.exists()


def test_put_needs_the_csrf_token(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    client.get(url("legend"))  # no form on the page: take the token from a page that has one
    assert put(client, "legend", LEGEND).status_code == 403
    page = client.get(reverse("runs:list"))
    token = page.cookies["csrftoken"].value
    response = client.put(url("legend"), data=json.dumps(LEGEND), content_type="application/json",
                          headers={"X-CSRFToken": token})
    assert response.status_code == 200


@pytest.mark.parametrize(("body", "content_type", "status"), [
    ("{not json", "application/json", 400),
    ('{"a": NaN}', "application/json", 400),
    ("[1, 2]", "application/json", 400),  # an object only
    ('"text"', "application/json", 400),
    (b"\xff\xfe", "application/json", 400),
    ('{"a": "nul \\u0000 here"}', "application/json", 400),
    ("[" * 5000 + "]" * 5000, "application/json", 400),
    ('{"a": 1}', "text/plain", 415),
    (json.dumps({"a": "x" * MAX_VALUE_BYTES}), "application/json", 413),
])
def test_bad_bodies_are_4xx(client, owner, body, content_type, status):
    client.force_login(owner)
    response = put(client, "legend", body, content_type=content_type)
    assert response.status_code == status and response.json()["error"]
    assert not UserPreference.objects.exists()


@pytest.mark.parametrize("key", ["Legend", "a" * 65, "has space", "-x", "a%00b"])
def test_bad_keys_are_400(client, owner, key):
    client.force_login(owner)
    assert client.get(f"/prefs/{key}").status_code == 400
    assert put(client, key, LEGEND).status_code == 400


def test_other_methods_are_405(client, owner):
    client.force_login(owner)
    assert client.post(url("legend"), data="{}", content_type="application/json").status_code == 405
    assert client.delete(url("legend")).status_code == 405


def test_a_value_just_under_the_limit_is_kept(client, owner):
    client.force_login(owner)
    value = {"a": "x" * (MAX_VALUE_BYTES - 20)}
    assert put(client, "big", value).status_code == 200
    assert client.get(url("big")).json()["value"] == value
