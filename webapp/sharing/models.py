"""Share links (issue 42): a signed, unguessable, expiring, revocable capability that reads one run,
or one compare view of runs, without an account (docs/explanation/architecture.md "A lab's runs").

The link's token is `<id>.<secret>.<signature>`: the secret is 32 random bytes kept here, the
signature an HMAC of both under the server's SECRET_KEY (Django's signing), so a forged or mistyped
token is refused before any lookup, the database alone cannot make a working link, and a new
SECRET_KEY revokes every link at once. The token can be shown again on the owner's list of links.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core import signing
from django.db import models
from django.utils import timezone

from webapp.runs.models import Run

SIGNING_SALT = "cohort.share-link"
SECRET_BYTES = 32


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def signer() -> signing.Signer:
    return signing.Signer(salt=SIGNING_SALT, sep="~", algorithm="sha256")


class ShareLink(models.Model):
    class View(models.TextChoices):
        RUN = "run", "One run"
        COMPARE = "compare", "A compare view"

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="share_links")
    view = models.CharField(max_length=10, choices=View.choices, default=View.RUN)
    runs = models.ManyToManyField(Run, related_name="share_links", help_text="The runs it opens (one, or those compared).")
    metrics = models.JSONField(default=list, blank=True, help_text="A compare view's chosen metrics.")
    label = models.CharField(max_length=200, blank=True, help_text="What it is for, e.g. 'NeurIPS reviewers'.")
    secret = models.CharField(max_length=64, editable=False, default=new_secret)
    anonymous = models.BooleanField(default=False, help_text=(
        "Shows no owner, user name, host name, worker name or file path anywhere, the exports included."))
    allow_adapter = models.BooleanField(default=False, help_text="Also downloads each run's trained LoRA adapter.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0, help_text="How many times the link was opened.")
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["created_by", "-created_at"], name="sharelink_creator_created")]

    def __str__(self):
        return self.label or f"share link {self.pk}"

    @property
    def token(self) -> str:
        """What the link's URL carries: the id and the secret, signed."""
        return signer().sign(f"{self.pk}.{self.secret}")

    def is_valid(self, now=None) -> bool:
        return self.revoked_at is None and self.expires_at > (now or timezone.now())

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.expires_at > timezone.now() else "expired"
