"""Write side of personal API tokens: create (the key is returned once), revoke, and the
at-most-once-a-minute `last_used_at` stamp."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.http import Http404
from django.utils import timezone

from webapp.api.models import PREFIX_LENGTH, ApiToken, hash_key, new_key

LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_create(*, user, name: str, project=None, can_write: bool = True) -> tuple[ApiToken, str]:
    """A new token for `user` and its key, reaching `project` (None: every project of the user) to read,
    or to read and write. The key is not stored: show it now or never."""
    key = new_key()
    token = ApiToken.objects.create(user=user, name=name, key_hash=hash_key(key), prefix=key[:PREFIX_LENGTH],
                                    project=project, can_write=can_write)
    return token, key


def token_revoke(*, user, token_id) -> ApiToken:
    """Revoke one of `user`'s tokens (revoking twice keeps the first time); another user's token
    or an unknown id is a 404."""
    token = ApiToken.objects.filter(user=user, pk=token_id).first()
    if token is None:
        raise Http404("No such token.")
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        token.refresh_from_db(fields=["revoked_at"])
    return token


def token_touch(token: ApiToken) -> None:
    """Record a use, at most once a minute per token: a client polling the API must not turn every
    read into a write. The conditional UPDATE also keeps concurrent requests from writing twice."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ApiToken.objects.filter(stale, pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
