"""The Celery app. The web side enqueues by task name (`send_task`), never importing `workers/`;
the worker process imports `workers.tasks` through `include`. Queues: `gpu` (training runs,
one at a time per GPU worker) and `default` (dataset imports, housekeeping)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("cohort", include=["workers.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")
