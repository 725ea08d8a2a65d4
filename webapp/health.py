"""`GET /healthz`: is the database reachable, is Redis reachable. No login (probes have none)."""

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

PROBE_TIMEOUT_S = 2.0


def check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "not answering"; the probe must not 500
        return f"error: {exc.__class__.__name__}: {exc}".strip()
    return "ok"


def check_redis() -> str:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S
    )
    try:
        client.ping()
    except Exception as exc:
        return f"error: {exc.__class__.__name__}: {exc}".strip()
    finally:
        client.close()
    return "ok"


@login_not_required
@never_cache
@require_GET
def healthz(request):
    checks = {"database": check_database(), "redis": check_redis()}
    failing = [name for name, status in checks.items() if status != "ok"]
    body = {"status": "ok" if not failing else "unavailable", **checks}
    if failing:
        body["failing"] = failing
    return JsonResponse(body, status=503 if failing else 200)
