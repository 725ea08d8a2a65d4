"""Reading preferences: a user only ever reads their own."""

from webapp.prefs.models import UserPreference


def preference_get(user, key: str):
    """The user's stored value for `key`, or None when they never stored one."""
    if not user.is_authenticated:
        return None
    return UserPreference.objects.filter(user=user, key=key).values_list("value", flat=True).first()
