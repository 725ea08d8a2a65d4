"""The Users page's forms. A new account is Django's own UserCreationForm (its user name rules, the
case-insensitive duplicate check, the server's AUTH_PASSWORD_VALIDATORS), with an optional email, the
password optional (left empty: one is generated), and an optional first project with a role."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.password_validation import password_validators_help_text_html
from django.utils.html import format_html

from webapp.people.selectors import lab_projects
from webapp.people.services import generated_password
from webapp.projects.models import Role

PASSWORD_HELP = "Leave both password fields empty to have one generated: it is shown once, on the next page."


class PersonCreateForm(UserCreationForm):
    project = forms.ModelChoiceField(queryset=lab_projects().none(), required=False, to_field_name="name",
                                     empty_label="none yet", help_text="A project to add them to at once (optional).")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER, help_text="Their role in that project.")

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    field_order = ["username", "email", "password1", "password2", "project", "role"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generated_password = None
        self.fields["email"].label = "Email (optional)"
        self.fields["email"].help_text = "Where the alerts they set up are sent; nothing is sent now."
        for name in ("password1", "password2"):
            self.fields[name].required = False
        self.fields["password1"].help_text = format_html("{} {}", PASSWORD_HELP, password_validators_help_text_html())
        self.fields["project"].queryset = lab_projects()

    def clean(self):
        first, second = self.cleaned_data.get("password1"), self.cleaned_data.get("password2")
        if not first and not second:
            # Set before Django's checks run, so the generated password passes the same validators.
            self.generated_password = generated_password()
            self.cleaned_data["password1"] = self.cleaned_data["password2"] = self.generated_password
        elif not second:
            self.add_error("password2", "Type the password again here, or leave both fields empty to generate one.")
        elif not first:
            self.add_error("password1", "Type the password here too, or leave both fields empty to generate one.")
        return super().clean()

    def validate_password_for_user(self, user, password_field_name="password2"):
        # A password the user typed must pass the server's validators; the field named in their errors is the
        # first one when the password was generated (nobody typed into the second).
        super().validate_password_for_user(user, "password1" if self.generated_password else password_field_name)


class PersonPlaceForm(forms.Form):
    """Puts an existing account in a project with a role (or changes the role it has there)."""

    project = forms.ModelChoiceField(queryset=lab_projects().none(), to_field_name="name", empty_label=None)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = lab_projects()
