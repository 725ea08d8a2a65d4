from django.apps import AppConfig


class ManualConfig(AppConfig):
    name = "webapp.manual"
    label = "manual"
    verbose_name = "Manual"
