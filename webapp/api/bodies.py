"""Rows to JSON-ready dicts (DRF's renderer encodes datetimes as ISO 8601). Plain functions rather
than DRF serializers: the API is read-only, and a step of 2,000 rollouts should not pay for field
objects per value."""

from __future__ import annotations

from webapp.runs.models import Group, Rollout, Run


def run_dict(run: Run) -> dict:
    """A run with its full config and a summary; `run` comes from `selectors.with_summary`."""
    return {
        "id": run.pk,
        "name": run.name,
        "state": run.state,
        "task": run.task.name,
        "program": run.task.program.name,
        "owner": run.owner.get_username(),
        "project": getattr(run, "project_name", None) or run.project.name,
        "origin": run.origin,
        "partition": run.partition,
        "config": run.config,
        "summary": {
            "current_step": run.current_step,
            "total_steps": run.total_steps,
            "best_reward": run.best_reward,
            "last_reward_mean": _number(getattr(run, "last_reward_mean", None)),
            "last_eval_reward_mean": _number(getattr(run, "last_eval_reward_mean", None)),
            "attempt": run.attempt,
            "created_at": run.created_at,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "error": run.error,
        },
    }


def _number(value):
    # A metric value as stored; a non-number (never written by the trainer) is shown as missing.
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def rollout_dict(rollout: Rollout, *, prompts: bool) -> dict:
    calls = []
    for call in rollout.calls.all():
        row = {
            "id": call.pk, "position": call.position, "module": call.module,
            "invocation_index": call.invocation_index, "completion": call.completion, "parsed_ok": call.parsed_ok,
            "specific_reward": call.specific_reward, "propagated_reward": call.propagated_reward,
            "advantage": call.advantage,
        }
        if prompts:
            row["prompt"] = call.prompt
            row["messages"] = call.messages
        calls.append(row)
    return {
        "id": rollout.pk, "attempt": rollout.attempt, "step": rollout.step, "index": rollout.index,
        "example_id": rollout.example_id, "parent": rollout.parent_id, "teacher": rollout.teacher,
        "fork_point": rollout.fork_point, "total_reward": rollout.total_reward,
        "reward_components": rollout.reward_components, "failed": rollout.failed, "error": rollout.error,
        "final_output": rollout.final_output, "calls": calls,
    }


def group_dict(group: Group) -> dict:
    return {
        "id": group.pk, "attempt": group.attempt, "step": group.step, "index": group.index, "module": group.module,
        "invocation_index": group.invocation_index, "kind": group.kind, "example_id": group.example_id,
        "size": group.size, "reward_mean": group.reward_mean, "reward_var": group.reward_var,
        "similarity": group.similarity, "distinct_advantages": group.distinct_advantages,
        "distinct_reward_vectors": group.distinct_reward_vectors,
        "members": [
            {
                "position": m.position, "call": m.call_id, "rollout_index": m.rollout_index, "reward": m.reward,
                "reward_components": m.reward_components, "advantage": m.advantage,
                "component_advantages": m.component_advantages, "padded": m.padded, "duplicated": m.duplicated,
            }
            for m in group.members.all()
        ],
    }
