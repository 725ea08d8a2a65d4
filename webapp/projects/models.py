"""Projects: the unit of sharing (docs/explanation/architecture.md "A lab's runs").

Every run, experiment and alert rule belongs to one project. Every user has a personal project that
only they see (`personal_of`); a lab's projects have members, each with one role:

- viewer: reads every page of the project's runs, and nothing else;
- member: a viewer who also launches into the project and changes their own runs;
- admin: a member who also manages the membership and may cancel, archive or delete any run of it.

Site staff act as an admin of every project. Roles are ordered (`Role.rank`), so "at least a member"
is one comparison.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone

# Letters, digits and @ . + - _ (what a Django username may hold, so a personal project is named after its
# user), starting with a letter or digit: it is typed after `project:` in the search box and in URLs.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9@.+_-]*")
NAME_MAX = 150


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer: reads the project's runs"
    MEMBER = "member", "Member: also launches runs and changes their own"
    ADMIN = "admin", "Admin: also manages members and any run"

    @property
    def rank(self) -> int:
        return ROLE_RANK[self.value]


ROLE_RANK = {Role.VIEWER.value: 1, Role.MEMBER.value: 2, Role.ADMIN.value: 3}


def role_with_article(role: str) -> str:
    """'a viewer', 'a member', 'an admin': a role as the pages' sentences say it."""
    return f"an {role}" if role[:1] in "aeiou" else f"a {role}"


class Project(models.Model):
    name = models.CharField(
        max_length=NAME_MAX, validators=[RegexValidator(f"^{NAME_PATTERN.pattern}$", (
            "A project name is letters, digits and @ . + - _, starting with a letter or digit."))],
        help_text="Unique (case does not count); what `project:NAME`, `?project=` and `cohort.init(project=...)` take.")
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    personal_of = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="personal_project",
        help_text="Set for a user's personal project: only that user sees it, and it takes no other members.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(Lower("name"), name="project_unique_name_any_case")]

    def __str__(self):
        return self.title or self.name

    @property
    def is_personal(self) -> bool:
        return self.personal_of_id is not None


class Membership(models.Model):
    """One user's role in one project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "user"]
        constraints = [models.UniqueConstraint(fields=["user", "project"], name="membership_one_per_user")]

    def __str__(self):
        return f"{self.user} in {self.project} ({self.role})"

    @property
    def rank(self) -> int:
        return ROLE_RANK[self.role]
