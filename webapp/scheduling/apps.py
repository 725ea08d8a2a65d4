from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.scheduling"
    verbose_name = "Scheduling"

    def ready(self):
        from webapp.runs.hooks import register_gpu_counter
        from webapp.scheduling.selectors import most_gpus_per_worker

        register_gpu_counter(most_gpus_per_worker)  # the launch form's sampler_gpus (webapp/runs/hooks.py)
        from webapp.runs.hooks import Placement, register_placement
        from webapp.scheduling.slurm import placement

        register_placement(Placement(offered=placement.offered, check=placement.check))  # the Where choice
        from webapp.runs.hooks import register_run_page_extras
        from webapp.scheduling.slurm.selectors import runs_slurm_context

        register_run_page_extras("slurm", runs_slurm_context)  # the run page's Slurm job panel
