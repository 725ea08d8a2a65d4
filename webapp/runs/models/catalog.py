"""The catalog a run is launched from: the programs registered in code and the tasks (a dataset, a
program, its rewards) they train on."""

from django.conf import settings
from django.db import models
from django.utils import timezone

# The Program of tasks that exist only for runs trained elsewhere (webapp/runs/ingest/external.py): no trainer
# registry holds it, so the catalog sync leaves it inactive and the launch form never offers its tasks.
EXTERNAL_PROGRAM = "external"


class Program(models.Model):
    """An LM program registered in code (`trainer/programs/`), mirrored here by a sync step."""

    name = models.SlugField(max_length=100, unique=True, help_text="Registry name in trainer.programs.")
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    modules = models.JSONField(default=list, help_text="Module names in the order the program calls them.")
    is_active = models.BooleanField(default=True, help_text="False once the program left the registry.")
    synced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.title or self.name


class Task(models.Model):
    """A dataset, a program and how to reward it: what a run trains on."""

    name = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    program = models.ForeignKey(Program, on_delete=models.PROTECT, related_name="tasks")
    dataset = models.ForeignKey(
        "datasets.Dataset",
        on_delete=models.PROTECT,
        related_name="tasks",
        null=True,
        blank=True,
        help_text="Empty for tasks whose examples are generated in code (the toy task).",
    )
    corpus = models.ForeignKey(
        "datasets.Dataset",
        on_delete=models.PROTECT,
        related_name="corpus_tasks",
        null=True,
        blank=True,
        help_text="Retrieval corpus (a dataset of kind 'corpus') for programs that search (search, hover).",
    )
    rewards = models.JSONField(
        default=list,
        help_text='Rewards as RunConfig takes them: [{"name": ..., "weight": 1.0, "params": {}, '
        '"condition_on": <another reward> or null, "threshold": 1.0}] (GDPO Eq. 8 conditioning).',
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.title or self.name
