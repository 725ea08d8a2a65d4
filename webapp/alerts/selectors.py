"""Read-side queries for alerts. A user sees the alerts their own rules fired, on runs they may
still see (`run_list_for_user`), and on a run's page every alert of that run."""

from django.db.models import QuerySet

from webapp.alerts.models import Alert, AlertRule
from webapp.runs.models import Run
from webapp.runs.selectors import run_list_for_user

LIST_LIMIT = 200


def alerts_for_user(user) -> QuerySet[Alert]:
    """The user's alerts, newest first."""
    if not user.is_authenticated:
        return Alert.objects.none()
    visible = run_list_for_user(user).values("pk")
    return Alert.objects.filter(rule__owner=user, run__in=visible).select_related("run", "rule")


def alert_unseen_open_count(user) -> int:
    """How many of the user's alerts are open and not seen yet: the topbar badge (one query)."""
    return alerts_for_user(user).filter(seen=False, resolved_at__isnull=True).count()


def alerts_for_run(run: Run, limit: int = 50) -> list[Alert]:
    """The run's alerts, newest first (the caller fetched the run through run_get_for_user)."""
    return list(Alert.objects.filter(run=run).select_related("rule", "rule__owner")[:limit])


def rules_of_user_for_run(user, run: Run) -> list[AlertRule]:
    """The rules the user set on this run (their defaults apply where they set none)."""
    return list(AlertRule.objects.filter(owner=user, run=run))


def rule_get_for_user(user, rule_id) -> AlertRule | None:
    """The user's own rule with this id, or None (a stranger's rule, a malformed id)."""
    try:
        rule_id = int(rule_id)
    except (TypeError, ValueError):
        return None
    return AlertRule.objects.filter(owner=user, pk=rule_id).select_related("run").first()
