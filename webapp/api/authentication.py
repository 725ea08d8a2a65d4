"""DRF authentication by personal token: `Authorization: Bearer <key>` (or `Token <key>`)."""

from __future__ import annotations

import logging

from rest_framework import authentication, exceptions

from webapp.api.models import ApiToken, hash_key
from webapp.api.services import token_touch

logger = logging.getLogger(__name__)
SCHEMES = ("bearer", "token")
MAX_KEY_LENGTH = 200


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """A request without an Authorization header of these schemes is left to the next class
    (session); one with a malformed, unknown or revoked key is refused with 401."""

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode("latin-1") not in SCHEMES:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: expected 'Bearer <key>'.")
        try:
            key = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        if len(key) > MAX_KEY_LENGTH:
            raise exceptions.AuthenticationFailed("Invalid token.")
        # The key is looked up by its SHA-256 in one indexed query whether it exists or not, so the
        # time a wrong key takes says nothing about how close it was to a right one.
        token = ApiToken.objects.select_related("user", "project").filter(key_hash=hash_key(key)).first()
        if token is None:
            logger.warning("API request with an unknown token from %s refused", request.META.get("REMOTE_ADDR"))
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("Token revoked.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive.")
        token_touch(token)
        return token.user, token

    def authenticate_header(self, request):
        # Present so DRF answers an unauthenticated request 401 (with this challenge), not 403.
        return 'Bearer realm="api"'
