import logging

from django.apps import AppConfig

log = logging.getLogger(__name__)


def _on_run_state_changed(sender, run, **kwargs):
    from webapp.sweeps.services import run_ended

    try:
        run_ended(run)
    except Exception:  # the run's own move stands; the reaper's pass advances the sweep later
        log.exception("sweep step after run %s became %s failed", run.pk, run.state)


def _on_steps_stored(sender, run, rows, **kwargs):
    from webapp.sweeps.services import sweep_steps_stored

    try:
        sweep_steps_stored(run, rows)
    except Exception:  # never fail an ingest; the next step asks the pruner again
        log.exception("the pruner of run %s's sweep failed", run.pk)


class SweepsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.sweeps"
    verbose_name = "Sweeps"

    def ready(self):
        from webapp.runs.charts.sources import register_run_source
        from webapp.runs.hooks import register_run_page_extras
        from webapp.runs.models import run_state_changed, steps_stored
        from webapp.sweeps.selectors import runs_sweeps_context, sweep_runs_for_user

        # A sweep follows its runs through the runs app's signals; the runs app never imports this one.
        run_state_changed.connect(_on_run_state_changed, dispatch_uid="sweeps-run-state")
        steps_stored.connect(_on_steps_stored, dispatch_uid="sweeps-steps-stored")
        register_run_page_extras("sweeps", runs_sweeps_context)  # the run page links to its sweep
        register_run_source("sweep", sweep_runs_for_user)  # the compare page opens on a sweep's runs

        from webapp.runs.hooks import LaunchAction, register_launch_action
        from webapp.sweeps.launch_views import sweep_launch, sweep_offered

        # The launch form's Sweep button: the form's settings as the base, its sweep entries as the space.
        register_launch_action("sweep", LaunchAction(offered=sweep_offered, launch=sweep_launch))
