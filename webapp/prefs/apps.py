from django.apps import AppConfig


class PrefsConfig(AppConfig):
    name = "webapp.prefs"
    label = "prefs"
    verbose_name = "Preferences"
