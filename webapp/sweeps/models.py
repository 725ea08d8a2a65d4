"""A sweep: a search over launch settings, run as Cohort runs (docs/explanation/architecture.md "A lab's runs").

A sweep is a study in Optuna's sense: its sampler proposes a configuration (a trial), Cohort queues one
run per seed of it through the fair queue, and the runs' objective metric comes back as the trial's
value (the mean over its seeds). Everything Optuna needs to continue lives in these rows (each trial's
parameters, state, value, intermediate values and Optuna's own system attributes), so any process
rebuilds the study from the database (webapp/sweeps/study.py) and a sweep survives a restart of the web
server or a worker.
"""

from django.conf import settings
from django.db import models

from webapp.runs.models import Run, Task


class Sweep(models.Model):
    """State machine: running -> finished (every trial ended) | cancelled (by a user)."""

    class Method(models.TextChoices):
        GRID = "grid", "Grid (every combination)"
        RANDOM = "random", "Random"
        TPE = "tpe", "TPE (Optuna's Bayesian search)"

    class Pruner(models.TextChoices):
        NONE = "none", "None"
        MEDIAN = "median", "Median (stop a trial below the median of completed ones)"
        HYPERBAND = "hyperband", "Hyperband (successive halving)"

    class Mode(models.TextChoices):
        LAST = "last", "At the last step"
        BEST = "best", "Best value over steps"

    class Direction(models.TextChoices):
        MAXIMIZE = "maximize"
        MINIMIZE = "minimize"

    class State(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        CANCELLED = "cancelled"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sweeps")
    project = models.ForeignKey("projects.Project", on_delete=models.RESTRICT, related_name="sweeps",
                                help_text="Where its runs are launched; its members see it.")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="sweeps")
    name = models.CharField(max_length=200, blank=True)
    config = models.JSONField(help_text="The base launch settings (RunConfig as JSON) every trial starts from.")
    space = models.JSONField(help_text='RunConfig field -> {"values": [...]} or {"low", "high", "log"} '
                                       "(webapp/sweeps/space.py).")
    method = models.CharField(max_length=10, choices=Method.choices, default=Method.TPE)
    seeds = models.PositiveSmallIntegerField(default=1, help_text="Runs per configuration, seeds from the config's up.")
    n_trials = models.PositiveIntegerField(help_text="Configurations to try (a grid: at most its size).")
    parallel = models.PositiveSmallIntegerField(default=1, help_text="Configurations training at once.")
    objective = models.CharField(max_length=200, help_text="The step metric the sweep optimizes.")
    mode = models.CharField(max_length=4, choices=Mode.choices, default=Mode.LAST)
    direction = models.CharField(max_length=8, choices=Direction.choices, default=Direction.MAXIMIZE)
    pruner = models.CharField(max_length=10, choices=Pruner.choices, default=Pruner.NONE)
    options = models.JSONField(default=dict, blank=True, help_text=(
        "The sampler's and pruner's settings: startup_trials, warmup_steps, reduction_factor, grid_points."))
    sampler_seed = models.IntegerField(default=0, help_text="Makes the proposed configurations reproducible.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    waiting = models.TextField(blank=True, help_text="Why no further trial is queued now (a launch limit).")
    run_tags = models.JSONField(default=list, blank=True, help_text="Tags every run of the sweep gets, besides 'sweep'.")
    run_notes = models.TextField(blank=True, help_text="Notes every run of the sweep gets.")
    partition = models.CharField(max_length=100, blank=True, help_text=(
        "The Slurm partition every trial's runs go to; empty: this server's workers."))
    time_limit_min = models.PositiveIntegerField(null=True, blank=True, help_text="Each trial run's Slurm time limit.")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"], name="sweep_project_created"),
                   models.Index(fields=["state"], name="sweep_state")]

    def __str__(self):
        return self.name or f"Sweep {self.pk} ({self.task.name})"

    @property
    def seed_values(self) -> list[int]:
        first = int((self.config or {}).get("seed", 0))
        return list(range(first, first + self.seeds))


class Trial(models.Model):
    """One configuration of a sweep, trained once per seed; `number` is its Optuna trial number."""

    class State(models.TextChoices):
        RUNNING = "running"
        COMPLETE = "complete"
        PRUNED = "pruned"
        FAILED = "failed"

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField()
    params = models.JSONField(help_text="The swept settings of this configuration.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.RUNNING)
    value = models.FloatField(null=True, blank=True, help_text="The objective: the mean over its seeds' runs.")
    reason = models.TextField(blank=True, help_text="Why it was pruned or failed (\"no objective\", an error).")
    intermediate = models.JSONField(default=dict, blank=True, help_text=(
        "step -> the objective metric at that step, the mean over its runs that stored it."))
    seed_series = models.JSONField(default=dict, blank=True, help_text=(
        "seed -> step -> the objective metric of that seed's run: a pruner compares a trial with the others "
        "over the same seeds (webapp/sweeps/study.py)."))
    system_attrs = models.JSONField(default=dict, blank=True, help_text=(
        "Optuna's own bookkeeping of the trial (a grid point, Hyperband's rungs), kept to rebuild the study."))
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"], name="trial_unique_number")]

    def __str__(self):
        return f"{self.sweep} · trial {self.number}"


class TrialRun(models.Model):
    """The run of one seed of a trial."""

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="members")
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="sweep_member")
    seed = models.IntegerField()
    judged_step = models.PositiveIntegerField(default=0, help_text=(
        "The newest step of this run the sweep has read (and its pruner judged, if it has one)."))

    class Meta:
        ordering = ["trial", "seed"]
        constraints = [models.UniqueConstraint(fields=["trial", "seed"], name="trialrun_unique_seed")]

    def __str__(self):
        return f"{self.trial} · seed {self.seed}"
