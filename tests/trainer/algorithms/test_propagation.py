"""MHGPO's reward propagation (Eq. 4), agent-specific rewards and groups (Eq. 5), on rollouts sampled by
the fake search program of tests/trainer/rollouts/test_sampling.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.trainer.rollouts.test_sampling import AGENTS, FakeLM, FakeSearchProgram, questions
from trainer.algorithms.advantages import grpo_advantages
from trainer.algorithms.groups import assign_advantages, group_reward_arrays
from trainer.algorithms.propagation import apply_specific_rewards, mhgpo_groups, propagate_rewards
from trainer.rollouts.sampling import fork_on, fork_on_first
from trainer.rollouts.trajectory import Trajectory


def test_propagation_mean_over_direct_successors():
    trajs = fork_on(FakeSearchProgram(), questions(1)[0], "reranker", group_size=2, generate=FakeLM())
    trajs[0].total_reward, trajs[1].total_reward = 1.0, 0.0
    propagate_rewards(trajs)
    rewriter, rer0, ans0 = trajs[0].calls
    _, rer1, ans1 = trajs[1].calls
    assert (ans0.propagated_reward, ans1.propagated_reward) == (1.0, 0.0)
    assert (rer0.propagated_reward, rer1.propagated_reward) == (1.0, 0.0)
    assert rewriter.propagated_reward == 0.5


def test_propagation_through_nested_forks_and_unknown_rewards():
    trajs = fork_on(FakeSearchProgram(), questions(1)[0], "rewriter", group_size=3, generate=FakeLM())
    for t, r in zip(trajs, [1.0, None, 0.25], strict=True):
        t.total_reward = r
    propagate_rewards(trajs)
    assert [t.calls[0].propagated_reward for t in trajs] == [1.0, None, 0.25]
    assert trajs[1].calls[1].propagated_reward is None


def test_propagation_on_a_hand_built_tree_and_a_failed_branch():
    # root -> a -> (b1 -> c1: 1.0), (b2 -> c2: 0.0), (b3: failed, -1.0); root also -> d: 0.5
    from trainer.rollouts.trajectory import ModuleCall

    def call(cid, parent):
        return ModuleCall("m", 0, "q", cid, True, call_id=cid, parent_id=parent)

    root, a, d = call("root", None), call("a", "root"), call("d", "root")
    b1, b2, b3, c1, c2 = call("b1", "a"), call("b2", "a"), call("b3", "a"), call("c1", "b1"), call("c2", "b2")
    trajs = [Trajectory("e", [root, a, b1, c1], total_reward=1.0), Trajectory("e", [root, a, b2, c2], total_reward=0.0),
             Trajectory("e", [root, a, b3], total_reward=-1.0, failed=True), Trajectory("e", [root, d], total_reward=0.5)]
    propagate_rewards(trajs)
    assert a.propagated_reward == pytest.approx(0.0)  # mean(1, 0, -1)
    assert root.propagated_reward == pytest.approx(0.25)  # mean(a=0, d=0.5)
    assert b3.propagated_reward == -1.0


def test_propagation_without_ids_follows_the_trajectory_order():
    from trainer.rollouts.trajectory import ModuleCall

    calls = [ModuleCall(m, 0, "q", "o", True) for m in AGENTS]
    traj = Trajectory("e", calls, rewards={"f1": 0.75})
    propagate_rewards([traj])
    assert [c.propagated_reward for c in calls] == [0.75, 0.75, 0.75]


def test_specific_rewards_add_to_the_shared_reward():
    trajs = fork_on_first(FakeSearchProgram(), questions(1), group_size=2, generate=FakeLM())
    trajs[0].total_reward, trajs[1].total_reward = 1.0, 0.0
    propagate_rewards(trajs)
    apply_specific_rewards(trajs, {"answerer": lambda c: -1.0 if c.completion.endswith("4") else 0.0,
                                   "rewriter": lambda c: -0.5})
    ans = [t.calls[-1] for t in trajs]
    assert [c.completion for c in ans] == ["answerer-4", "answerer-5"]
    assert [c.reward for c in ans] == [0.0, 0.0]  # 1 - 1 and 0 + 0
    assert [t.calls[0].reward for t in trajs] == [0.5, -0.5]
    assert trajs[0].calls[1].specific_reward == 0.0


def test_end_to_end_fof_advantages_per_heterogeneous_group():
    trajs = fork_on_first(FakeSearchProgram(), questions(2), group_size=4, generate=FakeLM())
    for t, r in zip(trajs, itertools.cycle([1.0, 0.0, 0.5, 0.0]), strict=False):
        t.total_reward = r
    propagate_rewards(trajs)
    groups = mhgpo_groups(trajs)
    rewards, ids = group_reward_arrays(groups, source="call")
    adv = grpo_advantages(rewards, ids)
    assign_advantages(groups, adv)
    for gi in range(len(groups)):
        assert adv[ids == gi].sum() == pytest.approx(0.0, abs=1e-12)
    best = [t for t in trajs if t.total_reward == 1.0]
    assert all(c.advantage > 0 for t in best for c in t.calls)
    assert np.unique(np.round(adv, 6)).size == 3  # rewards 1, 0.5, 0 (twice) -> three values


def test_docstring_examples():
    import doctest

    import trainer.algorithms.propagation

    result = doctest.testmod(trainer.algorithms.propagation)
    assert result.failed == 0 and result.attempted > 0
