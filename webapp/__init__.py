"""Cohort's Django project. Importing it loads the Celery app so `@shared_task` and `send_task` use it."""

from webapp.celery import app as celery_app

__all__ = ["celery_app"]
