from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.experiments"
    verbose_name = "Experiments"

    def ready(self):
        from webapp.experiments.selectors import experiment_runs_for_user
        from webapp.experiments.services import experiment_offered
        from webapp.experiments.views import experiment_launch, runs_experiments_context
        from webapp.runs.charts.sources import register_run_source
        from webapp.runs.hooks import LaunchAction, register_launch_action, register_run_page_extras

        # The run pages link to the experiments their runs belong to, the launch form offers an
        # experiment for a DSPy program's task, and the compare page opens on an experiment's runs
        # (`?experiment=<id>`); the runs app does not import this one.
        register_run_page_extras("experiments", runs_experiments_context)
        register_launch_action("experiment", LaunchAction(offered=experiment_offered, launch=experiment_launch))
        register_run_source("experiment", experiment_runs_for_user)
