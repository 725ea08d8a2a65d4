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


class SlurmJob(models.Model):
    """The Slurm side of a run placed on a partition (webapp/scheduling/slurm): its batch job as the slurm
    queue's tick last read it from Slurm. One row per run: a resubmission (after a time limit without
    Slurm's requeue) takes the same row with the new job id; a requeue keeps the job id and counts up
    `restarts`. `state` and `reason` are Slurm's own words (PENDING, Resources)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="slurm_job")
    job_id = models.CharField(max_length=40, blank=True, help_text="Slurm's job id; empty until sbatch answered.")
    state = models.CharField(max_length=40, blank=True, help_text="Slurm's JobState, e.g. PENDING or TIMEOUT.")
    reason = models.CharField(max_length=200, blank=True, help_text="Slurm's Reason, e.g. Resources or Priority.")
    nodes = models.CharField(max_length=500, blank=True, help_text="The nodes the job runs on (NodeList).")
    restarts = models.PositiveIntegerField(default=0, help_text="Slurm's Restarts: how often it requeued the job.")
    submissions = models.PositiveIntegerField(default=0, help_text="Jobs sbatch accepted for this run.")
    start_step = models.PositiveIntegerField(default=0, help_text="The run's step when the newest job was submitted.")
    script = models.TextField(blank=True, help_text="The batch script of the newest submission.")
    message = models.TextField(blank=True, help_text="Why the run waits (Slurm unreachable) or what sbatch said.")
    token_hash = models.CharField(max_length=64, blank=True, help_text=(
        "SHA-256 of the job's token, which posts this one run's events; empty once revoked."))
    cancel_sent_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="When Slurm said the newest job ended.")
    checked_at = models.DateTimeField(null=True, blank=True, help_text="When Slurm last answered about it.")

    def __str__(self) -> str:
        return f"slurm job {self.job_id or '(not submitted)'} of run {self.run_id}"

    @property
    def ended(self) -> bool:
        return self.ended_at is not None
