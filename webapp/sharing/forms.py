from django import forms

from webapp.sharing.services import DEFAULT_DAYS, MAX_DAYS


class ShareLinkForm(forms.Form):
    label = forms.CharField(required=False, max_length=200, help_text="What it is for, e.g. 'NeurIPS reviewers'.")
    days = forms.IntegerField(min_value=1, max_value=MAX_DAYS, initial=DEFAULT_DAYS, label="Expires after (days)",
                              help_text=f"1 to {MAX_DAYS} days; you can revoke it sooner.")
    anonymous = forms.BooleanField(required=False, label="Anonymous (for a paper under review)", help_text=(
        "The pages show no owner, user name, host name, worker name or file path, the exports included."))
    allow_adapter = forms.BooleanField(required=False, label="Also allow downloading the trained adapter",
                                       help_text="Each run's final LoRA adapter, as a zip.")
