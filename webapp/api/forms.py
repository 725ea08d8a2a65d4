from django import forms

from webapp.api.models import ApiToken
from webapp.projects.models import Project
from webapp.projects.selectors import projects_for_user

ACCESS_CHOICES = [("write", "Read and write: launches runs and logs them (the SDK, the TRL callback)"),
                  ("read", "Read only: every POST, PATCH and DELETE is refused (403)")]


class TokenCreateForm(forms.Form):
    """A new token's name: required, at most 100 characters, not the name of another active token
    of the same user (so the list tells them apart)."""

    name = forms.CharField(max_length=100, strip=True, label="Token name",
                           help_text="What it is for, e.g. 'laptop notebook'.",
                           widget=forms.TextInput(attrs={"placeholder": "laptop notebook", "autocomplete": "off"}))

    project = forms.ModelChoiceField(queryset=Project.objects.none(), required=False, to_field_name="name",
                                     empty_label="all my projects",
                                     help_text="What it reaches: one project, or every project you are in.")
    # Absent (a client of the form from before scopes): read and write, as every token could then.
    access = forms.ChoiceField(choices=ACCESS_CHOICES, initial="write", required=False, widget=forms.RadioSelect)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["project"].queryset = projects_for_user(user)

    def clean_access(self):
        return self.cleaned_data["access"] or "write"

    def clean_name(self):
        name = self.cleaned_data["name"]
        if ApiToken.objects.filter(user=self.user, name=name, revoked_at__isnull=True).exists():
            raise forms.ValidationError("You already have an active token with this name.")
        return name
