"""Alert rules and the alerts they fire (issue 12).

A rule watches runs for one kind of event. A rule without a run is one of its owner's defaults and
applies to every run the owner starts; a rule with a run applies to that run only, and for the run's
owner it replaces the default of the same kind (another user, staff, may watch a run they can see).

An alert is one episode: it is open (`resolved_at` null) from the step or moment its condition held
until the condition clears. While it is open the rule does not fire again for that run; the partial
unique constraint makes this hold under concurrent evaluations (two ingests, the beat task).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from webapp.runs.models import Run


class Kind(models.TextChoices):
    NONFINITE = "nonfinite", "Loss or grad norm not finite"
    REWARD_COLLAPSE = "reward_collapse", "Reward variance collapsed"
    STALLED = "stalled", "Heartbeat stalled"
    FINISHED = "finished", "Run finished"
    FAILED = "failed", "Run failed"
    CANCELLED = "cancelled", "Run cancelled"


class AlertRule(models.Model):
    """What to watch and how to tell the owner. `params` holds the kind's settings (see PARAMS)."""

    # The settings each kind reads from `params`, with their defaults.
    PARAMS: dict[str, dict[str, float]] = {
        Kind.REWARD_COLLAPSE: {"threshold": 0.9, "steps": 5},
        Kind.STALLED: {"seconds": 0},  # 0: half the reaper's COHORT_HEARTBEAT_TIMEOUT_S
    }

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_rules")
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, null=True, blank=True, related_name="alert_rules",
        help_text="Empty: one of the owner's defaults, applied to all of their runs.")
    project = models.ForeignKey(
        "projects.Project", on_delete=models.CASCADE, related_name="alert_rules",
        help_text="A run's rule: the run's project. A default rule: its owner's personal project (defaults are "
                  "the owner's own settings, for the runs they launch in any project).")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    params = models.JSONField(default=dict, blank=True)
    email = models.BooleanField(default=False, help_text="Also email the owner (besides the in-app alert).")
    webhook_url = models.URLField(max_length=500, blank=True, help_text="Also POST the alert as JSON here.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["owner", "run", "kind"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "kind"], condition=Q(run__isnull=True),
                                    name="alertrule_one_default_per_kind"),
            models.UniqueConstraint(fields=["owner", "run", "kind"], condition=Q(run__isnull=False),
                                    name="alertrule_one_per_run_and_kind"),
        ]

    def __str__(self):
        where = f"run {self.run_id}" if self.run_id else "all runs"
        return f"{self.get_kind_display()} ({where}, {self.owner})"

    def param(self, name: str) -> float:
        """The rule's setting `name`, or the kind's default when unset."""
        value = (self.params or {}).get(name)
        return self.PARAMS.get(self.kind, {}).get(name, 0) if value is None else value


class Alert(models.Model):
    """One firing of a rule on a run, with what became of its email and webhook."""

    class Webhook(models.TextChoices):
        NONE = "", "no webhook"
        PENDING = "pending", "pending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    message = models.TextField()
    step = models.PositiveIntegerField(null=True, blank=True, help_text="The step it fired at, for step-based kinds.")
    fired_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True, help_text="When the condition cleared; empty while open.")
    seen = models.BooleanField(default=False)
    email_sent_at = models.DateTimeField(null=True, blank=True)
    email_error = models.TextField(blank=True)
    webhook_status = models.CharField(max_length=10, choices=Webhook.choices, default=Webhook.NONE, blank=True)
    webhook_attempts = models.PositiveIntegerField(default=0)
    webhook_last_error = models.TextField(blank=True)
    webhook_delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-fired_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["rule", "run"], condition=Q(resolved_at__isnull=True),
                                    name="alert_one_open_per_rule_and_run"),
        ]
        indexes = [models.Index(fields=["run", "-fired_at"], name="alert_run_fired")]

    def __str__(self):
        return f"{self.get_kind_display()} on run {self.run_id}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None
