"""Per-user / per-group overrides of the launch limits an admin sets (blank field = the default)."""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from webapp.limits.model_entries import AllowedModelKind, allowed_model_entry_error

LIMIT_FIELDS = ("active_runs", "queued_runs", "tokens_per_run", "max_context_length")


class LimitOverride(models.Model):
    """Limits for one user or one auth group; a user's own row beats its groups', several groups: most generous."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="limit_override")
    group = models.OneToOneField(Group, null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="limit_override")
    active_runs = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="Queued + running runs at once (blank: the default).")
    queued_runs = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="Runs waiting in the queue at once (blank: the default).")
    tokens_per_run = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="steps x examples x rollouts x max_new_tokens (blank: the default).")
    max_context_length = models.PositiveIntegerField(null=True, blank=True,
                                                     help_text="Largest max_context_length (blank: the default).")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(user__isnull=False, group__isnull=True)
                           | models.Q(user__isnull=True, group__isnull=False)),
                name="limitoverride_user_xor_group"),
        ]

    def __str__(self) -> str:
        return f"limits for {'user ' + str(self.user) if self.user_id else 'group ' + str(self.group)}"


class AllowedModel(models.Model):
    """One entry of the model allow-list (webapp/limits/model_allowlist.py): which hub ids and local
    folders non-staff users may train. The built-in tiny model needs no entry."""

    Kind = AllowedModelKind  # id, prefix, local_root (webapp/limits/model_entries.py)

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ID)
    value = models.CharField(max_length=500, help_text=(
        "Exact hub id (meta-llama/Llama-3.2-1B-Instruct), a hub id prefix (Qwen/) or an absolute folder "
        "whose sub-folders are models (/srv/models)."))
    note = models.CharField(max_length=200, blank=True, help_text="Why it is allowed, for other admins.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("kind", "value")
        constraints = [models.UniqueConstraint(fields=("kind", "value"), name="allowedmodel_kind_value_unique")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.value}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        problem = allowed_model_entry_error(self.kind, self.value)
        if problem:
            raise ValidationError({"value": problem})
