"""Step events (as the trainer writes them) are stored once, with dense seqs, in bulk."""

import itertools

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.webapp.runs.factories import make_run
from trainer.advantages import grpo_advantages
from trainer.grouping import assign_advantages, group_reward_arrays
from trainer.sampling import LinearChain, fork_on_first, mhgpo_groups, propagate_rewards
from webapp.runs.ingest import step_events_ingest
from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run, StepMetric

pytestmark = pytest.mark.django_db


def mhgpo_step_event(step: int, *, questions: int = 2, group_size: int = 3, attempt: int = 1) -> dict:
    """A real FoF step of a 3-agent chain: shared prefix-free forks, propagated rewards, groups."""
    counter = itertools.count()
    program = LinearChain(("rewriter", "reranker", "answerer"))

    def generate(agent, prompts):
        return [f"{agent} says {next(counter) % 4}" if agent != "reranker" or i % 5 else "" for i, _ in enumerate(prompts)]

    trajectories = fork_on_first(program, [f"question {q}" for q in range(questions)], group_size=group_size,
                                 generate=generate, example_ids=[f"q{q}" for q in range(questions)])
    for i, t in enumerate(trajectories):
        t.rewards = {"f1": None if t.failed else (i % 3) / 2}
        t.total_reward = -1.0 if t.failed else (i % 3) / 2
    propagate_rewards(trajectories)
    groups = mhgpo_groups(trajectories)
    rewards, ids = group_reward_arrays(groups, source="call")
    assign_advantages(groups, grpo_advantages(rewards, ids))
    return {"type": "step", "attempt": attempt, "step": step,
            "metrics": {"reward/mean": float(np.mean([t.reward for t in trajectories])), "kl": float("nan")},
            "rollouts": [t.to_dict() for t in trajectories], "groups": [g.to_dict() for g in groups]}


def test_a_step_is_stored_with_rollouts_calls_and_groups(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1)
    new = step_events_ingest(run, [event])
    assert [(m.step, m.seq) for m in new] == [(1, 1)]
    assert StepMetric.objects.get(run=run).metrics["kl"] is None  # NaN is stored as null
    assert Rollout.objects.filter(run=run).count() == len(event["rollouts"]) == 6
    stored_calls = ModuleCall.objects.filter(rollout__run=run).count()
    assert stored_calls == sum(len(t["calls"]) for t in event["rollouts"])
    assert Group.objects.filter(run=run).count() == len(event["groups"])
    assert GroupMember.objects.filter(group__run=run).count() == sum(len(g["members"]) for g in event["groups"])
    first = Rollout.objects.filter(run=run).order_by("index").first()
    assert [c.module for c in first.calls.all()] == [c["module"] for c in event["rollouts"][0]["calls"]]
    run.refresh_from_db()
    assert (run.last_seq, run.current_step) == (1, 1)


def test_failed_rollouts_keep_their_partial_calls(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1, questions=3)
    step_events_ingest(run, [event])
    failed = Rollout.objects.filter(run=run, failed=True)
    assert failed.exists()
    for rollout in failed:
        calls = list(rollout.calls.all())
        assert calls[-1].parsed_ok is False and all(c.parsed_ok for c in calls[:-1])


def test_ingest_is_idempotent_and_seqs_stay_dense(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    events = [mhgpo_step_event(s) for s in (1, 2, 3)]
    step_events_ingest(run, events[:2])
    assert step_events_ingest(run, events[:2]) == []  # re-shipped after an outage: nothing new
    step_events_ingest(run, events)  # steps 1-2 again plus the new step 3
    assert list(StepMetric.objects.filter(run=run).values_list("step", "seq")) == [(1, 1), (2, 2), (3, 3)]
    assert Rollout.objects.filter(run=run).count() == 3 * 6


def test_a_resumed_attempt_continues_the_seq(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    step_events_ingest(run, [mhgpo_step_event(1), mhgpo_step_event(2)])
    step_events_ingest(run, [mhgpo_step_event(2, attempt=2)])
    assert list(StepMetric.objects.filter(run=run).values_list("attempt", "step", "seq")) == [
        (1, 1, 1), (1, 2, 2), (2, 2, 3)]


def test_query_count_does_not_grow_with_the_number_of_rollouts(owner):
    # Both sizes fit in one bulk batch even under SQLite's 999-parameter limit.
    run = make_run(owner, state=Run.State.RUNNING)
    with CaptureQueriesContext(connection) as small:
        step_events_ingest(run, [mhgpo_step_event(1, questions=1)])
    with CaptureQueriesContext(connection) as large:
        step_events_ingest(run, [mhgpo_step_event(2, questions=5)])
    assert len(large.captured_queries) == len(small.captured_queries)


def test_a_large_step_takes_far_fewer_queries_than_rows(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    with CaptureQueriesContext(connection) as queries:
        step_events_ingest(run, [mhgpo_step_event(1, questions=100)])
    rows = ModuleCall.objects.filter(rollout__run=run).count() + Rollout.objects.filter(run=run).count()
    assert rows > 1000 and len(queries.captured_queries) < rows / 20


def test_best_reward_tracks_the_highest_step_mean(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    events = [mhgpo_step_event(s) for s in (1, 2)]
    events[0]["metrics"]["reward/mean"], events[1]["metrics"]["reward/mean"] = 0.7, 0.4
    step_events_ingest(run, events)
    run.refresh_from_db()
    assert run.best_reward == 0.7


def test_nul_bytes_in_model_output_are_stored_as_replacement_characters(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1)
    event["rollouts"][0]["calls"][0]["completion"] = "bad\x00byte"
    event["rollouts"][0]["final_output"] = "x\x00"
    step_events_ingest(run, [event])
    call = ModuleCall.objects.filter(rollout__run=run, rollout__index=0).order_by("position").first()
    assert call.completion == "bad\ufffdbyte"
