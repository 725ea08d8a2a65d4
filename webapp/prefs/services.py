"""Writing preferences."""

import re

from webapp.nul_guard import holds_nul
from webapp.prefs.models import UserPreference

KEY_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
MAX_VALUE_BYTES = 32 * 1024


class PreferenceError(ValueError):
    """A key or value that cannot be stored; the message says why."""


def preference_key_check(key: str) -> str:
    if not KEY_PATTERN.fullmatch(key):
        raise PreferenceError("A preference key is 1-64 characters: lower-case letters, digits, '_', '.', '-'.")
    return key


def preference_set(user, key: str, value: dict) -> UserPreference:
    """Stores (or replaces) the user's value for `key`; the value is a JSON object."""
    preference_key_check(key)
    if not isinstance(value, dict):
        raise PreferenceError("A preference value must be a JSON object.")
    if holds_nul(value):  # PostgreSQL's jsonb cannot hold a NUL character
        raise PreferenceError("A preference value cannot contain NUL characters.")
    pref, _ = UserPreference.objects.update_or_create(user=user, key=key, defaults={"value": value})
    return pref
