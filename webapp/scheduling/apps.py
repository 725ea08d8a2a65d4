from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.scheduling"
    verbose_name = "Scheduling"
