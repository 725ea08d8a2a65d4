"""Replays of one module: the plan a confirm page shows, the request, the worker's claim and result.

A replay samples G alternatives for one stored call, and G more calls for each later call the stored
trajectory made: G x (1 + later calls) generations (a fork that stops earlier makes fewer). It runs on
the `gpu` queue, the queue runs train on, so it never jumps a GPU a run waits for; a user's queued and
running replays count against their queued-runs limit, and its tokens against the per-run token limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from trainer.rollouts.replay import MAX_GROUP_SIZE
from trainer.run.replay import AdapterChoice, choose_adapter
from webapp.celery import app as celery_app
from webapp.limits.services import limits_for_user
from webapp.runs.ingest.retention import rollouts_dropped
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.models import ModuleCall, Replay, Rollout, Run, StepMetric
from webapp.runs.services import run_directory, run_training_config

REPLAY_TASK = "workers.tasks.replay_module_task"
DEFAULT_GROUP_SIZE = 4


@dataclass
class ReplayPlan:
    """What the confirm page shows before a replay starts; `refusal` is why it cannot ("" when it can)."""

    run: Run
    call: ModuleCall
    group_size: int
    later_calls: int
    generations: int
    model: str
    adapter: AdapterChoice | None
    estimate_s: float | None
    estimate_basis: str
    refusal: str = ""
    calls: list[ModuleCall] = field(default_factory=list)

    @property
    def adapter_text(self) -> str:
        return self.adapter.describe() if self.adapter is not None else "none: the run's adapter is gone"

    def cost(self) -> dict[str, Any]:
        """The cost as the Replay row keeps it."""
        return {"generations": self.generations, "later_calls": self.later_calls, "group_size": self.group_size,
                "model": self.model, "adapter": self.adapter_text,
                "adapter_step": self.adapter.step if self.adapter is not None else None,
                "estimate_s": self.estimate_s, "estimate_basis": self.estimate_basis}


def policy_version(rollout: Rollout) -> int:
    """The updates the sampler that drew `rollout` had had: recorded by a run with a sampler process,
    else step - 1 (the adapter after the previous step's update)."""
    version = (rollout.sampling or {}).get("policy_version")
    return int(version) if isinstance(version, int) and version >= 0 else max(int(rollout.step) - 1, 0)


def rollout_calls(rollout: Rollout) -> list[ModuleCall]:
    """The rollout's calls in order, with their texts (two more queries when they live in a CallText row)."""
    calls = list(ModuleCall.objects.filter(rollout=rollout).order_by("position"))
    fill_call_texts(calls)
    return calls


def _estimate(run: Run, rollout: Rollout, generations: int) -> tuple[float | None, str]:
    """Seconds, and what the estimate stands on: the run's last replay's measured speed, else the
    sampling time its own step took for the calls it made."""
    last = (Replay.objects.filter(run=run, state=Replay.State.SUCCEEDED).exclude(result=None)
            .order_by("-finished_at").values_list("result", flat=True).first())
    if last and last.get("generations") and last.get("sample_s") is not None:
        per = float(last["sample_s"]) / max(int(last["generations"]), 1)
        load = float(last.get("load_s") or 0.0)
        return load + per * generations, (f"this run's last replay: {per:.2f} s per generation and "
                                          f"{load:.0f} s to load the model")
    metrics = (StepMetric.objects.filter(run=run, attempt=rollout.attempt, step=rollout.step)
               .values_list("metrics", flat=True).first()) or {}
    sample_s = metrics.get("system/sample_s")
    calls = ModuleCall.objects.filter(rollout__run=run, rollout__attempt=rollout.attempt, rollout__step=rollout.step).count()
    if isinstance(sample_s, (int, float)) and math.isfinite(sample_s) and calls:
        per = float(sample_s) / calls
        return per * generations, (f"step {rollout.step} sampled {calls} calls in {sample_s:.1f} s "
                                   f"({per:.2f} s each); loading the model comes on top")
    return None, "no measured sampling time is stored for this run"


def replay_plan(run: Run, call: ModuleCall, group_size: int, user=None) -> ReplayPlan:
    """The cost of replaying `call` with G = `group_size`, and why it cannot run if it cannot. `user`:
    the requester, whose limits apply (None: not checked)."""
    rollout = call.rollout
    later = ModuleCall.objects.filter(rollout=rollout, position__gt=call.position).count()
    generations = group_size * (1 + later)
    choice = None
    if not run.is_external and not run.on_slurm:
        choice = choose_adapter(run_directory(run.pk), policy_version(rollout),
                                final_step=run.current_step if run.state == Run.State.SUCCEEDED else None)
    estimate, basis = _estimate(run, rollout, generations)
    plan = ReplayPlan(run=run, call=call, group_size=group_size, later_calls=later, generations=generations,
                      model=str((run.config or {}).get("model", "")), adapter=choice, estimate_s=estimate,
                      estimate_basis=basis)
    plan.refusal = _refusal(plan, rollout, user)
    return plan


def _refusal(plan: ReplayPlan, rollout: Rollout, user) -> str:
    run = plan.run
    if run.is_external:
        return (f"This run was trained elsewhere ({run.origin_label}): Cohort holds neither its program nor its "
                "adapter, so it cannot replay a module of it.")
    if run.on_slurm:
        return "This run trained on a Slurm partition: its checkpoints are on the cluster, which replays do not reach."
    if rollout.teacher:
        return f"This rollout was sampled with the teacher program {rollout.teacher!r}; only the student's replay."
    dropped = rollouts_dropped(run, rollout.step)
    if dropped:
        return dropped
    if plan.adapter is None:
        return ("The run's adapter is gone: its folder holds no checkpoint and no final adapter any more "
                "(deleted, or pruned), so there is no policy to sample the replay with.")
    plan.calls = rollout_calls(rollout)
    if any(c.completion is None or (c.prompt in (None, "") and c.position <= plan.call.position) for c in plan.calls):
        return ("The texts of this trajectory are gone (the run's retention dropped them): a replay needs the "
                "earlier calls' prompts and completions.")
    if user is not None and not user.is_staff:
        limits = limits_for_user(user)
        waiting = Replay.objects.filter(requested_by=user, state__in=[Replay.State.QUEUED, Replay.State.RUNNING]).count()
        if waiting >= limits["queued_runs"]:
            return (f"You have {waiting} replay{'s' if waiting != 1 else ''} queued or running; your limit is "
                    f"{limits['queued_runs']} (the queued-runs limit). Wait for one to finish.")
        tokens = plan.generations * int((run.config or {}).get("max_new_tokens", 0) or 0)
        if tokens > limits["tokens_per_run"]:
            return f"This replay could generate {tokens:,} tokens; your limit per run is {limits['tokens_per_run']:,}."
    return ""


def group_size_error(raw: str | None) -> tuple[int, str]:
    """(G, "") from a form's value, or (0, the message) when it is not a whole number in 1..16."""
    if raw in (None, ""):
        return DEFAULT_GROUP_SIZE, ""
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return 0, f"G must be a whole number from 1 to {MAX_GROUP_SIZE}, not {raw!r}."
    if not 1 <= value <= MAX_GROUP_SIZE:
        return 0, f"G must be from 1 to {MAX_GROUP_SIZE}; {value} is out of bounds."
    return value, ""


def _original(plan: ReplayPlan) -> dict[str, Any]:
    rollout = plan.call.rollout
    return {"total_reward": rollout.total_reward, "rewards": dict(rollout.reward_components or {}),
            "failed": rollout.failed, "final_output": rollout.final_output,
            "calls": [{"position": c.position, "module": c.module, "completion": c.completion, "parsed_ok": c.parsed_ok}
                      for c in plan.calls if c.position >= plan.call.position]}


def replay_request(plan: ReplayPlan, user) -> Replay:
    """A queued replay of a plan without refusal; its task goes to the `gpu` queue after commit."""
    if plan.refusal:
        raise ValueError(plan.refusal)
    rollout = plan.call.rollout
    with transaction.atomic():
        replay = Replay.objects.create(
            run=plan.run, attempt=rollout.attempt, step=rollout.step, example_id=rollout.example_id,
            rollout_index=rollout.index, rollout_pk=rollout.pk, call_pk=plan.call.pk, position=plan.call.position,
            module=plan.call.module, group_size=plan.group_size, requested_by=user, cost=plan.cost(),
            adapter_step=plan.adapter.step if plan.adapter is not None else None, original=_original(plan))
        transaction.on_commit(lambda: _enqueue(replay))
    return replay


def _enqueue(replay: Replay) -> None:
    try:
        celery_app.send_task(REPLAY_TASK, args=[replay.pk], queue="gpu")
    except Exception as exc:  # the broker is away: the replay says so instead of waiting forever
        replay_finish(replay.pk, error=f"could not be queued: {exc}")


def replay_claim(replay_id: int) -> Replay | None:
    """The worker's claim: queued -> running (compare-and-set); None when it is not queued any more."""
    claimed = Replay.objects.filter(pk=replay_id, state=Replay.State.QUEUED).update(
        state=Replay.State.RUNNING, started_at=timezone.now())
    return Replay.objects.select_related("run", "run__task").get(pk=replay_id) if claimed else None


def replay_trainer_request(replay: Replay, *, seed: int | None = None) -> dict[str, Any]:
    """What `python -m trainer.run.replay` needs: the run's config with its data files, its folder, the
    stored calls up to the replayed one, G. Raises ValueError with words when the rollout is gone."""
    run = replay.run
    rollout = Rollout.objects.filter(pk=replay.rollout_pk, run=run).first()
    if rollout is None:
        raise ValueError("the replayed rollout is gone (the run's retention dropped its step)")
    calls = rollout_calls(rollout)
    if len(calls) <= replay.position or any(c.completion is None for c in calls[: replay.position + 1]):
        raise ValueError("the texts of the replayed trajectory are gone (the run's retention dropped them)")
    run_dir = run_directory(run.pk)
    return {
        "config": run_training_config(run, run_dir), "run_dir": str(run_dir), "example_id": rollout.example_id,
        "position": replay.position, "group_size": replay.group_size, "version": policy_version(rollout),
        "final_step": run.current_step if run.state == Run.State.SUCCEEDED else None,
        "seed": replay.pk if seed is None else seed,
        "calls": [{"module": c.module, "prompt": c.prompt or "", "completion": c.completion or ""}
                  for c in calls[: replay.position + 1]],
    }


def replay_finish(replay_id: int, *, result: dict[str, Any] | None = None, error: str = "") -> bool:
    """running (or queued) -> succeeded with `result`, or -> failed with `error`; False when it had ended."""
    changes: dict[str, Any] = {"finished_at": timezone.now()}
    if error or result is None:
        changes.update(state=Replay.State.FAILED, error=(error or "the replay returned no result")[:4000])
    else:
        adapter = result.get("adapter") or {}
        changes.update(state=Replay.State.SUCCEEDED, result=result, adapter_step=adapter.get("step"))
    return bool(Replay.objects.filter(pk=replay_id, state__in=[Replay.State.QUEUED, Replay.State.RUNNING])
                .update(**changes))
