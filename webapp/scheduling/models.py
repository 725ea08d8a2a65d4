"""Queue state kept on the database: staff "move to front" marks and the workers that reported in."""

from django.db import models

from webapp.runs.models import Run


class QueuePriority(models.Model):
    """A staff member moved this queued run to the front; the newest mark is served first."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="queue_priority")
    front_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"run {self.run_id} at front since {self.front_at:%Y-%m-%d %H:%M}"


class Worker(models.Model):
    """One Celery gpu-queue worker as it last reported itself (a CPU worker has no GPU fields)."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=200, blank=True)
    gpu_name = models.CharField(max_length=200, blank=True)
    gpu_memory_gb = models.FloatField(null=True, blank=True, help_text="Memory of each of its GPUs.")
    gpu_count = models.PositiveIntegerField(default=0, help_text="GPUs it may use: the most processes a run "
                                            "it takes may have (0: a CPU worker).")
    devices = models.CharField(max_length=100, blank=True, help_text="CUDA_VISIBLE_DEVICES at start.")
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name
