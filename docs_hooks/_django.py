"""Django, set up once for the pages built from it (the REST API's schema, the management commands)."""

from __future__ import annotations

import os
from functools import cache


@cache
def setup() -> None:
    # The server's own settings, also under pytest (whose DJANGO_SETTINGS_MODULE a build it starts inherits).
    os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    import django

    django.setup()
