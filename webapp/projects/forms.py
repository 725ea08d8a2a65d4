from django import forms
from django.contrib.auth import get_user_model

from webapp.projects.models import NAME_MAX, NAME_PATTERN, Project, Role


class ProjectCreateForm(forms.Form):
    name = forms.RegexField(regex=f"^{NAME_PATTERN.pattern}$", max_length=NAME_MAX, error_messages={
        "invalid": "Letters, digits and @ . + - _, starting with a letter or digit (it goes after project: in the "
                   "search box)."}, help_text="Short and unique, e.g. vision-rl.")
    title = forms.CharField(required=False, max_length=200)
    description = forms.CharField(required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2}))

    def clean_name(self):
        name = self.cleaned_data["name"]
        if Project.objects.filter(name__iexact=name).exists():
            raise forms.ValidationError(f"A project named {name!r} exists already: choose another name.")
        return name


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, label="User", help_text="Their user name on this server.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"No user named {username!r} on this server: check the spelling. Site "
                                        "staff create accounts (below).")
        self.cleaned_data["user"] = user
        return username


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
