from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "webapp.alerts"
    label = "alerts"
    verbose_name = "Alerts"

    def ready(self):
        from webapp.alerts.selectors import alert_unseen_open_count
        from webapp.alerts.services import on_run_state_changed, on_steps_stored
        from webapp.runs.hooks import register_badge_counter
        from webapp.runs.models import run_state_changed, steps_stored

        # dispatch_uid: connected once even if ready() runs twice (tests that reload apps).
        run_state_changed.connect(on_run_state_changed, dispatch_uid="alerts.on_run_state_changed")
        steps_stored.connect(on_steps_stored, dispatch_uid="alerts.on_steps_stored")
        # The run page's socket sends each watcher's badge with an alert notice (webapp/runs/live/consumers.py).
        register_badge_counter(alert_unseen_open_count)
