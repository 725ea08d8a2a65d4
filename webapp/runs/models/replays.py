"""A replay of one module of a stored trajectory (the inspector's *Replay this module*): MHGPO's fork
at one call of a rollout, sampled again with the run's adapter (trainer/rollouts/replay.py), with its
G alternatives, their later calls and rewards kept here. Imported by webapp/runs/models/."""

from django.conf import settings
from django.db import models


class Replay(models.Model):
    """One replay request and, once it ran, its result.

    State machine (the services' compare-and-set UPDATEs are the only writers,
    webapp/runs/replay/services.py)::

        queued ──> running ──> succeeded
          │           └──────> failed (error says why)
          └──> failed (could not be enqueued, or refused when claimed)

    A worker claims a queued replay with ``UPDATE ... WHERE state = 'queued'``, so a task delivered
    twice runs it once.
    """

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="replays")
    # The rollout and the call by value, not by foreign key: retention and run deletion remove rollouts and
    # calls with set-based DELETEs (webapp/runs/ingest/retention.py), which a constraint here would block;
    # a replay stays readable after its rollout's text is gone (`original` keeps what it was compared with).
    attempt = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    example_id = models.CharField(max_length=200)
    rollout_index = models.PositiveIntegerField(help_text="The rollout's position within its step.")
    rollout_pk = models.PositiveBigIntegerField(help_text="The replayed Rollout row (it may be gone since).")
    call_pk = models.PositiveBigIntegerField(help_text="The replayed ModuleCall row (it may be gone since).")
    position = models.PositiveIntegerField(help_text="The replayed call's position in its rollout.")
    module = models.CharField(max_length=100)
    group_size = models.PositiveIntegerField(help_text="G: how many alternatives are sampled.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                     related_name="replays")
    cost = models.JSONField(default=dict, help_text="What the confirm page showed: generations, model, adapter, "
                                                    "estimated seconds.")
    adapter_step = models.IntegerField(null=True, blank=True, help_text="The updates of the adapter sampled with.")
    original = models.JSONField(default=dict, help_text="The stored rollout's calls from the replayed one on and its "
                                                        "rewards, as they were when the replay was asked for.")
    result = models.JSONField(null=True, blank=True, help_text="The alternatives, their rewards and the spread.")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["run", "step", "example_id"], name="replay_run_step_example"),
                   models.Index(fields=["run", "call_pk"], name="replay_run_call"),
                   models.Index(fields=["state", "created_at"], name="replay_state_created")]

    def __str__(self):
        return f"replay of {self.module} (call {self.position}) of rollout {self.rollout_index} at step {self.step}"

    @property
    def done(self) -> bool:
        return self.state in (self.State.SUCCEEDED, self.State.FAILED)
