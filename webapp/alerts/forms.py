"""Forms for alert rules: one kind per form, the kind's settings, and how to deliver it."""

from django import forms
from django.conf import settings
from django.core.validators import URLValidator

from webapp.alerts.models import AlertRule, Kind
from webapp.alerts.webhook import WebhookError, check_destination

MAX_STEPS = 1000
MIN_STALLED_S, MAX_STALLED_S = 5, 7 * 24 * 3600


class RuleForm(forms.Form):
    """A rule's fields. `params` in cleaned_data holds only the settings the chosen kind reads."""

    field_order = ["kind", "enabled", "threshold", "steps", "seconds", "email", "webhook_url"]

    kind = forms.ChoiceField(choices=Kind.choices)
    threshold = forms.FloatField(
        required=False, min_value=0.0, max_value=1.0, label="Zero-variance share",
        help_text="reward collapse: fire when at least this share of groups has zero reward variance (default 0.9)")
    steps = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_STEPS, label="Steps in a row",
        help_text="reward collapse: for this many consecutive steps (default 5)")
    seconds = forms.IntegerField(
        required=False, min_value=MIN_STALLED_S, max_value=MAX_STALLED_S, label="Silent for (s)",
        help_text="stalled: heartbeat older than this (default: half the reaper's timeout)")
    email = forms.BooleanField(required=False, label="Email me")
    webhook_url = forms.CharField(
        required=False, max_length=500, label="Webhook URL",
        validators=[URLValidator(schemes=["http", "https"], message="Enter an http:// or https:// URL.")],
        widget=forms.URLInput(attrs={"placeholder": "https://hooks.example.org/cohort"}))
    enabled = forms.BooleanField(required=False, initial=True, label="On")

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_webhook_url(self) -> str:
        url = self.cleaned_data["webhook_url"].strip()
        if url:
            # Checked here, beside the field, and again before every delivery.
            try:
                check_destination(url, allowed_networks=settings.COHORT_WEBHOOK_ALLOWED_NETWORKS)
            except WebhookError as exc:
                raise forms.ValidationError(f"Cohort will not send alerts there: {exc}.") from None
        return url

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if data.get("email") and self.user is not None and not self.user.email:
            self.add_error("email", "Your account has no email address; ask an admin to add one, or use a webhook.")
        params = {}
        for name in AlertRule.PARAMS.get(kind, {}):
            if data.get(name) is not None:
                params[name] = data[name]
        data["params"] = params
        return data

    @classmethod
    def initial_for(cls, rule: AlertRule) -> dict:
        return {"kind": rule.kind, "email": rule.email, "webhook_url": rule.webhook_url, "enabled": rule.enabled,
                **{name: rule.params.get(name) for name in ("threshold", "steps", "seconds")}}


class DefaultRuleForm(RuleForm):
    """One row of the defaults page: its kind is fixed by the row (the form's prefix)."""

    kind = forms.ChoiceField(choices=Kind.choices, widget=forms.HiddenInput)

    def __init__(self, *args, kind: str, **kwargs):
        super().__init__(*args, prefix=kind, **kwargs)
        for name in ("threshold", "steps", "seconds"):
            if name not in AlertRule.PARAMS.get(kind, {}):
                del self.fields[name]  # settings the kind does not read
