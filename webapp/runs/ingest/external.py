"""Runs trained elsewhere (docs/explanation/architecture.md "Runs trained elsewhere"): a trainer outside Cohort (TRL's
GRPOTrainer through cohort/trl.py, a plain PyTorch loop through the SDK) starts a run, logs its steps
and finishes it through the logging API (webapp/api/logging_views.py).

Such a run is a Run like any other: the same owner, task, StepMetric, Rollout, ModuleCall and Group
rows, written by the trainer's own idempotent ingest (`step_events_ingest`, with its storage count and
retention), so every page, export, alert and the read API show it unchanged. What differs:

- it is created `running` (no queue, no worker) and ends when its trainer says so, succeeded or
  failed; Cancel and Resume are refused (`run_cancel`, `run_resume`) and the reaper skips it, since
  Cohort has no worker to stop, watch or restart it. Its heartbeat is its trainer's last post;
- its config is the trainer's own settings as the client sent them (free JSON, never a RunConfig);
- its task is any task by name: an existing one (a TRL run of `toy_format` sits beside Cohort's runs
  of it), or one created for it on the EXTERNAL_PROGRAM, which the launch form never offers.

A logged step becomes the trainer's step event: each rollout one trajectory of one call, each (module,
group) of a step one module-level group. The groups' statistics and the step's group metrics are the
trainer's functions (trainer/algorithms/metrics.py) under the trainer's keys, so the charts read the
same for a run trained anywhere. Idempotent by step number: a retried post stores nothing twice.
A rollout's per-token arrays (tokens, logprobs, entropies, checked by webapp/api/logging_input.py)
become its call's "tokens" ({"pieces", "sampler", "entropy"}), as the trainer's calls carry theirs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.utils import timezone

from trainer.algorithms.metrics import group_reward_variance, intra_group_similarity, zero_variance_share
from trainer.run import events as contract
from webapp.projects.services import personal_project_ensure
from webapp.runs.ingest.lost import run_reopen
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.launch.limits import limits_check_external
from webapp.runs.models import EXTERNAL_PROGRAM, Program, Run, StepMetric, Task, run_state_changed

DEFAULT_MODULE = "completion"  # TRL's one module: the policy's completion of a prompt
FINAL_STATES = (Run.State.SUCCEEDED.value, Run.State.FAILED.value)  # where its trainer may end it
OPEN_STATES = (Run.State.RUNNING, Run.State.LOST)  # a lost run's trainer may post again (webapp/runs/ingest/lost.py)
MAX_ERROR_CHARS = 10_000
# Intra-group similarity compares every pair of a group's completions: a 4,096-rollout group would be 8.4
# million token F1s in one request. A larger group is measured on this many members, evenly spaced (the
# trainer's groups, and TRL's num_generations, are 4 to 16: measured whole).
SIMILARITY_MAX_MEMBERS = 32


class ExternalConflict(Exception):
    """The run's origin or state does not allow the request (the API answers 409)."""


class ExternalLimit(Exception):
    """The owner's launch limits refuse one more active run (the API answers 400)."""


# --- start and finish --------------------------------------------------------------------------


def external_run_start(owner, *, client_id: str, task: str, name: str = "", config: dict | None = None,
                       tags: list[str] | None = None, notes: str = "", origin: str = "sdk",
                       total_steps: int = 0, project=None) -> tuple[Run, bool]:
    """The owner's run of `client_id`, created running in `project` (None: the owner's personal project)
    when there is none yet: (run, created).

    A retried create (the client never saw the first answer) gets the first run, also when the two
    race: the unique (owner, external_id) decides and the loser reads the winner's row. The active-run
    limit is checked only before creating, so a retry of a created run is answered even at the limit.
    """
    existing = _run_of_client(owner, client_id)
    if existing is not None:
        if existing.origin in contract.IMPORT_ORIGINS:  # imported again: the source's newer reading wins
            _imported_run_update(existing, name=name, config=config, notes=notes, total_steps=total_steps)
        return existing, False
    refused = limits_check_external(owner)
    if refused:
        raise ExternalLimit(" ".join(error.message for error in refused))
    now = timezone.now()
    try:
        with transaction.atomic():
            run = Run.objects.create(
                owner=owner, project=project or personal_project_ensure(owner), task=_task_named(task, owner), name=name, config=dict(config or {}),
                state=Run.State.RUNNING, started_at=now, heartbeat_at=now, total_steps=total_steps,
                tags=list(tags or []), notes=notes, origin=origin, external_id=client_id)
    except IntegrityError:
        existing = _run_of_client(owner, client_id)
        if existing is None:
            raise
        return existing, False
    return run, True


def _imported_run_update(run: Run, *, name: str, config: dict | None, notes: str, total_steps: int) -> None:
    fields = {"name": name, "config": dict(config or {}), "notes": notes, "total_steps": max(total_steps, run.total_steps)}
    Run.objects.filter(pk=run.pk).update(**fields)
    for key, value in fields.items():
        setattr(run, key, value)


def imported_run_reopen(run: Run) -> bool:
    """succeeded | failed -> running for a run imported from another trainer's files when a new step of
    its source arrives (the source grew since the last import, or is being followed again). Such a run
    is a copy of its source, not a training Cohort ran, so its end is the source's latest word; Cohort's
    own runs never leave a final state. True if this call reopened it."""
    if run.origin not in contract.IMPORT_ORIGINS or run.state not in FINAL_STATES:
        return False
    reopened = Run.objects.filter(pk=run.pk, state=run.state).update(
        state=Run.State.RUNNING, finished_at=None, error="", heartbeat_at=timezone.now()) == 1
    run.refresh_from_db()
    if reopened:
        transaction.on_commit(lambda: run_state_changed.send(sender=Run, run=run), robust=True)
    return reopened


def _run_of_client(owner, client_id: str) -> Run | None:
    return Run.objects.filter(owner=owner, external_id=client_id).first()


def _task_named(name: str, owner) -> Task:
    """The task of this name; when there is none, a new one on the program of runs trained elsewhere.
    That program is in no trainer registry: created inactive, the catalog sync leaves it so, and the
    launch form offers neither it nor its tasks (webapp/runs/selectors.py `launchable_tasks`)."""
    task = Task.objects.filter(name=name).first()
    if task is not None:
        return task
    program, _ = Program.objects.get_or_create(name=EXTERNAL_PROGRAM, defaults={
        "title": "Trained elsewhere", "modules": [DEFAULT_MODULE], "is_active": False,
        "description": "Runs trained outside Cohort (TRL, a PyTorch loop) and logged through the API."})
    task, _ = Task.objects.get_or_create(name=name, defaults={
        "title": name, "program": program, "created_by": owner,
        "description": "Created by a run trained elsewhere and logged through the API."})
    return task


def external_run_finish(run: Run, *, state: str, error: str = "") -> Run:
    """running -> succeeded | failed, as its trainer says. Finishing again with the same state answers
    the run unchanged (a retried request); another final state is an ExternalConflict."""
    _check_external(run, "finished through the API")
    if state not in FINAL_STATES:
        raise ValueError(f"state must be one of {', '.join(FINAL_STATES)}, not {state!r}.")
    for _ in range(3):  # a lost compare-and-set means the run moved meanwhile: read it again
        run.refresh_from_db()
        if run.state == state:
            return run
        if run.state not in OPEN_STATES:
            raise ExternalConflict(f"Run {run.pk} already ended {run.state}; it cannot end {state} as well.")
        if run.transition(state, error=error[:MAX_ERROR_CHARS], finished_at=timezone.now()):
            return run
    raise ExternalConflict(f"Run {run.pk} kept changing state; try again.")


def _check_external(run: Run, what: str) -> None:
    if not run.is_external:
        raise ExternalConflict(f"Run {run.pk} is trained by Cohort's worker: only a run trained elsewhere is "
                               f"{what}.")


# --- steps -------------------------------------------------------------------------------------


def external_steps_log(run: Run, steps: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Stores the logged steps that are not stored yet; {"stored": [...], "skipped": [...]} (step numbers).

    `steps` are checked already (webapp/api/logging_input.py): each {"step", "metrics", "rollouts"}; of
    one step number given twice, the first is stored (a retry within the post). A step already stored is skipped whatever the run's state, so a retry after finishing succeeds;
    a new step of a run that is no longer running (nor lost: that reopens it) is an ExternalConflict,
    and so is any step of a run Cohort trains. Every call marks the run alive (its heartbeat). Watchers of the run page get
    a step notice per stored step after the commit, as from the worker.
    """
    _check_external(run, "logged step by step")
    numbers = [step["step"] for step in steps]
    stored = _stored_steps(run, numbers)
    fresh = list({step["step"]: step for step in reversed(steps) if step["step"] not in stored}.values())[::-1]
    _check_running(run, fresh)
    events = [step_event(step, attempt=run.attempt) for step in fresh]  # the costly part: before the lock
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if fresh:
            imported_run_reopen(locked)
        if locked.state not in OPEN_STATES:  # it ended meanwhile: only steps another post stored are fine
            stored = _stored_steps(locked, numbers)
            _check_running(locked, [step for step in fresh if step["step"] not in stored])
        if fresh:
            run_reopen(locked)  # a lost run's trainer is back
        rows = step_events_ingest(locked, events)
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now())
    written = sorted(row.step for row in rows)
    return {"stored": written, "skipped": sorted(set(numbers) - set(written))}


def _stored_steps(run: Run, numbers: list[int]) -> set[int]:
    return set(StepMetric.objects.filter(run=run, attempt=run.attempt, step__in=numbers)
               .values_list("step", flat=True))


def _check_running(run: Run, fresh: list[dict[str, Any]]) -> None:
    if fresh and run.state not in OPEN_STATES and run.origin not in contract.IMPORT_ORIGINS:
        numbers = ", ".join(str(step["step"]) for step in fresh[:10]) + (", ..." if len(fresh) > 10 else "")
        raise ExternalConflict(f"Run {run.pk} is {run.state}: it takes no new step (not stored: {numbers}). "
                               "A step it already stored is answered as skipped.")


@dataclass
class _Group:
    """A module-level group of one logged step and the statistics the step's metrics are made of."""

    module: str
    rewards: np.ndarray  # (members,) each member's reward, NaN when unknown
    variance: float  # unbiased, NaN left out; NaN below two known rewards (group_reward_variance)
    similarity: float  # intra_group_similarity of the completions; NaN below two
    event: dict[str, Any]


def step_event(step: dict[str, Any], *, attempt: int) -> dict[str, Any]:
    """The trainer's step event (what `StepRows.add_step` reads) of one logged step: each rollout one
    trajectory of one call, each (module, group) one group, and the step's metrics completed with those
    the trainer derives from its rollouts (a key the client sent is kept as sent)."""
    trajectories = [_trajectory(index, rollout) for index, rollout in enumerate(step.get("rollouts") or [])]
    members: dict[tuple[str, str], list[int]] = {}
    for index, trajectory in enumerate(trajectories):
        if trajectory["group_id"] is not None:
            members.setdefault((trajectory["calls"][0]["module"], trajectory["group_id"]), []).append(index)
    groups = [_group(trajectories, indexes) for indexes in members.values()]
    metrics = {**derived_metrics(trajectories, groups), **(step.get("metrics") or {})}
    return {"type": "step", "attempt": attempt, "step": step["step"], "metrics": metrics,
            "rollouts": trajectories, "groups": [group.event for group in groups], "spans": step.get("spans") or []}


def _trajectory(index: int, rollout: dict[str, Any]) -> dict[str, Any]:
    rewards = dict(rollout.get("rewards") or {})
    known = [value for value in rewards.values() if value is not None]
    # No reward sent: the sum of the known components (none known: unknown).
    reward = rollout["reward"] if "reward" in rollout else (contract.finite_or_none(float(sum(known))) if known else None)
    group = rollout.get("group")
    group_id = None if group is None else str(group)
    prompt, messages = _prompt_text(rollout["prompt"])
    call = {"call_id": f"c{index}", "module": rollout.get("module") or DEFAULT_MODULE, "invocation_index": 0,
            "prompt": prompt, "messages": messages, "completion": _completion_text(rollout["completion"]),
            "parsed_ok": True, "specific_reward": 0.0, "propagated_reward": reward,
            "advantage": rollout.get("advantage")}
    tokens = call_tokens(rollout)
    if tokens is not None:
        call["tokens"] = tokens
    return {"trajectory_id": f"t{index}", "example_id": rollout.get("example_id") or group_id or str(index),
            "group_id": group_id, "rewards": rewards, "reward": reward, "failed": False, "final_output": None,
            "calls": [call]}


# A rollout's per-token array -> its key in a call's "tokens" (the trainer's ModuleCall.tokens).
TOKEN_KEYS = {"logprobs": "sampler", "entropies": "entropy"}


def call_tokens(rollout: dict[str, Any]) -> dict[str, list] | None:
    """The call's per-token details of a checked rollout: {"pieces", "sampler", "entropy"}, the keys of
    the arrays it sent (an array of another length than its tokens is left out); None without tokens."""
    pieces = rollout.get("tokens")
    if not pieces:
        return None
    tokens: dict[str, list] = {"pieces": list(pieces)}
    for key, name in TOKEN_KEYS.items():
        values = rollout.get(key)
        if values is not None and len(values) == len(pieces):
            tokens[name] = list(values)
    return tokens


def _prompt_text(prompt: str | list[dict[str, str]]) -> tuple[str, list[dict[str, str]] | None]:
    """(the text the inspector shows, the chat messages or None): messages are shown one per block."""
    if isinstance(prompt, str):
        return prompt, None
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in prompt), [dict(m) for m in prompt]


def _completion_text(completion: str | list[dict[str, str]]) -> str:
    if isinstance(completion, str):
        return completion
    return "\n\n".join(m["content"] for m in completion)


def _group(trajectories: list[dict[str, Any]], indexes: list[int]) -> _Group:
    """One group with the trainer's statistics (trainer.algorithms.metrics.annotate_group_stats: mean,
    unbiased variance, NaN left out; intra-group similarity)."""
    chosen = [trajectories[i] for i in indexes]
    calls = [t["calls"][0] for t in chosen]
    rewards = np.asarray([math.nan if t["reward"] is None else t["reward"] for t in chosen], dtype=float)
    with np.errstate(all="ignore"):  # rewards near the float limit: an infinite statistic is stored as null
        variance = float(group_reward_variance(rewards, np.zeros(len(chosen), dtype=np.intp))[0])
        known = rewards[~np.isnan(rewards)]
        mean = float(known.mean()) if known.size else math.nan
    similarity = intra_group_similarity(_evenly_spaced([c["completion"] for c in calls], SIMILARITY_MAX_MEMBERS))
    event = {
        "group_id": f"{calls[0]['module']}/{chosen[0]['group_id']}", "module": calls[0]["module"],
        "invocation_index": 0, "example_id": chosen[0]["example_id"],
        # The trainer's rule (trainer.algorithms.groups.ModuleGroup.kind): one prompt for all is homogeneous.
        "kind": "homogeneous" if len({c["prompt"] for c in calls}) <= 1 else "heterogeneous",
        "reward_mean": contract.finite_or_none(mean), "reward_var": contract.finite_or_none(variance), "similarity": contract.finite_or_none(similarity),
        "members": [{"trajectory_id": t["trajectory_id"], "call_id": c["call_id"], "reward": t["reward"],
                     "reward_components": t["rewards"], "advantage": c["advantage"]} for t, c in zip(chosen, calls, strict=True)],
    }
    return _Group(calls[0]["module"], rewards, variance, similarity, event)


def _evenly_spaced(items: list[str], most: int) -> list[str]:
    if len(items) <= most:
        return items
    return [items[round(i * (len(items) - 1) / (most - 1))] for i in range(most)]


def derived_metrics(trajectories: list[dict[str, Any]], groups: list[_Group]) -> dict[str, float]:
    """The metrics the trainer computes from a step's rollouts (trainer/algorithms/scoring.py
    `BatchScorer.metrics` and metrics.module_group_metrics), under its keys: reward/mean and
    reward/<name> (means of the known values), zero_var_share over every group, and per module
    group_var/<module> (mean group variance), zero_var_share/<module> and similarity/<module>; where
    rollouts sent entropies, tokens/entropy/mean (the mean over all their tokens; per module too,
    tokens/entropy/mean/<module>, when the step's rollouts name several modules).
    NaN where nothing is known (stored as null). None without rollouts."""
    if not trajectories:
        return {}
    metrics: dict[str, float] = {}
    for name in dict.fromkeys(name for t in trajectories for name in t["rewards"]):
        metrics[f"reward/{name}"] = _mean([t["rewards"].get(name) for t in trajectories])
    metrics["reward/mean"] = _mean([t["reward"] for t in trajectories])  # a reward named "mean" loses
    metrics.update(_entropy_metrics(trajectories))
    if not groups:
        return metrics
    totals = np.concatenate([g.rewards for g in groups])  # (members,)
    ids = np.repeat(np.arange(len(groups)), [g.rewards.size for g in groups])  # (members,)
    metrics["zero_var_share"] = zero_variance_share(totals, ids)
    modules = np.asarray([g.module for g in groups])  # (groups,)
    for module in dict.fromkeys(g.module for g in groups):
        mine = modules == module
        metrics[f"group_var/{module}"] = _nanmean([g.variance for g, m in zip(groups, mine, strict=True) if m])
        metrics[f"zero_var_share/{module}"] = zero_variance_share(totals[mine[ids]], ids[mine[ids]])
        metrics[f"similarity/{module}"] = _nanmean([g.similarity for g, m in zip(groups, mine, strict=True) if m])
    return metrics


def _entropy_metrics(trajectories: list[dict[str, Any]]) -> dict[str, float]:
    """tokens/entropy/mean over every token with an entropy (the trainer's masked mean: each token
    counts once, whatever its completion's length), and per module where the step has several."""
    sums: dict[str, list[float]] = {}  # module -> [sum, count]
    modules = set()
    for t in trajectories:
        for call in t["calls"]:
            modules.add(call["module"])
            entropy = (call.get("tokens") or {}).get("entropy")
            if entropy:
                total = sums.setdefault(call["module"], [0.0, 0])
                total[0] += sum(entropy)  # finite values, but their sum may not be: a NaN mean (null)
                total[1] += len(entropy)
    if not sums:
        return {}
    metrics = {"tokens/entropy/mean": _finite_mean(sum(s for s, _ in sums.values()), sum(n for _, n in sums.values()))}
    if len(modules) > 1:
        metrics.update({f"tokens/entropy/mean/{module}": _finite_mean(s, n) for module, (s, n) in sums.items()})
    return metrics


def _finite_mean(total: float, count: int) -> float:
    return total / count if math.isfinite(total) else math.nan


def _mean(values: list[float | None]) -> float:
    known = [v for v in values if v is not None]
    with np.errstate(all="ignore"):
        return float(np.mean(known)) if known else math.nan


def _nanmean(values: list[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    with np.errstate(all="ignore"):
        return float(np.mean(known)) if known else math.nan
