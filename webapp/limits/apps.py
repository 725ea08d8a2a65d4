from django.apps import AppConfig


class LimitsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.limits"
    verbose_name = "Limits"
