"""Filesystem locations shared by settings, the embedded stack and the tests (no Django imports)."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# Local state of the embedded default: SQLite file, embedded Redis, admin password, run artefacts.
VAR_DIR = Path(os.environ.get("COHORT_VAR_DIR", BASE_DIR / "var")).resolve()

# The embedded stack writes the URL of the Redis server it started here, so that every process
# of the stack (and `manage.py` commands run beside it) finds the same server.
EMBEDDED_REDIS_URL_FILE = VAR_DIR / "embedded-redis.url"
