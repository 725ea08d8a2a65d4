from django import forms

from webapp.api.models import ApiToken


class TokenCreateForm(forms.Form):
    """A new token's name: required, at most 100 characters, not the name of another active token
    of the same user (so the list tells them apart)."""

    name = forms.CharField(max_length=100, strip=True, label="Token name",
                           help_text="What it is for, e.g. 'laptop notebook'.",
                           widget=forms.TextInput(attrs={"placeholder": "laptop notebook", "autocomplete": "off"}))

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_name(self):
        name = self.cleaned_data["name"]
        if ApiToken.objects.filter(user=self.user, name=name, revoked_at__isnull=True).exists():
            raise forms.ValidationError("You already have an active token with this name.")
        return name
