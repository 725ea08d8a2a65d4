"""A run: its config, its state machine and what it reports (docs/explanation/architecture.md "Data model").

A run's training events are keyed by (run, attempt, step): a resumed run is attempt n+1, and
re-shipping a step that is already stored is a no-op (idempotent ingest).
"""

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.dispatch import Signal

from webapp.runs.models.catalog import Task

# Sent (kwarg `run`) after the commit of every successful `Run.transition`; alerts listen to it
# (webapp/alerts/apps.py), so the run state machine needs no knowledge of who watches it.
run_state_changed = Signal()
# Sent (kwargs `run`, `rows`: the new StepMetric rows) after the commit of every ingest that stored
# steps (webapp/runs/ingest/store.py); alert rules on step metrics listen to it.
steps_stored = Signal()


class InvalidTransition(Exception):
    """A run was asked to move between two states the state machine does not connect."""


class Run(models.Model):
    """One training run.

    State machine (the only place transitions are defined; `transition` enforces it)::

        queued ──> running ──> succeeded
          │           │──────> failed
          │           │──────> interrupted ──> queued (resume, attempt n+1)
          │           └──────> cancelling ──> cancelled | succeeded | failed
          └──> cancelled | failed (could not be enqueued)
        interrupted, failed ──> queued (resume) ; interrupted ──> cancelled | failed
        queued, cancelling ──> pruned (a sweep's pruner stopped it: webapp/sweeps)

    `running -> interrupted` is the reaper's move when the heartbeat goes stale (worker lost).
    `cancelling` is cooperative: the trainer stops at the next step boundary. A sweep's pruner stops a
    run the same way, with `pruned_reason` set, so the stop ends `pruned` instead of `cancelled`.
    `interrupted -> failed` is a sweep giving up on a trial whose worker was lost (it is not resumed).

    A run trained elsewhere (`origin` other than "cohort", webapp/runs/ingest/external.py) is created
    `running` and goes to succeeded or failed when its trainer says so through the API: Cohort has no
    worker to cancel, reap or resume it. When its trainer posts nothing for COHORT_EXTERNAL_STALE_AFTER
    (killed, its machine gone) it is `lost`; its next post makes it `running` again, and its finish
    still ends it (webapp/runs/ingest/lost.py).
    """

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        CANCELLING = "cancelling"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        INTERRUPTED = "interrupted"
        LOST = "lost"  # a run trained elsewhere whose trainer stopped posting
        PRUNED = "pruned"  # stopped early by its sweep's pruner (webapp/sweeps), reason in pruned_reason

    TRANSITIONS: dict[str, frozenset[str]] = {
        State.QUEUED: frozenset({State.RUNNING, State.CANCELLED, State.FAILED, State.PRUNED}),
        State.RUNNING: frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLING, State.INTERRUPTED, State.LOST}),
        State.LOST: frozenset({State.RUNNING, State.SUCCEEDED, State.FAILED}),
        State.CANCELLING: frozenset({State.CANCELLED, State.SUCCEEDED, State.FAILED, State.PRUNED}),
        State.INTERRUPTED: frozenset({State.QUEUED, State.CANCELLED, State.FAILED}),
        State.FAILED: frozenset({State.QUEUED}),
        State.SUCCEEDED: frozenset(),
        State.CANCELLED: frozenset(),
        State.PRUNED: frozenset(),
    }
    ACTIVE_STATES = frozenset({State.QUEUED, State.RUNNING, State.CANCELLING})
    ORIGIN_COHORT = "cohort"
    ORIGIN_LABELS = {"trl": "TRL", "sdk": "SDK", "wandb": "W&B", "tensorboard": "TensorBoard", "verl": "verl"}  # a known trainer's badge

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    # RESTRICT: a project with runs stays; deleting a user deletes their personal project and its runs together.
    project = models.ForeignKey("projects.Project", on_delete=models.RESTRICT, related_name="runs",
                                help_text="Who sees the run: the project's members (docs/explanation/architecture.md \"A lab's runs\").")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="runs")
    name = models.CharField(max_length=200, blank=True)
    config = models.JSONField(help_text="The validated trainer.config.RunConfig, as JSON; for a run trained "
                                        "elsewhere, its trainer's own settings as the client sent them.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    attempt = models.PositiveIntegerField(default=1)
    current_step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    best_reward = models.FloatField(null=True, blank=True)
    last_reward = models.FloatField(null=True, blank=True, help_text="reward/mean of the newest stored step.")
    last_eval_reward = models.FloatField(
        null=True, blank=True, help_text="eval/reward/mean of the newest stored step that evaluated.")
    last_seq = models.PositiveBigIntegerField(default=0, help_text="Highest StepMetric.seq stored.")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="Celery name of the claiming worker, e.g. gpu0@node7.")
    checkpoint_dir = models.CharField(max_length=1000, blank=True)
    error = models.TextField(blank=True)
    pruned_reason = models.TextField(blank=True, help_text=(
        "Why its sweep's pruner stopped it (set with the stop request; the run ends `pruned`)."))
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    tags = models.JSONField(default=list, blank=True, help_text="Short lowercase labels, e.g. ['baseline', 'gdpo'].")
    notes = models.TextField(blank=True)
    archived_at = models.DateTimeField(null=True, blank=True, help_text="Hidden from the runs table unless asked.")
    gpus = models.PositiveSmallIntegerField(default=0, help_text="CUDA devices the trainer used (0: CPU).")
    prompt_optimization = models.JSONField(default=dict, blank=True, help_text=(
        "Phase 1 of a run that optimizes prompts first: optimizer, phase, trials (score per evaluation) and "
        "the chosen instructions and demos per module."))  # written by webapp/runs/ingest/prompt_phase.py
    storage_bytes = models.BigIntegerField(
        default=0, help_text="Stored size of the run's steps, rollouts, calls and groups.")  # webapp/runs/ingest/retention.py
    origin = models.CharField(max_length=40, default=ORIGIN_COHORT, help_text=(
        "Who trains it: 'cohort' (Cohort's own worker) or the trainer that logs it through the API ('trl', 'sdk')."))
    external_id = models.CharField(max_length=64, blank=True, help_text=(
        "The logging client's id for the run, so a retried create makes one run; unique per owner when set."))
    # Where it trains (webapp/scheduling/slurm): empty, on this server's workers; else a Slurm partition,
    # whose job the slurm queue's tick submits and follows instead of a worker claiming the run.
    partition = models.CharField(max_length=100, blank=True, help_text=(
        "The Slurm partition the run is submitted to; empty: this server's workers."))
    time_limit_min = models.PositiveIntegerField(null=True, blank=True, help_text=(
        "The Slurm job's time limit in minutes (each job of the run; a requeue starts it again)."))

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="run_owner_created"),
            # The runs table of one project, newest first (the project switcher, `project:NAME`).
            models.Index(fields=["project", "-created_at", "-id"], name="run_project_created"),
            models.Index(fields=["state", "heartbeat_at"], name="run_state_heartbeat"),
            # The runs table's orders (selectors.run_ordering), so a page of 50 is read in index order
            # instead of sorting every visible run; the id breaks ties. Reward columns sorted high to
            # low (NULLS LAST) have PostgreSQL-only indexes in migration 0006 (SQLite cannot index NULLS LAST).
            models.Index(fields=["-created_at", "-id"], name="run_created"),
            models.Index(fields=["name", "id"], name="run_name"),
            models.Index(fields=["best_reward", "id"], name="run_best_reward"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(attempt__gte=1), name="run_attempt_positive"),
            models.UniqueConstraint(fields=["owner", "external_id"], condition=~Q(external_id=""),
                                    name="run_unique_external_id"),
        ]

    def __str__(self):
        return self.name or f"run {self.pk}"

    @classmethod
    def check_transition(cls, source: str, target: str) -> None:
        if target not in cls.TRANSITIONS.get(source, frozenset()):
            allowed = ", ".join(sorted(cls.TRANSITIONS.get(source, ()))) or "none (final state)"
            raise InvalidTransition(f"A run cannot go from {source!r} to {target!r}; from {source!r}: {allowed}.")

    def transition(self, target: str, **changes) -> bool:
        """Move to `target` with a compare-and-set UPDATE on the current state.

        Raises InvalidTransition when the state machine forbids the move. Returns False (and
        changes nothing) when another process moved the run first; True after a successful move,
        with this instance refreshed.
        """
        source = self.state
        self.check_transition(source, target)
        updated = Run.objects.filter(pk=self.pk, state=source).update(state=target, **changes)
        self.refresh_from_db()
        if updated == 1:
            transaction.on_commit(lambda: run_state_changed.send(sender=Run, run=self), robust=True)
        return updated == 1

    @property
    def on_slurm(self) -> bool:
        return bool(self.partition)

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE_STATES

    @property
    def is_external(self) -> bool:
        """Trained outside Cohort and logged through the API (webapp/runs/ingest/external.py)."""
        return self.origin != self.ORIGIN_COHORT

    @property
    def origin_label(self) -> str:
        return self.ORIGIN_LABELS.get(self.origin, self.origin)
