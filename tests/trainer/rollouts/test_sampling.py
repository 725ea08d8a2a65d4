"""MHGPO sampling (Algorithms 2-5) and reward propagation (Eq. 4) on a fake 3-agent search program."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from trainer.algorithms.propagation import mhgpo_groups
from trainer.rollouts.sampling import (
    AgentProgram,
    StepResult,
    entry_agent,
    fork_on,
    fork_on_first,
    independent_sampling,
    regroup_singletons,
    round_robin,
)
from trainer.rollouts.trajectory import apply_format_failure, unique_calls

AGENTS = ("rewriter", "reranker", "answerer")


@dataclass(frozen=True)
class SearchState:
    question: str
    outputs: tuple[tuple[str, str], ...] = ()


class FakeSearchProgram:
    """rewriter -> reranker -> answerer; a completion starting with BAD does not parse."""

    agents = AGENTS

    def start(self, example):
        return SearchState(example["question"])

    def has_next(self, state):
        return len(state.outputs) < len(AGENTS)

    def next_agent(self, state):
        return AGENTS[len(state.outputs)]

    def process_prompt(self, state, agent):
        context = " | ".join(out for _, out in state.outputs)
        return f"[{agent}] {state.question} || {context}"

    def step(self, state, agent, completion):
        ok = not completion.startswith("BAD")
        return StepResult(SearchState(state.question, (*state.outputs, (agent, completion))), ok,
                          completion.upper() if ok else None)

    def final_output(self, state):
        return state.outputs[-1][1]


class FakeLM:
    """Deterministic generator: the n-th completion ever is '<agent>-<n>'; listed indices come out BAD."""

    def __init__(self, bad=()):
        self.n = 0
        self.bad = set(bad)
        self.requests: list[tuple[str, list[str]]] = []

    def __call__(self, agent, prompts):
        self.requests.append((agent, list(prompts)))
        out = []
        for _ in prompts:
            out.append(f"BAD-{self.n}" if self.n in self.bad else f"{agent}-{self.n}")
            self.n += 1
        return out

    @property
    def calls(self):
        return sum(len(p) for _, p in self.requests)


def questions(n):
    return [{"question": f"q{i}?"} for i in range(n)]


def groups_by_id(trajs):
    out = {}
    for call in unique_calls(trajs):
        if call.group_id is not None:
            out.setdefault(call.group_id, []).append(call)
    return out


def test_fake_program_implements_the_protocol():
    program = FakeSearchProgram()
    assert isinstance(program, AgentProgram)
    assert entry_agent(program, questions(1)[0]) == "rewriter"


# --------------------------------------------------------------------------------------------------
# Algorithm 2: fork_on


def test_fork_on_runs_one_to_one_then_g_fold_then_one_to_one():
    lm = FakeLM()
    trajs = fork_on(FakeSearchProgram(), questions(1)[0], "reranker", group_size=3, generate=lm, example_id="q")
    assert lm.calls == 1 + 3 + 3
    assert [(agent, len(p)) for agent, p in lm.requests] == [("rewriter", 1), ("reranker", 3), ("answerer", 3)]
    assert len(lm.requests[1][1]) == 3 and len(set(lm.requests[1][1])) == 1  # G copies of one prompt
    assert len(trajs) == 3
    shared = trajs[0].calls[0]
    assert all(t.calls[0] is shared for t in trajs)  # the prefix call is run once and shared
    assert [t.trajectory_id for t in trajs] == ["q/fork:reranker/t0", "q/fork:reranker/t1", "q/fork:reranker/t2"]
    assert [t.parent_id for t in trajs] == [None, "q/fork:reranker/t0", "q/fork:reranker/t0"]
    assert {t.fork_point for t in trajs} == {"reranker"}
    for t in trajs:
        assert [c.module for c in t.calls] == list(AGENTS)
        assert [c.parent_id for c in t.calls[1:]] == [c.call_id for c in t.calls[:-1]]
        assert t.final_output == t.calls[-1].completion and not t.failed
    groups = groups_by_id(trajs)
    sizes = {gid.split("/")[-1]: len(calls) for gid, calls in groups.items()}
    assert sizes == {"rewriter#0": 1, "reranker#0": 3, "answerer#0": 3}


class TwoPassRerankerProgram(FakeSearchProgram):
    """rewriter -> reranker -> reranker (a second pass) -> answerer."""

    order = ("rewriter", "reranker", "reranker", "answerer")

    def has_next(self, state):
        return len(state.outputs) < len(self.order)

    def next_agent(self, state):
        return self.order[len(state.outputs)]


def test_fork_happens_only_at_the_first_interaction_with_the_fork_agent():
    lm = FakeLM()
    trajs = fork_on(TwoPassRerankerProgram(), questions(1)[0], "reranker", group_size=3, generate=lm, example_id="q")
    assert len(trajs) == 3
    assert lm.calls == 1 + 3 + 3 + 3
    groups = {g.group_id: g for g in mhgpo_groups(trajs)}
    assert groups["q/fork:reranker/reranker#0"].kind == "homogeneous"
    assert groups["q/fork:reranker/reranker#1"].kind == "heterogeneous"
    assert [c.invocation_index for c in trajs[0].calls] == [0, 0, 1, 0]
    # IS keeps only the fork's own group of the reranker run, not its second pass.
    kept = {g.group_id for g in mhgpo_groups(independent_sampling(
        TwoPassRerankerProgram(), questions(1), group_size=2, generate=FakeLM(), example_ids=["q"]))}
    assert kept == {"q/fork:rewriter/rewriter#0", "q/fork:reranker/reranker#0", "q/fork:answerer/answerer#0"}


def test_runaway_program_and_bad_generator_are_reported():
    class Forever(FakeSearchProgram):
        def has_next(self, state):
            return True

        def next_agent(self, state):
            return "rewriter"

    with pytest.raises(RuntimeError, match="max_calls"):
        fork_on(Forever(), questions(1)[0], "rewriter", group_size=2, generate=FakeLM(), max_calls=5)
    with pytest.raises(ValueError, match="completions for"):
        fork_on(FakeSearchProgram(), questions(1)[0], "rewriter", group_size=2, generate=lambda a, p: ["x"])
    with pytest.raises(ValueError, match="group_size"):
        fork_on_first(FakeSearchProgram(), questions(1), group_size=0, generate=FakeLM())


def test_fork_on_does_not_mutate_state_and_records_parsed_output():
    trajs = fork_on(FakeSearchProgram(), questions(1)[0], "answerer", group_size=2, generate=FakeLM())
    assert trajs[0].calls[0].parsed == "REWRITER-0"
    assert [t.calls[-1].completion for t in trajs] == ["answerer-2", "answerer-3"]
    assert trajs[0].calls[:2] == trajs[1].calls[:2]


class SkipRerankerProgram(FakeSearchProgram):
    """Control flow that never reaches the reranker: rewriter -> answerer."""

    def has_next(self, state):
        return len(state.outputs) < 2

    def next_agent(self, state):
        return ("rewriter", "answerer")[len(state.outputs)]


def test_fork_agent_never_reached_gives_one_trajectory():
    lm = FakeLM()
    trajs = fork_on(SkipRerankerProgram(), questions(1)[0], "reranker", group_size=4, generate=lm)
    assert len(trajs) == 1 and trajs[0].fork_point is None and trajs[0].parent_id is None
    assert lm.calls == 2
    with pytest.raises(ValueError, match="not one of the program's agents"):
        fork_on(FakeSearchProgram(), questions(1)[0], "critic", group_size=4, generate=FakeLM())


def test_parse_failure_ends_the_fork_and_keeps_the_failing_call():
    lm = FakeLM(bad={2})  # completions: rewriter 0, 1 (fork at rewriter, G=2), then reranker 2 (BAD), 3
    trajs = fork_on(FakeSearchProgram(), questions(1)[0], "rewriter", group_size=2, generate=lm)
    failed = [t for t in trajs if t.failed]
    assert len(failed) == 1
    assert [c.module for c in failed[0].calls] == ["rewriter", "reranker"]
    assert failed[0].calls[-1].parsed_ok is False and failed[0].final_output is None
    ok = [t for t in trajs if not t.failed][0]
    assert [c.module for c in ok.calls] == list(AGENTS)
    assert lm.calls == 2 + 2 + 1  # the failed fork does not reach the answerer
    penalized = apply_format_failure(failed[0], -1.0, ["f1"])
    assert penalized.total_reward == -1.0 and penalized.rewards == {"f1": -1.0}


# --------------------------------------------------------------------------------------------------
# Algorithm 3: Fork-on-First


@pytest.mark.parametrize("g", [1, 2, 4, 5])
def test_fork_on_first_makes_n_times_g_calls_per_question(g):
    lm = FakeLM()
    trajs = fork_on_first(FakeSearchProgram(), questions(3), group_size=g, generate=lm, example_ids=["a", "b", "c"])
    assert lm.calls == 3 * len(AGENTS) * g
    assert len(lm.requests) == len(AGENTS)  # one batched generate call per agent per round
    assert len(trajs) == 3 * g
    groups = mhgpo_groups(trajs)
    assert len(groups) == 3 * len(AGENTS)
    for group in groups:
        assert len(group.members) == g
    if g > 1:
        kinds = {(gr.example_id, gr.module): gr.kind for gr in groups}
        assert kinds[("a", "rewriter")] == "homogeneous"
        assert kinds[("a", "reranker")] == "heterogeneous" and kinds[("c", "answerer")] == "heterogeneous"


def test_fork_on_first_with_a_repeated_example_keeps_ids_apart():
    trajs = fork_on_first(FakeSearchProgram(), questions(1) * 2, group_size=2, generate=FakeLM(),
                          example_ids=["x", "x"])
    assert len({t.trajectory_id for t in trajs}) == 4
    assert all(len(g.members) == 2 for g in mhgpo_groups(trajs))


# --------------------------------------------------------------------------------------------------
# Algorithm 4: Independent Sampling


@pytest.mark.parametrize("g", [2, 4])
def test_independent_sampling_gives_n_homogeneous_groups_of_g(g):
    lm = FakeLM()
    trajs = independent_sampling(FakeSearchProgram(), questions(2), group_size=g, generate=lm)
    groups = mhgpo_groups(trajs)
    assert len(groups) == 2 * len(AGENTS)
    for group in groups:
        assert len(group.members) == g and group.kind == "homogeneous"
        assert group.group_id.endswith(f"fork:{group.module}/{group.module}#0")
    assert Counter(gr.module for gr in groups) == dict.fromkeys(AGENTS, 2)
    # Rollout cost: fork at A1: 3G, at A2: 1 + 2G, at A3: 2 + G.
    assert lm.calls == 2 * (6 * g + 3)
    assert len(trajs) == 2 * len(AGENTS) * g


# --------------------------------------------------------------------------------------------------
# Algorithm 5: Round-Robin


def test_round_robin_regroups_singletons_into_groups_of_g():
    trajs = round_robin(FakeSearchProgram(), questions(10), group_size=4, probs=[0, 1, 0], generate=FakeLM(), rng=1)
    assert {t.fork_point for t in trajs} == {"reranker"}
    groups = groups_by_id(trajs)
    rr = {gid: calls for gid, calls in groups.items() if gid.startswith("rr/")}
    assert sorted(rr) == ["rr/rewriter/0", "rr/rewriter/1"]
    assert all(len(calls) == 4 for calls in rr.values())
    assert all(c.module == "rewriter" for calls in rr.values() for c in calls)
    # 10 rewriter singletons: 2 groups of 4, the 2 left over are out of training.
    leftovers = [c for c in unique_calls(trajs) if c.group_id is None]
    assert len(leftovers) == 2 and {c.module for c in leftovers} == {"rewriter"}
    assert all(len(calls) in (4,) for calls in groups.values())


def test_round_robin_draws_fork_agents_with_the_given_probabilities():
    examples = questions(300)
    trajs = round_robin(FakeSearchProgram(), examples, group_size=2, probs=[0.7, 0.1, 0.2], generate=FakeLM(),
                        rng=0)
    first = {}
    for t in trajs:
        first.setdefault(t.example_id, t.fork_point)
    share = Counter(first.values())
    assert abs(share["rewriter"] / 300 - 0.7) < 0.08
    assert abs(share["reranker"] / 300 - 0.1) < 0.06
    assert abs(share["answerer"] / 300 - 0.2) < 0.07
    again = round_robin(FakeSearchProgram(), examples, group_size=2, probs=[0.7, 0.1, 0.2], generate=FakeLM(),
                        rng=0)
    assert [t.fork_point for t in again] == [t.fork_point for t in trajs]
    assert [c.group_id for c in unique_calls(again)] == [c.group_id for c in unique_calls(trajs)]


def test_round_robin_rejects_bad_probabilities():
    for probs in ([0.5, 0.5], [0.5, 0.6, -0.1], [0.2, 0.2, 0.2]):
        with pytest.raises(ValueError, match="probs"):
            round_robin(FakeSearchProgram(), questions(1), group_size=2, probs=probs, generate=FakeLM())


def test_regroup_pools():
    trajs = [t for i in range(6) for t in fork_on(
        FakeSearchProgram(), {"question": f"q{i}"}, "answerer", group_size=2, generate=FakeLM(),
        example_id=f"e{i}")]
    # 6 rewriter and 6 reranker singletons.
    mixed = [t for t in trajs]
    regroup_singletons(mixed, group_size=4, rng=0, by="all")
    rr = {c.group_id for c in unique_calls(mixed) if c.group_id and c.group_id.startswith("rr/")}
    assert rr == {"rr/all/0", "rr/all/1", "rr/all/2"}
    modules = {gid: {c.module for c in unique_calls(mixed) if c.group_id == gid} for gid in rr}
    assert any(len(m) == 2 for m in modules.values())  # Algorithm 5 to the letter mixes agents


def test_regroup_by_module_and_fork_keeps_fork_points_apart():
    program = FakeSearchProgram()
    trajs = []
    for i, agent in enumerate(["reranker"] * 4 + ["answerer"] * 4):
        trajs += fork_on(program, {"question": f"q{i}"}, agent, group_size=2, generate=FakeLM(), example_id=f"e{i}")
    regroup_singletons(trajs, group_size=4, by="module_fork")
    ids = sorted({c.group_id for c in unique_calls(trajs) if c.group_id and c.group_id.startswith("rr/")})
    assert ids == ["rr/reranker@answerer/0", "rr/rewriter@answerer/0", "rr/rewriter@reranker/0"]


# --------------------------------------------------------------------------------------------------
# Eq. 4: backward propagation, and agent-specific rewards


def test_docstring_examples():
    import doctest

    import trainer.rollouts.sampling

    result = doctest.testmod(trainer.rollouts.sampling)
    assert result.failed == 0 and result.attempted > 0
