"""The MMGRPO paper's Table 1 as an experiment: for one task, the same launch settings run as two
kinds of run per seed, which measure its four arms (webapp/experiments/services.py)."""

from django.conf import settings
from django.db import models

from webapp.runs.models import Run, Task


class Experiment(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="experiments")
    project = models.ForeignKey("projects.Project", on_delete=models.RESTRICT, related_name="experiments",
                                help_text="Where its runs are launched; its members see it.")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="experiments")
    name = models.CharField(max_length=200, blank=True)
    seeds = models.PositiveSmallIntegerField(help_text="Runs of each kind, one per seed.")
    config = models.JSONField(help_text="The launch settings every run starts from (RunConfig as JSON).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return self.name or f"Experiment {self.pk} ({self.task.name})"


class ExperimentRun(models.Model):
    """One run of an experiment: `kind` says which arms it measures (selectors.ARMS)."""

    class Kind(models.TextChoices):
        WEIGHTS = "weights", "MMGRPO (the program's prompts as they are)"
        BOTH = "both", "BetterTogether (prompts first, then MMGRPO)"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="members")
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="experiment_member")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    seed = models.IntegerField()

    class Meta:
        ordering = ["seed", "kind"]
        constraints = [models.UniqueConstraint(fields=["experiment", "kind", "seed"], name="one_run_per_arm_seed")]

    def __str__(self):
        return f"{self.experiment} · {self.kind} · seed {self.seed}"
