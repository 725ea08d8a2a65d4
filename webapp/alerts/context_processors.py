"""The alert badge in the topbar (templates/base.html)."""

from django.utils.functional import SimpleLazyObject

from webapp.alerts.selectors import alert_unseen_open_count


def alert_badge(request) -> dict:
    """`alert_badge`: the user's unseen open alerts; counted (one query) only when a page shows it."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"alert_badge": 0}
    return {"alert_badge": SimpleLazyObject(lambda: alert_unseen_open_count(user))}
