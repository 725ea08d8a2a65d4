"""What a run records at each step below its metrics: rollouts, the module calls inside them, their
texts stored together (webapp/runs/ingest/texts.py), and module-level groups with their members
(docs/explanation/architecture.md "Data model"). Imported by webapp/runs/models/, where every run model is reachable."""

from django.db import models


class Rollout(models.Model):
    """One trajectory of the program on one example, at one step."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="rollouts")
    attempt = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    index = models.PositiveIntegerField(help_text="Position of the rollout within its step.")
    example_id = models.CharField(max_length=200)
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children",
        help_text="The rollout this one was forked from (MHGPO sampling trees).",
    )
    teacher = models.CharField(max_length=200, blank=True, help_text="Empty for the student program.")
    fork_point = models.CharField(max_length=100, blank=True, help_text="Agent at which it was forked.")
    sampling = models.JSONField(default=dict, help_text="Other sampling info (group id, temperature, ...).")
    final_output = models.JSONField(null=True, blank=True)
    reward_components = models.JSONField(default=dict)
    total_reward = models.FloatField(null=True, blank=True)
    failed = models.BooleanField(
        default=False, help_text="A module's output failed to parse, or the program or a reward raised (see error).")
    error = models.TextField(
        blank=True, help_text="What the program's or a reward's code raised: type, message, where, traceback tail.")

    class Meta:
        ordering = ["run", "attempt", "step", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt", "step", "index"], name="rollout_unique_index"),
        ]
        indexes = [
            models.Index(fields=["run", "step", "example_id"], name="rollout_step_example"),
            # One example across every step of a run (the history, the across-runs view); on PostgreSQL it
            # also holds what the part-ways table aggregates, so that reads the index alone, in order
            # (benchmarks/examples_compare.py: p95 295 -> 148 ms at the MMGRPO paper's scale).
            models.Index(fields=["run", "example_id", "step"], include=["attempt", "total_reward", "teacher"],
                         name="rollout_example_cover"),
        ]

    def __str__(self):
        return f"rollout {self.index} of {self.example_id} at step {self.step}"


class ModuleCall(models.Model):
    """One module invocation inside a rollout, in call order."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="calls")
    position = models.PositiveIntegerField(help_text="Order of the call within its rollout.")
    module = models.CharField(max_length=100)
    invocation_index = models.PositiveIntegerField(help_text="How many earlier calls of this module.")
    # NULL prompt and completion (not ""; a completion can be empty): the text lives in the example's
    # CallText row (webapp/runs/ingest/texts.py).
    prompt = models.TextField(null=True, blank=True,  # noqa: DJ001
                              help_text="What the model saw: the rendered chat template or the raw text.")
    messages = models.JSONField(null=True, blank=True,
                                help_text="The chat messages the prompt was rendered from; empty for raw text.")
    completion = models.TextField(null=True, blank=True)  # noqa: DJ001
    parsed_ok = models.BooleanField(default=True)
    specific_reward = models.FloatField(default=0.0, help_text="Agent-specific reward (e.g. format penalty).")
    propagated_reward = models.FloatField(null=True, blank=True)
    advantage = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["rollout", "position"]
        constraints = [
            # Also the index for "a rollout's calls in order".
            models.UniqueConstraint(fields=["rollout", "position"], name="modulecall_unique_position"),
        ]

    def __str__(self):
        return f"{self.module}[{self.invocation_index}]"


class CallText(models.Model):
    """The prompts, chat messages and completions of every module call of one example at one step,
    compressed together (webapp/runs/ingest/texts.py); the calls' own text columns are then NULL."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="call_texts")
    attempt = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    example_id = models.CharField(max_length=200, blank=True)
    data = models.BinaryField(help_text="The calls' texts, zlib-compressed JSON.")  # codec: webapp/runs/ingest/texts.py
    tokens = models.BinaryField(null=True, blank=True, help_text=(
        "The calls' per-token details (pieces, log-probs, entropy, forks' alternatives), zlib-compressed; "
        "NULL when the run stored none."))  # codec: webapp/runs/ingest/tokens.py

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt", "step", "example_id"], name="calltext_unique_example"),
        ]

    def __str__(self):
        return f"texts of {self.example_id} at step {self.step}"


class Group(models.Model):
    """One module-level group of a step: the calls whose advantages were normalized together."""

    class Kind(models.TextChoices):
        HOMOGENEOUS = "homogeneous"
        HETEROGENEOUS = "heterogeneous"

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="groups")
    attempt = models.PositiveIntegerField()
    step = models.PositiveIntegerField()
    index = models.PositiveIntegerField(help_text="Position of the group within its step.")
    module = models.CharField(max_length=100)
    invocation_index = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.HOMOGENEOUS)
    example_id = models.CharField(max_length=200, blank=True)
    size = models.PositiveIntegerField()
    reward_mean = models.FloatField(null=True, blank=True)
    reward_var = models.FloatField(null=True, blank=True)
    similarity = models.FloatField(null=True, blank=True, help_text="Mean pairwise token F1 of completions.")
    distinct_advantages = models.PositiveIntegerField(null=True, blank=True)
    distinct_reward_vectors = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "attempt", "step", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt", "step", "index"], name="group_unique_index"),
        ]
        indexes = [
            models.Index(fields=["run", "step", "module"], name="group_step_module"),
            models.Index(fields=["run", "example_id", "step"], name="group_example_step"),  # the history
        ]

    def __str__(self):
        return f"{self.module}[{self.invocation_index}] group {self.index} at step {self.step}"


class GroupMember(models.Model):
    """A member of a group: a module call, possibly a padding copy (MMGRPO PadGroups)."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="members")
    position = models.PositiveIntegerField()
    call = models.ForeignKey(ModuleCall, on_delete=models.CASCADE, related_name="memberships")
    padded = models.BooleanField(default=False, help_text="Added by PadGroups `fill` (not sampled here).")
    duplicated = models.BooleanField(default=False, help_text="A repeat chosen by up-sampling.")
    reward = models.FloatField(null=True, blank=True)
    reward_components = models.JSONField(default=dict)
    advantage = models.FloatField(null=True, blank=True)
    component_advantages = models.JSONField(
        default=dict, help_text="Per-reward normalized advantages (GDPO Eq. 4) before the weighted sum."
    )

    class Meta:
        ordering = ["group", "position"]
        constraints = [
            models.UniqueConstraint(fields=["group", "position"], name="groupmember_unique_position"),
        ]

    def __str__(self):
        return f"member {self.position} of group {self.group_id}"
