"""Logins cannot be guessed at speed (django-axes): after a few failures a username, and an address,
is locked for a while, the right password included; another user from elsewhere is not."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-1"


def log_in(client, username, password, address="10.0.0.1"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_the_nth_wrong_password_locks_the_username_even_for_the_right_one(client, owner):
    limit = settings.AXES_FAILURE_LIMIT
    for _ in range(limit - 1):
        assert log_in(client, "owner", "wrong").status_code == 200  # the form again, with its error
    locked = log_in(client, "owner", "wrong")
    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    right = log_in(client, "owner", PASSWORD, address="10.0.0.9")  # from another address too
    assert right.status_code == 429 and not logged_in(client)
    assert f"After {limit} wrong passwords for <strong>owner</strong>" in right.content.decode()


def test_another_user_from_another_address_is_not_locked_by_it(client, owner, stranger):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, "owner", "wrong")
    response = log_in(client, "stranger", PASSWORD, address="10.0.0.2")
    assert response.status_code == 302 and logged_in(client)


def test_one_address_trying_many_usernames_is_locked(client, make_user):
    make_user("target")
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, f"guess{i}", "wrong", address="10.0.0.3")
    assert log_in(client, "target", PASSWORD, address="10.0.0.3").status_code == 429
    assert log_in(client, "target", PASSWORD, address="10.0.0.4").status_code == 302


def test_the_lock_ends_after_the_cool_off(client, owner):
    from axes.models import AccessAttempt

    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, "owner", "wrong")
    assert log_in(client, "owner", PASSWORD).status_code == 429
    # The failures were longer ago than the cool-off (moved back rather than waited for).
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert log_in(client, "owner", PASSWORD).status_code == 302 and logged_in(client)
