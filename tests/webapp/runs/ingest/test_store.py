"""Step events (as the trainer writes them) are stored once, with dense seqs, in bulk."""

import itertools

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.webapp.runs.factories import make_run
from tests.webapp.runs.seeding import error_step_event
from trainer.algorithms.advantages import grpo_advantages
from trainer.algorithms.groups import assign_advantages, group_reward_arrays
from trainer.algorithms.propagation import mhgpo_groups, propagate_rewards
from trainer.rollouts.sampling import LinearChain, fork_on, fork_on_first
from trainer.run import events
from webapp.runs.ingest import store as ingest
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.ingest.texts import fill_call_texts
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
    return step_event(step, trajectories, attempt=attempt)


def step_event(step: int, trajectories, *, attempt: int = 1) -> dict:
    """The trainer's step event for these trajectories: rewards, propagation, MHGPO groups, advantages."""
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


def test_a_call_keeps_the_chat_messages_its_prompt_was_rendered_from(owner):
    from trainer.rollouts.prompts import chat_messages

    class ChatChain(LinearChain):
        def process_prompt(self, state, agent):
            return chat_messages(f"You are the {agent}.", super().process_prompt(state, agent))

    program = ChatChain(("rewriter", "answerer"))
    trajectories = fork_on_first(program, ["question 0"], group_size=2,
                                 generate=lambda agent, prompts: [f"{agent} ok"] * len(prompts), example_ids=["q0"])
    run = make_run(owner, state=Run.State.RUNNING)
    step_events_ingest(run, [step_event(1, trajectories)])
    call = ModuleCall.objects.filter(rollout__run=run, module="answerer").first()
    fill_call_texts([call])
    assert call.messages == chat_messages("You are the answerer.", "answerer: question 0 | rewriter ok")
    assert call.prompt == "You are the answerer.\n\nanswerer: question 0 | rewriter ok\n"  # no tokenizer: plain text
    every = list(ModuleCall.objects.filter(rollout__run=run))
    fill_call_texts(every)
    assert all(c.messages for c in every)


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
    fill_call_texts([call])
    assert call.completion == "bad\ufffdbyte"
    assert Rollout.objects.get(run=run, index=0).final_output == "x\ufffd"


def test_nul_bytes_in_json_keys_and_prompts_are_replaced_too(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1)
    event["rollouts"][1]["calls"][0]["prompt"] = "p\x00"
    event["rollouts"][1]["rewards"] = {"f\x001": 0.5}
    event["metrics"]["odd\x00key"] = 1.0
    step_events_ingest(run, [event])
    rollout = Rollout.objects.get(run=run, index=1)
    assert rollout.reward_components == {"f\ufffd1": 0.5}
    call = rollout.calls.order_by("position").first()
    fill_call_texts([call])
    assert call.prompt == "p\ufffd"
    assert StepMetric.objects.get(run=run).metrics["odd\ufffdkey"] == 1.0


def test_forked_rollouts_point_at_the_rollout_they_were_forked_from(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    step_events_ingest(run, [mhgpo_step_event(1, questions=2)])
    for rollout in Rollout.objects.filter(run=run).select_related("parent"):
        if rollout.sampling["parent_id"] is None:
            assert rollout.parent is None
        else:
            assert rollout.parent.sampling["trajectory_id"] == rollout.sampling["parent_id"]
            assert (rollout.parent.step, rollout.parent.example_id) == (rollout.step, rollout.example_id)
    assert Rollout.objects.filter(run=run, parent__isnull=False).count() == 2 * 2  # forks 1 and 2 of 2 questions


def test_several_new_steps_in_one_call_keep_their_own_calls_and_groups(owner):
    # Call and trajectory ids repeat from step to step (they are per-step names): members must not
    # be matched to a call of another step shipped in the same batch.
    run = make_run(owner, state=Run.State.RUNNING)
    events = [mhgpo_step_event(s) for s in (1, 2, 3)]
    assert events[0]["rollouts"][0]["calls"][0]["call_id"] == events[1]["rollouts"][0]["calls"][0]["call_id"]
    step_events_ingest(run, events)
    members = GroupMember.objects.filter(group__run=run).values_list("group__step", "call__rollout__step")
    assert len(members) == sum(len(g["members"]) for e in events for g in e["groups"])
    assert all(group_step == call_step for group_step, call_step in members)
    for event in events:
        assert Group.objects.filter(run=run, step=event["step"]).count() == len(event["groups"])
        assert Rollout.objects.filter(run=run, step=event["step"]).count() == len(event["rollouts"])


def test_a_call_shared_by_forks_is_stored_under_each_rollout_and_grouped_by_its_first_copy(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    trajectories = fork_on(LinearChain(("rewriter", "reranker", "answerer")), "q?", "reranker", group_size=3,
                           generate=lambda agent, prompts: [f"{agent} {i}" for i in range(len(prompts))],
                           example_id="q")
    assert trajectories[1].calls[0] is trajectories[0].calls[0]  # the rewriter call before the fork
    step_events_ingest(run, [step_event(1, trajectories)])
    assert ModuleCall.objects.filter(rollout__run=run).count() == 3 * 3
    (member,) = GroupMember.objects.filter(group__run=run, group__module="rewriter").select_related("call__rollout")
    assert (member.call.rollout.index, member.call.position) == (0, 0)
    assert Group.objects.get(run=run, module="reranker").size == 3


def test_a_group_naming_an_unknown_call_stores_nothing(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1)
    event["groups"][0]["members"][0]["call_id"] = "no-such-call"
    with pytest.raises(ValueError, match="no-such-call"):
        step_events_ingest(run, [event])
    assert not StepMetric.objects.filter(run=run).exists() and not Rollout.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert run.last_seq == 0


def test_a_rollouts_error_is_stored_with_it(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = error_step_event(1)
    (raised,) = [t for t in event["rollouts"] if t["error"]]
    step_events_ingest(run, [event])
    stored = Rollout.objects.get(run=run, error__startswith="ZeroDivisionError")
    assert stored.error == raised["error"] and "in program step of module 'reranker'" in stored.error
    assert stored.failed and stored.index == 1 and stored.example_id == "q0"
    assert [(c.module, c.parsed_ok) for c in stored.calls.order_by("position")] == [("rewriter", True),
                                                                                   ("reranker", False)]
    assert Rollout.objects.filter(run=run, error="").count() == len(event["rollouts"]) - 1


def test_an_error_is_clipped_and_cleaned_for_the_database(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = error_step_event(1)
    event["rollouts"][1]["error"] = "ValueError: \x00" + "x" * 20_000
    step_events_ingest(run, [event])
    stored = Rollout.objects.get(run=run, index=1, example_id="q0").error
    assert stored.startswith("ValueError: \ufffdxxx") and len(stored) == events.MAX_ERROR


def stored_rows(run) -> dict[str, list[tuple]]:
    """Everything stored for a run, ids replaced by positions, to compare two runs."""
    return {
        "metrics": list(StepMetric.objects.filter(run=run).values_list("attempt", "step", "seq", "metrics")),
        "rollouts": list(Rollout.objects.filter(run=run).order_by("step", "index").values_list(
            "attempt", "step", "index", "example_id", "parent__index", "teacher", "fork_point", "sampling",
            "final_output", "reward_components", "total_reward", "failed", "error")),
        "calls": list(ModuleCall.objects.filter(rollout__run=run).order_by(
            "rollout__step", "rollout__index", "position").values_list(
            "rollout__step", "rollout__index", "position", "module", "invocation_index", "prompt", "messages",
            "completion", "parsed_ok", "specific_reward", "propagated_reward", "advantage")),
        "groups": list(Group.objects.filter(run=run).order_by("step", "index").values_list(
            "attempt", "step", "index", "module", "invocation_index", "kind", "example_id", "size", "reward_mean",
            "reward_var", "similarity", "distinct_advantages", "distinct_reward_vectors")),
        "members": list(GroupMember.objects.filter(group__run=run).order_by(
            "group__step", "group__index", "position").values_list(
            "group__step", "group__index", "position", "call__rollout__index", "call__position", "padded",
            "duplicated", "reward", "reward_components", "advantage", "component_advantages")),
    }


def test_the_bulk_create_writer_stores_the_same_rows_as_the_default_writer(owner, monkeypatch):
    # On PostgreSQL the default writer is COPY; SQLite's (bulk_create) runs on PostgreSQL too.
    events = [mhgpo_step_event(s, questions=3) for s in (1, 2)]
    events[0]["rollouts"][0]["final_output"] = None
    events[0]["rollouts"][0]["calls"][0]["messages"] = [{"role": "system", "content": "Rewrite."},
                                                        {"role": "user", "content": "question 0"}]
    events[1] = error_step_event(2)  # a rollout whose program raised, with its error
    default_run = make_run(owner, state=Run.State.RUNNING)
    step_events_ingest(default_run, events)
    monkeypatch.setattr(ingest, "_write", ingest._write_with_bulk_create)
    bulk_run = make_run(owner, state=Run.State.RUNNING)
    step_events_ingest(bulk_run, events)
    assert stored_rows(default_run) == stored_rows(bulk_run)
    # A missing final output is SQL NULL (what isnull matches), not JSON null, in both.
    sql_nulls = [Rollout.objects.filter(run=r, final_output__isnull=True).count() for r in (default_run, bulk_run)]
    assert sql_nulls[0] == sql_nulls[1] >= 1


@pytest.mark.postgresql_only(reason="COPY is PostgreSQL's")
def test_on_postgresql_rows_are_copied_not_inserted(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1, questions=5)
    with CaptureQueriesContext(connection) as queries:
        step_events_ingest(run, [event])
    inserts = [q["sql"].split()[2] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    copies = [q["sql"].split()[1] for q in queries.captured_queries if q["sql"].startswith("COPY")]
    assert inserts == ['"runs_stepmetric"']  # the StepMetric row; everything else by COPY
    assert copies == ['"runs_rollout"', '"runs_modulecall"', '"runs_group"', '"runs_calltext"', '"runs_groupmember"']
    assert ModuleCall.objects.filter(rollout__run=run).count() == sum(len(t["calls"]) for t in event["rollouts"])


def test_last_reward_and_last_eval_reward_follow_the_newest_step_that_has_them(owner):
    """The runs table's 'last reward' and 'last eval' columns, kept in the same UPDATE as best_reward."""
    run = make_run(owner, state=Run.State.RUNNING)
    events = [mhgpo_step_event(s) for s in (1, 2, 3)]
    for event, reward, evaluated in zip(events, (0.7, 0.4, None), (0.5, None, None), strict=True):
        event["metrics"]["reward/mean"] = reward
        event["metrics"].pop("eval/reward/mean", None)
        if evaluated is not None:
            event["metrics"]["eval/reward/mean"] = evaluated
    step_events_ingest(run, events[:2])
    run.refresh_from_db()
    assert (run.best_reward, run.last_reward, run.last_eval_reward) == (0.7, 0.4, 0.5)
    step_events_ingest(run, events[2:])  # no reward and no evaluation in this step: both kept
    run.refresh_from_db()
    assert (run.best_reward, run.last_reward, run.last_eval_reward) == (0.7, 0.4, 0.5)
    later = mhgpo_step_event(4)
    later["metrics"].update({"reward/mean": 0.9, "eval/reward/mean": 0.6})
    step_events_ingest(run, [later])
    run.refresh_from_db()
    assert (run.best_reward, run.last_reward, run.last_eval_reward) == (0.9, 0.9, 0.6)


def test_each_rollout_keeps_the_policy_version_that_sampled_it(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1)
    versions = [4, 4, True, -1, 2**40, None]  # the last four are no whole version the contract bounds
    for rollout, version in zip(event["rollouts"], versions, strict=True):
        rollout["policy_version"] = version
    step_events_ingest(run, [event])
    stored = [r.sampling.get("policy_version") for r in Rollout.objects.filter(run=run).order_by("index")]
    assert stored == [4, 4, None, None, None, None]


def test_a_steps_timeline_is_stored_with_it_and_a_bar_that_is_none_is_left_out(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1)
    good = {"lane": "sampler", "name": "generate", "start": 100.0, "end": 101.5, "policy_version": 0}
    backwards = {"lane": "trainer", "name": "update", "start": 102.0, "end": 101.5}  # the time between them
    event["spans"] = [good, backwards, {"lane": "", "name": "x", "start": 1, "end": 2},
                      {"lane": "trainer", "name": "nan", "start": float("nan"), "end": 2}, "bar",
                      {"lane": "sampler", "name": "generate", "start": 1, "end": 2, "policy_version": -1}]
    step_events_ingest(run, [event])
    assert StepMetric.objects.get(run=run).spans == [good, {**backwards, "start": 101.5, "end": 102.0}]


def test_a_step_keeps_at_most_the_contracts_number_of_bars(owner):
    run = make_run(owner, state=Run.State.RUNNING)
    event = mhgpo_step_event(1)
    event["spans"] = [{"lane": "trainer", "name": f"bar {i}", "start": i, "end": i + 1}
                      for i in range(events.MAX_SPANS_PER_STEP + 5)]
    step_events_ingest(run, [event])
    assert len(StepMetric.objects.get(run=run).spans) == events.MAX_SPANS_PER_STEP
