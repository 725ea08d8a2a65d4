"""ASGI entry point: HTTP through Django, websockets through Channels.

Websockets pass the Origin check first (a page of another site cannot open a socket with the
user's cookies), then session authentication and the session's share links (webapp/sharing); each
consumer checks the user, or a link, may read the object.
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
if not settings.configured:
    # This process is the web server (settings.py, COHORT_PROCESS): its requests' connections come from
    # one bounded pool on PostgreSQL, and on SQLite it lets a worker write first. Only when this module
    # starts the process: a test that imports the application keeps its own settings.
    os.environ.setdefault("COHORT_PROCESS", "server")
django_asgi_app = get_asgi_application()  # sets Django up before the routing imports models

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from webapp.body_limit import BodySizeLimit  # noqa: E402
from webapp.runs.live.routing import websocket_urlpatterns as run_routes  # noqa: E402
from webapp.sharing.middleware import ShareGrantASGIMiddleware  # noqa: E402
from webapp.sweeps.routing import websocket_urlpatterns as sweep_routes  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodySizeLimit(django_asgi_app, settings.COHORT_DATASET_MAX_BYTES),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(ShareGrantASGIMiddleware(
            URLRouter(run_routes + sweep_routes)))),
    }
)

if settings.SERVER_PROCESS:
    import gc

    from django.urls import get_resolver

    # Every view module loaded, then everything alive now (Django, numpy, Optuna, the URLconf: most of
    # the process's objects) moved out of the collector's reach: a page that builds tens of thousands
    # of rows (a sweep's compare page, 60,000 steps) no longer triggers full collections that walk all
    # of them, which put a 100 ms tail on its p95 (benchmarks/sweep_pages.py --gc-freeze).
    get_resolver().url_patterns  # noqa: B018 (imports the views)
    gc.freeze()
