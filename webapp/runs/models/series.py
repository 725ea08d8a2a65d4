"""A run's metrics step by step: one row per stored step, and the column blocks read from them for
charts (webapp/runs/charts/blocks.py)."""

from django.db import models
from django.utils import timezone

from webapp.runs.models.run import Run


class StepMetric(models.Model):
    """The scalar metrics of one training step: one row per (run, attempt, step).

    `seq` increases with every stored row of a run, so a browser can ask for "everything after
    the last seq I saw" across attempts. Per-module series use keys like `group_var/rewriter`.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_metrics")
    attempt = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    seq = models.PositiveBigIntegerField()
    metrics = models.JSONField(default=dict)
    spans = models.JSONField(default=list, blank=True, help_text=(
        "The step's timeline: [{lane, name, start, end, policy_version?}], seconds since the epoch."))
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt", "step"], name="stepmetric_unique_step"),
            models.UniqueConstraint(fields=["run", "seq"], name="stepmetric_unique_seq"),
        ]
        # A step range of a run (the series blocks' reads, webapp/runs/charts/blocks.py) across attempts.
        indexes = [models.Index(fields=["run", "step"], name="stepmetric_run_step")]

    def __str__(self):
        return f"run {self.run_id} step {self.step} (attempt {self.attempt})"


class SeriesBlock(models.Model):
    """`BLOCK_STEPS` consecutive steps of a run's metrics, column by column (webapp/runs/charts/blocks.py):
    written by the ingest once the run has moved past them, used by a read only while `last_seq` and
    `rows` still match the StepMetric rows of those steps, which stay the source of truth."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="series_blocks")
    block = models.PositiveIntegerField(help_text="Steps block * BLOCK_STEPS to (block + 1) * BLOCK_STEPS - 1.")
    last_seq = models.PositiveBigIntegerField(help_text="The newest seq among the block's rows when it was written.")
    rows = models.PositiveIntegerField(help_text="How many StepMetric rows the block was written from.")
    steps = models.PositiveIntegerField(help_text="How many distinct steps it holds.")
    keys = models.JSONField(default=list, help_text="The metric keys, in the order of the value columns.")
    tokens = models.FloatField(null=True, help_text="The completion tokens of its steps (None: none reported).")
    data = models.BinaryField(help_text="steps int64, stored-at float64, values float64 (keys x steps), presence bits.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "block"], name="seriesblock_unique_block")]

    def __str__(self):
        return f"run {self.run_id} steps block {self.block}"
