"""DSPyProgram with real DSPy: module calls, module-level groups, forks by replay, failures, threads."""

from __future__ import annotations

import threading
from collections import Counter

import dspy
import pytest

from tests.trainer.dspy.programs import Crashes, Flaky, MultiHop, ScriptedLM
from trainer.algorithms.grouping import form_module_level_groups
from trainer.algorithms.propagation import mhgpo_groups
from trainer.dspy import DSPyProgram, ReplayDivergence
from trainer.dspy.adapters import MarkerFallbackAdapter
from trainer.rollouts.sampling import fork_on_first, independent_sampling

EXAMPLES = [{"id": "one", "question": "Who wrote Hamlet?", "hops": 1},
            {"id": "three", "question": "Where was its author born?", "hops": 3}]


def hop_program(**kwargs) -> DSPyProgram:
    return DSPyProgram(MultiHop, name="multihop", inputs=("question", "hops"), **kwargs)


def rollout_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dspy-")]


def test_agents_are_the_named_predictors():
    assert hop_program().agents == ("query", "answer")
    assert hop_program().agents == tuple(name for name, _ in MultiHop().named_predictors())


def test_module_calls_follow_the_program_and_groups_are_predictor_and_invocation():
    lm = ScriptedLM()
    trajs = fork_on_first(hop_program(), EXAMPLES, group_size=4, generate=lm, example_ids=[e["id"] for e in EXAMPLES])
    assert len(trajs) == 8 and not any(t.failed for t in trajs)
    by_example = {e["id"]: [t for t in trajs if t.example_id == e["id"]] for e in EXAMPLES}
    for example in EXAMPLES:
        for traj in by_example[example["id"]]:
            assert [(c.module, c.invocation_index) for c in traj.calls] == \
                [("query", i) for i in range(example["hops"])] + [("answer", 0)]
            # Each call's prompt is what DSPy's ChatAdapter sent: the signature's system message and
            # the inputs, with the notes written by the earlier query calls of this trajectory.
            assert traj.calls[0].messages[0]["role"] == "system"
            assert "`query`" in traj.calls[0].messages[0]["content"]
            earlier = [c.parsed["query"] for c in traj.calls[:-1]]
            assert all(note in traj.calls[-1].messages[-1]["content"] for note in earlier)
            assert traj.final_output.answer == traj.calls[-1].parsed["answer"]
    # MMGRPO's module-level groups: one per (example, predictor, invocation index), holding the G calls
    # recorded at that position, exactly as dspy.GRPO groups them.
    for traj in trajs:
        traj.total_reward = 0.0
    groups = form_module_level_groups(trajs, group_size=4)
    recorded = Counter((t.example_id, c.module, c.invocation_index) for t in trajs for c in t.calls)
    assert {(g.example_id, g.module, g.invocation_index): len(g.members) for g in groups} == dict(recorded)
    assert set(recorded.values()) == {4}
    assert len(groups) == 2 + 4


def test_lm_calls_of_concurrent_rollouts_are_batched_per_module_and_round():
    lm = ScriptedLM()
    examples = [{"question": f"q{i}", "hops": 2} for i in range(8)]
    fork_on_first(hop_program(), examples, group_size=2, generate=lm)
    # 16 rollouts x 3 calls, in 3 rounds: one generate per round, never one per call.
    assert lm.batches == [("query", 16), ("query", 16), ("answer", 16)]
    assert rollout_threads() == []


def test_an_unparseable_completion_is_a_format_failure_with_the_partial_trajectory_kept():
    lm = ScriptedLM(unmarked={"answer"})
    (traj,) = fork_on_first(hop_program(), EXAMPLES[1:], group_size=1, generate=lm)
    assert traj.failed and traj.final_output is None
    assert [(c.module, c.parsed_ok) for c in traj.calls] == [("query", True)] * 3 + [("answer", False)]
    assert traj.calls[-1].parsed is None


def test_the_fallback_adapter_reads_an_unmarked_single_field_completion():
    lm = ScriptedLM(unmarked={"answer"})
    (traj,) = fork_on_first(hop_program(adapter=MarkerFallbackAdapter()), EXAMPLES[:1], group_size=1, generate=lm)
    assert not traj.failed and traj.calls[-1].parsed_ok
    assert traj.final_output.answer == traj.calls[-1].completion


def test_independent_sampling_forks_by_replay_with_an_identical_prefix():
    lm = ScriptedLM()
    trajs = independent_sampling(hop_program(), EXAMPLES[1:], group_size=3, generate=lm, example_ids=["three"])
    at_answer = [t for t in trajs if t.fork_point == "answer"]
    assert len(at_answer) == 3
    prefixes = [[(c.module, c.prompt, c.completion) for c in t.calls[:-1]] for t in at_answer]
    assert prefixes[0] == prefixes[1] == prefixes[2] and len(prefixes[0]) == 3  # replayed, not resampled
    (group,) = [g for g in mhgpo_groups(trajs) if g.group_id == "three/fork:answer/answer#0"]
    assert group.kind == "homogeneous"
    assert [m.call.completion for m in group.members] == [t.calls[-1].completion for t in at_answer]
    assert len({m.call.completion for m in group.members}) == 3
    # The program really ran to the end on each fork: its output is the fork's own answer.
    assert [t.final_output.answer for t in at_answer] == [t.calls[-1].parsed["answer"] for t in at_answer]
    assert rollout_threads() == []


def test_a_program_that_diverges_on_replay_stops_the_run_clearly():
    program = DSPyProgram(Flaky, name="flaky")
    with pytest.raises(ReplayDivergence, match="diverged at call 1.*module 'answer'.*deterministic"):
        independent_sampling(program, [{"question": "q"}], group_size=2, generate=ScriptedLM())
    # Without forks there is nothing to replay: GRPO-style rollouts of the same program are fine.
    trajs = fork_on_first(program, [{"question": "q"}], group_size=2, generate=ScriptedLM())
    assert not any(t.failed for t in trajs)


def test_a_program_error_surfaces_from_has_next_after_the_calls_it_made():
    program = DSPyProgram(Crashes, name="crashes")
    state = program.start({"question": "boom?"})
    result = program.step(state, "query", "[[ ## query ## ]]\nq\n\n[[ ## completed ## ]]")
    assert result.parsed_ok
    with pytest.raises(ConnectionError, match="unreachable"):
        program.has_next(result.state)


def test_a_program_saved_after_prompt_optimization_trains_with_its_prompts_and_demos(tmp_path):
    student = MultiHop()
    student.answer.signature = student.answer.signature.with_instructions("Answer with a single proper noun.")
    trainset = [dspy.Example(question="Who wrote Hamlet?", notes=["Shakespeare play"], answer="Shakespeare")
                .with_inputs("question", "notes")]
    optimized = dspy.LabeledFewShot(k=1).compile(student, trainset=trainset)
    path = tmp_path / "optimized.json"
    optimized.save(str(path))

    lm = ScriptedLM()
    (traj,) = fork_on_first(hop_program(state_path=path), EXAMPLES[:1], group_size=1, generate=lm)
    answer_messages = traj.calls[-1].messages
    assert "Answer with a single proper noun." in answer_messages[0]["content"]
    # The demo is a user/assistant turn before the question, as DSPy's ChatAdapter renders it.
    assert any(m["role"] == "assistant" and "Shakespeare" in m["content"] for m in answer_messages[1:-1])
    assert "Who wrote Hamlet?" in answer_messages[-1]["content"]


def test_a_dropped_state_releases_its_thread():
    program = hop_program()
    state = program.start(EXAMPLES[0])
    assert len(rollout_threads()) == 1
    thread = rollout_threads()[0]
    del state
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_program_error_fails_only_that_examples_trajectories_with_the_error_recorded():
    program = DSPyProgram(Crashes, name="crashes")
    trajs = fork_on_first(program, [{"question": "boom?"}, {"question": "calm?"}], group_size=2,
                          generate=ScriptedLM(), example_ids=["boom", "calm"])
    boom = [t for t in trajs if t.example_id == "boom"]
    calm = [t for t in trajs if t.example_id == "calm"]
    assert boom and all(t.failed and t.error.startswith("ConnectionError: search service unreachable") for t in boom)
    assert all([c.module for c in t.calls] == ["query"] for t in boom)  # the calls made before it raised
    assert "in forward" in boom[0].error  # the program's own frame, not the engine's
    assert len(calm) == 2 and not any(t.failed or t.error for t in calm)
    assert rollout_threads() == []
