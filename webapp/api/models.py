"""Personal API tokens: a user's named keys for the API (`Authorization: Bearer <key>`).

Only the SHA-256 of a key is stored, like a password hash: the key is shown once, when it is made,
and a database leak does not leak usable keys. The key is long and random (256 bits), so an
unsalted fast hash is enough: there is nothing to brute-force, and lookup stays one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_BYTES = 32  # token_urlsafe(32): 43 characters, 256 random bits
PREFIX_LENGTH = 8


def hash_key(key: str) -> str:
    """The stored form of a key: its SHA-256, as 64 hex digits."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return secrets.token_urlsafe(KEY_BYTES)


class ApiToken(models.Model):
    """One named personal token. Revoking keeps the row (the list shows when it was revoked)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'laptop notebook'.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False, help_text="SHA-256 of the key (hex).")
    prefix = models.CharField(max_length=PREFIX_LENGTH, editable=False,
                              help_text="The key's first characters, to tell tokens apart.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The token's scope (issue 42): which project it reaches (empty: every project its user reads) and
    # whether it may write. A read-only token is refused every POST, PATCH and DELETE (403); the SDK and
    # the TRL callback need a write token, best one scoped to the project they log into.
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, null=True, blank=True,
                                related_name="api_tokens", help_text="Empty: every project its user reads.")
    can_write = models.BooleanField(default=False, help_text="Launches and logs runs; otherwise it only reads.")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="apitoken_user_created")]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @property
    def scope_label(self) -> str:
        where = f"project {self.project.name}" if self.project_id else "all your projects"
        return f"{'read and write' if self.can_write else 'read only'}, {where}"
