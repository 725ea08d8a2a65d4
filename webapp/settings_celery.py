"""Celery's settings, which `webapp.settings` takes in whole: chosen together so that a multi-hour GPU
task is never lost and never trains a run twice (docs/explanation/celery.md). The broker and result
URLs are the settings' REDIS_URL, set there."""

import environ

env = environ.Env()

CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {"workers.tasks.run_train_task": {"queue": "gpu"},
                      "workers.tasks.slurm_tick_task": {"queue": "slurm"}}
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Each worker also consumes its own queue, so a GPU worker that cannot fit a queued run (its
# min_gpu_memory_gb) can wake a bigger one by name (webapp/scheduling/services.py).
CELERY_WORKER_DIRECT = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=12 * 3600),
}
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A Redis blip must not kill a multi-hour training task (Celery plans to make True the default in 6.0);
# the run's claim makes a re-delivery after such a blip harmless.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE = {
    "reap-stale-runs": {"task": "workers.tasks.reap_stale_runs_task", "schedule": 15.0},
}

# What `from webapp.settings_celery import *` takes: the settings, not this module's own names (env).
__all__ = [name for name in dir() if name.startswith("CELERY_")]
