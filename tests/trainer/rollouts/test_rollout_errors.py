"""A program or reward that raises during a rollout fails that trajectory, with its error recorded;
``RunAbort`` and the engine's own errors fail the run (trainer/rollouts/failures.py, trainer/rollouts/engine.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.algorithms.propagation import mhgpo_groups, propagate_rewards
from trainer.rollouts.failures import (
    MAX_ERROR_CHARS,
    RolloutErrors,
    call_rewards,
    describe_error,
    raise_if_mostly_errors,
    reward_value,
)
from trainer.rollouts.sampling import (
    LinearChain,
    RunAbort,
    fork_on,
    fork_on_first,
    independent_sampling,
    round_robin,
)
from trainer.rollouts.trajectory import ModuleCall, Trajectory, apply_format_failure, unique_calls

AGENTS = ("rewriter", "reranker", "answerer")


class Diverged(RunAbort):
    """What a program raises on purpose to stop the run (like trainer.dspy.ReplayDivergence)."""


class CrashyChain(LinearChain):
    """LinearChain whose code raises where the test's words say: a completion holding CRASH makes
    ``step`` raise, ABORT makes it raise ``Diverged``; LOST after a call makes ``has_next`` raise; the
    questions "crash-start" and "crash-final" make ``start`` / ``final_output`` raise."""

    def start(self, example):
        if example == "crash-start":
            raise KeyError("question")
        return super().start(example)

    def has_next(self, state):
        if state[1] and state[1][-1] == "LOST":
            raise RuntimeError("lost track of the documents")
        return super().has_next(state)

    def step(self, state, agent, completion):
        if "ABORT" in completion:
            raise Diverged("the replay diverged")
        if "CRASH" in completion:
            return self._parse_number(completion)
        return super().step(state, agent, completion)

    def _parse_number(self, completion):
        return 1 / 0

    def final_output(self, state):
        if state[0] == "crash-final":
            raise ValueError("no answer field")
        return super().final_output(state)


def scripted(script):
    """generate(agent, prompts): ``script(agent, prompt, i)`` per prompt (i: its position in the request),
    else "<agent> ok"."""

    def generate(agent, prompts):
        return [script(agent, p, i) or f"{agent} ok" for i, p in enumerate(prompts)]

    return generate


CHAIN = CrashyChain(AGENTS)


def test_a_step_that_raises_for_one_example_fails_only_that_examples_trajectories():
    generate = scripted(lambda agent, prompt, i: "CRASH" if agent == "reranker" and "q1" in prompt else None)
    trajs = fork_on_first(CHAIN, ["q0", "q1", "q2"], group_size=2, generate=generate, example_ids=["q0", "q1", "q2"])
    assert len(trajs) == 6
    bad = [t for t in trajs if t.example_id == "q1"]
    good = [t for t in trajs if t.example_id != "q1"]
    for t in bad:
        assert t.failed and t.final_output is None
        # Ended at the raising call: the rewriter's call, then the reranker's, kept and marked not parsed.
        assert [(c.module, c.parsed_ok) for c in t.calls] == [("rewriter", True), ("reranker", False)]
        assert t.calls[-1].completion == "CRASH"
        headline, where, *traceback = t.error.splitlines()
        assert headline == "ZeroDivisionError: division by zero"
        assert where == "  in program step of module 'reranker'"
        assert "_parse_number" in t.error and "1 / 0" in t.error  # the program's own frames
        assert "rollout_engine" not in t.error  # not the engine's
    assert all(not t.failed and t.error is None and len(t.calls) == 3 for t in good)
    # It serializes with the trajectory, for the event log.
    data = json.loads(json.dumps(bad[0].to_dict()))
    assert data["error"] == bad[0].error and data["failed"] is True
    assert Trajectory.from_dict(data).error == bad[0].error
    assert good[0].to_dict()["error"] is None


def test_a_fork_sibling_that_raises_fails_only_its_branch():
    generate = scripted(lambda agent, prompt, i: "CRASH" if agent == "reranker" and i == 1 else None)
    t0, t1, t2 = fork_on(CHAIN, "q", "reranker", group_size=3, generate=generate, example_id="q")
    assert t1.failed and "in program step of module 'reranker'" in t1.error
    assert [c.module for c in t1.calls] == ["rewriter", "reranker"] and not t1.calls[1].parsed_ok
    for t in (t0, t2):
        assert not t.failed and t.error is None and [c.module for c in t.calls] == list(AGENTS)
    assert t1.calls[0] is t0.calls[0] and t0.calls[0].parsed_ok  # the shared prefix is untouched
    # The failed sibling stays in its homogeneous group, and rewards still propagate over the tree.
    fork_group = next(g for g in mhgpo_groups([t0, t1, t2]) if g.module == "reranker")
    assert len(fork_group.members) == 3
    scored = [t0, apply_format_failure(t1, -1.0, ["f1"]), t2]
    scored[0].total_reward, scored[2].total_reward = 1.0, 0.0
    propagate_rewards(scored)
    assert scored[1].calls[-1].propagated_reward == -1.0
    assert t0.calls[0].propagated_reward == pytest.approx(0.0)  # mean of 1, -1, 0


def test_an_error_before_the_fork_ends_the_trunk_once_not_g_times():
    # The reranker's step raises before the answerer fork: one trajectory, one error, never forked.
    generate = scripted(lambda agent, prompt, i: "CRASH" if agent == "reranker" else None)
    trajs = fork_on(CHAIN, "q", "answerer", group_size=4, generate=generate, example_id="q")
    assert len(trajs) == 1
    (t,) = trajs
    assert t.failed and t.error and t.fork_point is None and len(t.calls) == 2
    # With another example that ran through, 1 of 5 trajectories raised: the step goes on.
    ok = fork_on(CHAIN, "r", "answerer", group_size=4, generate=scripted(lambda *a: None), example_id="r")
    raise_if_mostly_errors(trajs + ok, "step 1")


def test_has_next_raising_keeps_the_calls_made_so_far_all_parsed():
    generate = scripted(lambda agent, prompt, i: "LOST" if agent == "rewriter" else None)
    (t,) = fork_on_first(CHAIN, ["q"], group_size=1, generate=generate)
    assert t.failed and t.error.startswith("RuntimeError: lost track of the documents\n  in program has_next")
    assert [(c.module, c.parsed_ok) for c in t.calls] == [("rewriter", True)]
    # The format-failure treatment applies although no call failed to parse: all calls kept.
    out = apply_format_failure(t, -1.0, ["f1"])
    assert out.calls == t.calls and out.rewards == {"f1": -1.0} and out.total_reward == -1.0
    assert out.error == t.error


def test_start_and_final_output_raising_fail_their_example():
    trajs = fork_on_first(CHAIN, ["crash-start", "crash-final", "fine"], group_size=2,
                          generate=scripted(lambda *a: None), example_ids=["s", "f", "ok"])
    by_id = {}
    for t in trajs:
        by_id.setdefault(t.example_id, []).append(t)
    (start,) = by_id["s"]  # the program never started: one trajectory, no calls
    assert start.failed and start.calls == [] and start.error.startswith("KeyError: 'question'\n  in program start")
    assert len(by_id["f"]) == 2 and all(len(t.calls) == 3 for t in by_id["f"])
    assert all(t.failed and t.final_output is None and "in program final_output" in t.error for t in by_id["f"])
    assert all(not t.failed and t.final_output == "answerer ok" for t in by_id["ok"])


@pytest.mark.parametrize("strategy", ["is", "rr"])
def test_mhgpo_strategies_keep_going_when_one_example_raises(strategy):
    generate = scripted(lambda agent, prompt, i: "CRASH" if agent == "answerer" and "q0" in prompt else None)
    examples = ["q0", "q1"]
    if strategy == "is":
        trajs = independent_sampling(CHAIN, examples, group_size=2, generate=generate, example_ids=examples)
    else:
        trajs = round_robin(CHAIN, examples, group_size=2, probs=[0.5, 0.25, 0.25], generate=generate, rng=1,
                            example_ids=examples)
    assert all(t.error for t in trajs if t.example_id == "q0")
    assert not any(t.error for t in trajs if t.example_id == "q1")
    assert all(c.call_id for c in unique_calls(trajs))


def test_run_abort_from_a_program_propagates():
    generate = scripted(lambda agent, prompt, i: "ABORT" if agent == "answerer" else None)
    with pytest.raises(Diverged, match="the replay diverged"):
        fork_on_first(CHAIN, ["q0", "q1"], group_size=2, generate=generate)

    class AbortAtStart(LinearChain):
        def start(self, example):
            raise Diverged("cannot start")

    with pytest.raises(Diverged):
        fork_on_first(AbortAtStart(AGENTS), ["q"], group_size=2, generate=scripted(lambda *a: None))


def test_the_engines_own_errors_still_fail_the_run():
    with pytest.raises(ValueError, match="generate returned 1 completions for 2 prompts"):
        fork_on_first(CHAIN, ["q"], group_size=2, generate=lambda agent, prompts: ["one"])

    class Endless(LinearChain):
        def has_next(self, state):
            return True

        def next_agent(self, state):
            return "answerer"

    with pytest.raises(RuntimeError, match="made 3 calls without finishing"):
        fork_on_first(Endless(AGENTS), ["q"], group_size=1, generate=scripted(lambda *a: None), max_calls=3)


def test_describe_error_is_bounded_and_keeps_the_last_frames():
    def deep(n):
        if n == 0:
            raise ValueError("x" * 5000)
        return deep(n - 1)

    try:
        deep(30)
    except ValueError as exc:
        text = describe_error(exc, "program step of module 'answerer'")
    assert len(text) <= MAX_ERROR_CHARS
    assert text.startswith("ValueError: xxx") and "…\n  in program step of module 'answerer'" in text
    assert "Traceback (most recent call last, 3 frames)" in text and text.count("in deep") == 3
    assert 'raise ValueError("x" * 5000)' in text
    assert describe_error(KeyError("k"), "program start") == "KeyError: 'k'\n  in program start"  # never raised


@pytest.mark.parametrize("value, expected", [(1, 1.0), (0.5, 0.5), (True, 1.0), (np.float32(0.25), 0.25),
                                             (np.int64(3), 3.0), (np.bool_(False), 0.0), (None, None)])
def test_reward_values_that_are_numbers_or_none(value, expected):
    assert reward_value("r", value) == expected


def test_nan_from_a_reward_stays_nan():
    assert np.isnan(reward_value("r", float("nan")))


@pytest.mark.parametrize("value, shown", [("abc", "'abc' (str)"), ([1.0], "[1.0] (list)"),
                                          ({"score": 1}, "{'score': 1} (dict)"), (np.array([1.0, 2.0]), "(ndarray)")])
def test_a_reward_returning_no_number_is_named_in_the_error(value, shown):
    with pytest.raises(TypeError, match="^reward 'my_reward' returned .*; a reward returns a float or None$") as info:
        reward_value("my_reward", value)
    assert shown in str(info.value)


def test_call_rewards_records_the_first_reward_error():
    traj = Trajectory("e", [ModuleCall("answerer", 0, "q", "a", True)], final_output="a")

    def exact_match(example, output, trajectory):
        return float(output == example["answer"])

    assert "KeyError: 'answer'\n  in reward 'exact_match'" in call_rewards(traj, {}, {"exact_match": exact_match},
                                                                          ["exact_match"])
    assert "return float(output == example[\"answer\"])" in call_rewards(traj, {}, {"exact_match": exact_match},
                                                                         ["exact_match"])
    fns = {"exact_match": exact_match, "judge": lambda e, o, t: "abc"}
    error = call_rewards(traj, {"answer": "a"}, fns, ["exact_match", "judge"])
    assert error == "TypeError: reward 'judge' returned 'abc' (str); a reward returns a float or None"
    assert traj.rewards == {"exact_match": 1.0}

    def abort(example, output, trajectory):
        raise Diverged("the judge model is gone")

    with pytest.raises(Diverged):
        call_rewards(traj, {}, {"judge": abort}, ["judge"])


def test_more_than_half_raising_fails_with_the_first_error():
    def traj(example_id, error=None, failed=False):
        return Trajectory(example_id, failed=failed or error is not None, error=error)

    parse_failures = [traj("p", failed=True) for _ in range(5)]
    raise_if_mostly_errors([traj("a", "E1"), traj("b", "E2"), *parse_failures], "step 3")  # parse failures don't count
    raise_if_mostly_errors([traj("a", "E1"), traj("b")], "step 3")  # exactly half: goes on
    raise_if_mostly_errors([], "step 3")
    with pytest.raises(RolloutErrors) as info:
        raise_if_mostly_errors([traj("a"), traj("b", "ZeroDivisionError: division by zero"), traj("c", "E2")], "step 3")
    assert str(info.value) == ("2 of 3 trajectories raised in step 3; first error (example 'b'): "
                               "ZeroDivisionError: division by zero")


def test_docstring_examples():
    import doctest

    import trainer.rollouts.failures

    result = doctest.testmod(trainer.rollouts.failures)
    assert result.failed == 0 and result.attempted >= 8
