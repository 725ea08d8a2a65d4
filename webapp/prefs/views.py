"""`GET/PUT /prefs/<key>`: the signed-in user's preference as JSON.

Anonymous requests get 401 JSON rather than the login redirect other pages use: the callers are
scripts on a page, which want a status, not a login form. PUT needs the CSRF token (X-CSRFToken)
like any form post, a JSON object body, and at most 32 KB.
"""

import json

from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.views.decorators.http import require_http_methods

from webapp.prefs.selectors import preference_get
from webapp.prefs.services import MAX_VALUE_BYTES, PreferenceError, preference_key_check, preference_set


def _error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


@login_not_required
@require_http_methods(["GET", "PUT"])
def preference(request, key: str):
    if not request.user.is_authenticated:
        return _error("Log in to read or store preferences.", 401)
    try:
        preference_key_check(key)
    except PreferenceError as exc:
        return _error(str(exc), 400)
    if request.method == "GET":
        return JsonResponse({"key": key, "value": preference_get(request.user, key)})
    declared = request.headers.get("Content-Length") or "0"
    if not declared.isdigit():
        return _error("Content-Length must be a number of bytes.", 400)
    if int(declared) > MAX_VALUE_BYTES:
        return _error(f"A preference is at most {MAX_VALUE_BYTES // 1024} KB of JSON.", 413)
    if request.content_type != "application/json":
        return _error("Send the preference as application/json.", 415)
    body = request.body
    if len(body) > MAX_VALUE_BYTES:  # the declared length is the client's word; the body is not
        return _error(f"A preference is at most {MAX_VALUE_BYTES // 1024} KB of JSON.", 413)
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _error("The body is not valid JSON (NaN and Infinity are not JSON either).", 400)
    try:
        pref = preference_set(request.user, key, value)
    except RecursionError:
        return _error("The value is nested too deeply.", 400)
    except PreferenceError as exc:
        return _error(str(exc), 400)
    return JsonResponse({"key": pref.key, "value": pref.value})
