"""Settings, read from the environment (django-environ).

`DJANGO_ENV` selects the profile: `development` (default: DEBUG on, embedded defaults) or
`production` (DEBUG off, `SECRET_KEY` and `ALLOWED_HOSTS` required, HTTPS hardening on).
`DATABASE_URL` defaults to a SQLite file under `var/`; `REDIS_URL` defaults to the Redis server
started by the embedded stack (`python -m webapp.stack up`). See README.md "Configuration".
"""

from datetime import timedelta
from pathlib import Path

import environ
import plotly
from django.core.exceptions import ImproperlyConfigured

from webapp.paths import BASE_DIR, EMBEDDED_REDIS_URL_FILE, VAR_DIR

env = environ.Env()

DJANGO_ENV = env.str("DJANGO_ENV", default="development")
if DJANGO_ENV not in ("development", "production"):
    raise ImproperlyConfigured(f"DJANGO_ENV must be 'development' or 'production', not {DJANGO_ENV!r}.")
PRODUCTION = DJANGO_ENV == "production"

DEBUG = env.bool("DEBUG", default=not PRODUCTION)

if PRODUCTION:
    try:
        SECRET_KEY = env.str("SECRET_KEY")
    except ImproperlyConfigured:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DJANGO_ENV=production: set it to a random string of at "
            "least 50 characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(64))'."
        ) from None
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured(
            "ALLOWED_HOSTS is required when DJANGO_ENV=production: a comma-separated list of the "
            "host names the dashboard is served under, e.g. ALLOWED_HOSTS=cohort.example.org."
        )
else:
    # Development only: a fixed key is fine on a laptop, never in production (checked above).
    SECRET_KEY = env.str("SECRET_KEY", default="django-insecure-cohort-development-key-not-for-production")
    ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "webapp.projects",
    "webapp.runs",
    "webapp.datasets",
    "webapp.alerts",
    "webapp.prefs",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served here: the docs page works offline
    "webapp.api",
    "webapp.limits",
    "webapp.scheduling",
    "webapp.experiments",
    "webapp.sweeps",
    "webapp.sharing",
    "webapp.manual",
    "axes",
]

MIDDLEWARE = [
    # Outermost: a request the database could not take is answered 503 with Retry-After, not 500.
    "webapp.overload.OverloadMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Inside CommonMiddleware (whose APPEND_SLASH sees its answers): Cohort's 404, also under DEBUG, and
    # `/runs/new/` redirected to `/runs/new` (webapp/not_found.py says why).
    "webapp.not_found.NotFoundMiddleware",
    "webapp.nul_guard.RejectNulMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every page and endpoint requires login unless its view is marked @login_not_required.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    # What the share links this browser opened let it read (webapp/sharing): run pages marked
    # link_readable (webapp/runs/access.py) then open without a login, for those runs only.
    "webapp.sharing.middleware.ShareGrantMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = "webapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.alerts.context_processors.alert_badge",
            ],
        },
    },
]

# --- API (webapp/api, Django REST framework): JSON only; reads, run creation, the logging API ------
REST_FRAMEWORK = {
    # A personal token first, so an unauthenticated request is answered 401 with its challenge.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "webapp.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Signed in, and a read-only token only reads (webapp/api/scope.py).
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated",
                                   "webapp.api.scope.TokenScopePermission"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies up to DATA_UPLOAD_MAX_MEMORY_SIZE (a 413 past it); the logging API's steps take more.
    "DEFAULT_PARSER_CLASSES": ["webapp.api.parsers.BoundedJSONParser"],
    "EXCEPTION_HANDLER": "webapp.api.errors.exception_handler",
    "URL_FORMAT_OVERRIDE": None,  # one format: `?format=` is an ordinary (ignored) parameter
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
# The API's OpenAPI schema (/api/schema/) and its interactive docs (/api/docs/), for signed-in
# users: the schema says nothing about anyone's runs, but a lab server shows strangers nothing.
SPECTACULAR_SETTINGS = {
    "TITLE": "Cohort API",
    "DESCRIPTION": "Runs, their metrics, rollouts and groups, as the dashboard shows them; run creation; and the "
                   "logging API, through which a trainer outside Cohort (TRL, a PyTorch loop) streams a run in. "
                   "Authenticate with a personal token (`Authorization: Bearer <key>`, from /api/tokens/) or the "
                   "browser session.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The logging API's finish takes two of the run states: an enum of its own beside the run's.
    "ENUM_NAME_OVERRIDES": {"StateEnum": "webapp.runs.models.Run.State", "FinishStateEnum": ["succeeded", "failed"]},
}

# --- Database -------------------------------------------------------------------------------
# The web server (webapp/asgi.py says so) shares the database with the workers differently from them:
# it takes PostgreSQL connections from a pool, and on SQLite it lets a worker's write go first.
SERVER_PROCESS = env.str("COHORT_PROCESS", default="") == "server"
DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'cohort.sqlite3'}")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded stack has a web server and a worker writing at once: WAL lets readers proceed
    # during a write, IMMEDIATE takes the write lock up front instead of failing mid-transaction, and
    # writers take turns (webapp/db/sqlite3), the worker first, before they ask SQLite for its lock.
    _db["ENGINE"] = "webapp.db.sqlite3"
    _db.setdefault("OPTIONS", {}).update(
        {
            # How long a connection waits for another process's write (SQLite's busy timeout).
            "timeout": env.float("COHORT_SQLITE_BUSY_TIMEOUT_S", default=30.0),
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # Tests share their database with a real worker and server process, so it must be a file.
    _db["TEST"] = {"NAME": str(VAR_DIR / "test-cohort.sqlite3")}
    VAR_DIR.mkdir(parents=True, exist_ok=True)
elif _db["ENGINE"] == "django.db.backends.postgresql":
    _db["CONN_HEALTH_CHECKS"] = True
    # A database host that drops packets must fail a connect (and let the supervisor retry), not hang it.
    _db.setdefault("OPTIONS", {}).setdefault("connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT", default=10))
    if env.bool("COHORT_DB_POOL", default=SERVER_PROCESS):
        # The ASGI server runs each request's database work on a thread of its own, and a persistent
        # connection per thread grew past PostgreSQL's max_connections under load (issue 43: 572 answers "too many clients" at 100 runs logging at once). Its
        # connections come from one bounded pool instead; a request that finds none free within
        # COHORT_DB_POOL_WAIT_S is answered 503 with Retry-After (webapp/overload.py). The worker and
        # management commands keep one persistent connection per process: their process count bounds
        # them (docs/explanation/lab-load.md "Database connections").
        _db["CONN_MAX_AGE"] = 0  # Django's pool requires it: the pool keeps the connections
        _db["OPTIONS"]["pool"] = {
            "min_size": env.int("COHORT_DB_POOL_MIN", default=2),
            "max_size": env.int("COHORT_DB_POOL_SIZE", default=20),
            "timeout": env.float("COHORT_DB_POOL_WAIT_S", default=10.0),
        }
    else:
        _db.setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
# How long a request waits for its turn to write SQLite (behind the server's other requests and the
# workers) before its client is told 503 and Retry-After; the server yields its turn to a waiting
# worker (webapp/db/sqlite3).
COHORT_SQLITE_WRITE_WAIT_S = env.float("COHORT_SQLITE_WRITE_WAIT_S", default=30.0)
COHORT_SQLITE_WRITER_YIELDS = SERVER_PROCESS
# What an overloaded server tells a client to wait before asking again (webapp/overload.py).
COHORT_RETRY_AFTER_S = env.int("COHORT_RETRY_AFTER_S", default=2)
# The logging API's budgets (webapp/api/budget.py): steps posts stored at once (SQLite writes one at
# a time anyway: two let one be prepared while the other writes; the server's Python runs one thread at
# a time, so more than 4 only starve its websockets and pages), how long one waits for its turn
# before a 503 (a load the server can work through is queued, not refused: under the SDK's 60 s
# request timeout), and the requests one token may make (a 429 past it; DRF's rate format).
COHORT_LOGGING_CONCURRENCY = env.int("COHORT_LOGGING_CONCURRENCY", default=2 if _db["ENGINE"] == "webapp.db.sqlite3" else 4)
COHORT_LOGGING_QUEUE_WAIT_S = env.float("COHORT_LOGGING_QUEUE_WAIT_S", default=45.0)
# One token's steps posts in the server at once (waiting or being stored); one more is a 429 at once.
# As many as the slots: twice as many stored 1.4x the rollouts/s on SQLite but doubled the run page's
# p95 on both databases (docs/explanation/lab-load.md), and pages come first.
COHORT_LOGGING_PER_TOKEN = env.int("COHORT_LOGGING_PER_TOKEN", default=COHORT_LOGGING_CONCURRENCY)
COHORT_LOGGING_RATE = env.str("COHORT_LOGGING_RATE", default="50/s")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


# --- Redis: Celery broker and results, channel layer -------------------------------------------
def _default_redis_url() -> str:
    if EMBEDDED_REDIS_URL_FILE.exists():
        return EMBEDDED_REDIS_URL_FILE.read_text().strip()
    # Nothing started yet: point at the conventional local port; /healthz reports it if absent.
    return "redis://127.0.0.1:6379/0"


REDIS_URL = env.str("REDIS_URL", default="") or _default_redis_url()
if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"REDIS_URL must be a redis://, rediss:// or unix:// URL, not {REDIS_URL!r}.")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 gives reads a 5 s socket timeout by default: exactly how long channels_redis
            # blocks in BZPOPMIN waiting for a message, so every websocket idle for 5 s crashed with
            # TimeoutError (django/channels_redis#422). Reads now outlast that block; a server that
            # went away is still noticed (its host resets the connection, or the read times out).
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
            "prefix": env.str("CHANNELS_PREFIX", default="cohort"),
            # A watcher's channel holds this many notices before channels_redis drops new ones: one post
            # of 50 steps is 50 at once, and a watcher on a busy server drains them late (issue 43).
            "capacity": 1000,
        },
    }
}

# Celery: webapp/settings_celery.py, and docs/explanation/celery.md for why its settings fit multi-hour GPU tasks.
from webapp.settings_celery import *  # noqa: E402, F403

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL

# What a GPU worker reports about itself when NVML cannot say (or must not: a MIG slice, a test).
COHORT_WORKER_GPU_NAME = env.str("COHORT_WORKER_GPU_NAME", default="")
COHORT_WORKER_GPU_MEMORY_GB = env.float("COHORT_WORKER_GPU_MEMORY_GB", default=None)
COHORT_WORKER_DEVICES = env.str("COHORT_WORKER_DEVICES", default="")
COHORT_WORKER_GPU_COUNT = env.int("COHORT_WORKER_GPU_COUNT", default=None)
# A run whose supervisor has not sent a heartbeat for this long is marked interrupted (resumable).
COHORT_HEARTBEAT_TIMEOUT_S = env.int("COHORT_HEARTBEAT_TIMEOUT_S", default=60)
# A run trained elsewhere whose trainer has posted nothing for this long (seconds) is marked lost
# (webapp/runs/ingest/lost.py); its next post reopens it.
COHORT_EXTERNAL_STALE_AFTER = env.int("COHORT_EXTERNAL_STALE_AFTER", default=3600)
# The runs page's "Import runs" upload (webapp/runs/ingest/uploads.py): at most this many MB an upload,
# unpacked; a larger run goes in with `cohort import`, which streams it through the logging API.
COHORT_IMPORT_MAX_UPLOAD_MB = env.int("COHORT_IMPORT_MAX_UPLOAD_MB", default=200)

# --- Auth -----------------------------------------------------------------------------------
# django-axes counts failed logins per username and per client address (each on its own): after
# COHORT_LOGIN_FAILURE_LIMIT failures either is refused, the right password included, for
# COHORT_LOGIN_LOCKOUT_MINUTES; a success resets the count. Admins unlock under Axes in the admin
# (or `manage.py axes_reset`).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env.int("COHORT_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("COHORT_LOGIN_LOCKOUT_MINUTES", default=15.0))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False  # its banner would open every manage.py command
if AXES_FAILURE_LIMIT < 1 or AXES_COOLOFF_TIME.total_seconds() <= 0:
    raise ImproperlyConfigured("COHORT_LOGIN_FAILURE_LIMIT must be at least 1 and COHORT_LOGIN_LOCKOUT_MINUTES above 0.")
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

# --- Static files: WhiteNoise; Plotly.js comes from the installed plotly package, no CDN ------
STATIC_URL = "static/"
# collectstatic target (production, Docker image); development serves from the finders.
STATIC_ROOT = BASE_DIR / "staticfiles" if PRODUCTION else None
STATICFILES_DIRS = [BASE_DIR / "static"]
# Files served at the site's root by WhiteNoise (favicon.ico: browsers ask for it on every page).
WHITENOISE_ROOT = BASE_DIR / "static" / "root"
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "webapp.staticfinders.PlotlyJsFinder",
]
PLOTLY_JS_PATH = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION

# --- Where runs keep their event logs and checkpoints ---------------------------------------
COHORT_RUNS_DIR = env.path("COHORT_RUNS_DIR", default=str(VAR_DIR / "runs"))

# --- Slurm: webapp/settings_slurm.py (the partitions offered, the job template, the shared folder) ---
from webapp.settings_slurm import *  # noqa: E402, F403

if COHORT_SLURM_PARTITIONS:  # noqa: F405 (the beat wakes the slurm queue's worker, which does the work)
    CELERY_BEAT_SCHEDULE = {**CELERY_BEAT_SCHEDULE, "slurm-tick": {  # noqa: F405
        "task": "workers.tasks.slurm_tick_task", "schedule": COHORT_SLURM_POLL_S,  # noqa: F405
        "options": {"expires": COHORT_SLURM_POLL_S}}}  # noqa: F405

# --- The manual (webapp/manual): the site `make docs` builds from docs/, served at /docs/ ----------
COHORT_DOCS_DIR = env.path("COHORT_DOCS_DIR", default=str(BASE_DIR / "build" / "docs-site"))

# --- Dataset uploads (webapp/datasets) ------------------------------------------------------
# Largest upload accepted; refused by Content-Length before the body is read, and counted while
# streaming. Uploads wait for their import under the var dir, never in the repository.
COHORT_DATASET_MAX_BYTES = env.int("COHORT_DATASET_MAX_BYTES", default=200 * 1024 * 1024)
if COHORT_DATASET_MAX_BYTES <= 0:
    raise ImproperlyConfigured(f"COHORT_DATASET_MAX_BYTES must be a positive number of bytes, not {COHORT_DATASET_MAX_BYTES}.")
COHORT_DATASET_UPLOAD_DIR = env.path("COHORT_DATASET_UPLOAD_DIR", default=str(VAR_DIR / "dataset-uploads"))

# --- Alerts (webapp/alerts): email through Django's mail backend, webhooks from a Celery task --
# EMAIL_URL sets EMAIL_BACKEND, EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD and
# EMAIL_USE_TLS / EMAIL_USE_SSL at once, e.g. smtp+tls://user:password@mail.example.org:587
# (django-environ; percent-encode an @ in the password). Development prints emails to the console.
_email = env.email_url("EMAIL_URL", default="smtp://localhost:25" if PRODUCTION else "consolemail://")
globals().update({key: value for key, value in _email.items() if value not in (None, "")})
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="cohort@localhost")
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)  # seconds; an SMTP server that hangs cannot stall ingest
# Where the dashboard is reached: the run links in alert emails and webhook payloads start with it.
COHORT_BASE_URL = env.str("COHORT_BASE_URL", default="http://localhost:8000")
ALERTS_WEBHOOK_TIMEOUT_S = env.float("ALERTS_WEBHOOK_TIMEOUT_S", default=5.0)
# Networks webhooks may reach although they are inside (loopback, private...): e.g. an internal chat
# server. Empty: public addresses only.
try:
    from webapp.alerts.webhook import parse_networks as _parse_networks

    COHORT_WEBHOOK_ALLOWED_NETWORKS = [str(n) for n in _parse_networks(env.list("COHORT_WEBHOOK_ALLOWED_NETWORKS", default=[]))]
except ValueError as exc:
    raise ImproperlyConfigured(f"COHORT_WEBHOOK_ALLOWED_NETWORKS: {exc} (write networks like 10.1.0.0/16, fd00::/8).") from None

# --- Production hardening (passes `manage.py check --deploy --fail-level WARNING`) ------------
if PRODUCTION:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"
    # /healthz is probed over plain HTTP by load balancers and compose healthchecks.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # axes logs every successful login at INFO ("Deleted 0 failed login attempts"); failures stay WARNING.
    "loggers": {"django.db.backends": {"level": "INFO"}, "axes": {"level": "WARNING"}},
}

# Launch limits (issue 13; webapp/limits): defaults for every non-staff user, overridable per user or
# group in the admin. Tokens per run = steps x examples_per_step x rollouts_per_example x max_new_tokens.
COHORT_LIMIT_ACTIVE_RUNS_PER_USER = env.int("COHORT_LIMIT_ACTIVE_RUNS_PER_USER", default=10)
COHORT_LIMIT_QUEUED_RUNS_PER_USER = env.int("COHORT_LIMIT_QUEUED_RUNS_PER_USER", default=10)
COHORT_LIMIT_TOKENS_PER_RUN = env.int("COHORT_LIMIT_TOKENS_PER_RUN", default=50_000_000)
COHORT_LIMIT_MAX_CONTEXT_LENGTH = env.int("COHORT_LIMIT_MAX_CONTEXT_LENGTH", default=32768)
# Models: the allow-list lives in the admin (webapp/limits/model_allowlist.py); these hub id prefixes
# are allowed without an admin visit (e.g. "Qwen/,meta-llama/"). One cache for every hub download and
# the built-in tiny model, shared by all runs and workers.
COHORT_MODEL_ALLOWED_PREFIXES = env.list("COHORT_MODEL_ALLOWED_PREFIXES", default=[])
COHORT_MODEL_CACHE = env.path("COHORT_MODEL_CACHE", default=str(VAR_DIR / "model-cache"))
