"""One JSON value per (user, key)."""

from django.conf import settings
from django.db import models


class UserPreference(models.Model):
    """A user's value for one preference key, e.g. `legend` -> {chart family: {series: visible}}."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preferences")
    key = models.CharField(max_length=64)
    value = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["user", "key"]
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="userpreference_unique_key")]

    def __str__(self):
        return f"{self.user_id}:{self.key}"
