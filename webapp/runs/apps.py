from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "webapp.runs"
    label = "runs"
    verbose_name = "Runs"

    def ready(self):
        from webapp.runs.live.notices import status_notices_send
        from webapp.runs.models import run_state_changed

        run_state_changed.connect(status_notices_send, dispatch_uid="runs-status-notices")
