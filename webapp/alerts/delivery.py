"""Telling the rule's owner: the open run page (websocket), email and webhook, the last two each
through a Celery task.

`alert_deliver` runs after the alert's transaction commits and only queues: the email as
`workers.tasks.alert_email_task` (`alert_email_send`, bounded by EMAIL_TIMEOUT in the worker), the
webhook as `workers.tasks.alert_webhook_task`, which calls `alert_webhook_attempt` once per try and
retries temporary failures with backoff. So a hanging mail server never holds up the ingest that
fired the alert. Every outcome is recorded on the Alert, where the alerts list shows it.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from webapp.alerts.models import Alert
from webapp.alerts.webhook import WebhookRejected, WebhookTemporaryError, post_json
from webapp.celery import app as celery_app
from webapp.runs.live.notices import AlertNotice, notice_send

log = logging.getLogger(__name__)

WEBHOOK_TASK = "workers.tasks.alert_webhook_task"
EMAIL_TASK = "workers.tasks.alert_email_task"


def run_url(run_id: int) -> str:
    """The run page's absolute address (COHORT_BASE_URL + path), for emails and webhooks."""
    return settings.COHORT_BASE_URL.rstrip("/") + reverse("runs:detail", args=[run_id])


def alert_payload(alert: Alert) -> dict[str, Any]:
    """The JSON a webhook receives."""
    return {
        "alert": alert.pk, "kind": alert.kind,
        "run": {"id": alert.run_id, "name": str(alert.run), "url": run_url(alert.run_id)},
        "message": alert.message, "step": alert.step, "fired_at": alert.fired_at.isoformat(),
    }


def alert_notice(alert: Alert) -> AlertNotice:
    """The websocket notice of a fired alert (the run page adds its row and updates the badge)."""
    return {"type": "alert", "run": alert.run_id, "alert": alert.pk, "kind": alert.kind,
            "kind_label": alert.get_kind_display(), "message": alert.message, "step": alert.step,
            "fired_at": alert.fired_at.isoformat(),
            # as the panel's server-rendered rows show it (TIME_ZONE), so a live row reads like the rest
            "fired_at_text": timezone.localtime(alert.fired_at).strftime("%Y-%m-%d %H:%M:%S")}


def alert_deliver(alert_id: int) -> None:
    """Tells the run's open pages, and queues the email and the webhook as the alert's rule asks;
    never raises."""
    alert = Alert.objects.select_related("rule", "rule__owner", "run").filter(pk=alert_id).first()
    if alert is None:
        return
    notice_send(alert.run_id, alert_notice(alert))
    if alert.rule.email:
        try:
            celery_app.send_task(EMAIL_TASK, args=[alert.pk])
        except Exception as exc:  # the broker is down: say so on the alert rather than lose it silently
            log.warning("could not queue the email of alert %s", alert.pk, exc_info=True)
            Alert.objects.filter(pk=alert.pk).update(email_error=f"could not queue the email: {exc}"[:2000])
    if alert.rule.webhook_url:
        try:
            celery_app.send_task(WEBHOOK_TASK, args=[alert.pk])
        except Exception as exc:  # the broker is down: say so on the alert rather than lose it silently
            log.warning("could not queue the webhook of alert %s", alert.pk, exc_info=True)
            Alert.objects.filter(pk=alert.pk).update(
                webhook_status=Alert.Webhook.FAILED, webhook_last_error=f"could not queue the delivery: {exc}"[:2000])


def alert_email_send(alert_id: int) -> str:
    """Emails an alert to its rule's owner (the email task's body); records the outcome, never raises."""
    alert = Alert.objects.select_related("rule", "rule__owner", "run").filter(pk=alert_id).first()
    if alert is None or not alert.rule.email:
        return "gone"
    return _send_email(alert)


def _send_email(alert: Alert) -> str:
    address = alert.rule.owner.email
    if not address:
        Alert.objects.filter(pk=alert.pk).update(email_error="no email address on the account")
        return "no address"
    subject = f"[Cohort] {alert.get_kind_display()}: {alert.run}"
    body = f"{alert.message}\n\nRun: {run_url(alert.run_id)}\nFired at: {alert.fired_at.isoformat()}\n"
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [address], fail_silently=False)
    except Exception as exc:  # SMTP down, refused, timed out: recorded on the alert
        log.warning("could not email alert %s", alert.pk, exc_info=True)
        Alert.objects.filter(pk=alert.pk).update(email_error=f"{exc.__class__.__name__}: {exc}"[:2000])
        return "failed"
    Alert.objects.filter(pk=alert.pk).update(email_sent_at=timezone.now(), email_error="")
    return "sent"


def alert_webhook_attempt(alert_id: int, *, last_try: bool) -> str:
    """One POST of the alert to its rule's webhook; records the outcome and returns the status.
    Raises WebhookTemporaryError (for the task to retry) unless this was the last try."""
    alert = Alert.objects.select_related("rule", "run").filter(pk=alert_id).first()
    if alert is None or not alert.rule.webhook_url:
        return "gone"
    Alert.objects.filter(pk=alert.pk).update(webhook_attempts=F("webhook_attempts") + 1)
    try:
        post_json(alert.rule.webhook_url, alert_payload(alert), timeout_s=settings.ALERTS_WEBHOOK_TIMEOUT_S,
                  allowed_networks=settings.COHORT_WEBHOOK_ALLOWED_NETWORKS)
    except WebhookRejected as exc:
        _record(alert, Alert.Webhook.FAILED, str(exc))
        return Alert.Webhook.FAILED
    except WebhookTemporaryError as exc:
        _record(alert, Alert.Webhook.FAILED if last_try else Alert.Webhook.PENDING, str(exc))
        if last_try:
            return Alert.Webhook.FAILED
        raise
    Alert.objects.filter(pk=alert.pk).update(webhook_status=Alert.Webhook.DELIVERED, webhook_last_error="",
                                             webhook_delivered_at=timezone.now())
    return Alert.Webhook.DELIVERED


def _record(alert: Alert, status: str, error: str) -> None:
    Alert.objects.filter(pk=alert.pk).update(webhook_status=status, webhook_last_error=error[:2000])
