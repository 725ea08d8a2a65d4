"""Group metrics: token F1 (SQuAD), intra-group similarity (MHGPO Fig. 9), variance, resolution."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.algorithms.advantages import gdpo_advantages, grpo_advantages
from trainer.algorithms.groups import GroupMember, ModuleGroup
from trainer.algorithms.metrics import (
    advantage_resolution,
    group_reward_variance,
    intra_group_similarity,
    module_group_metrics,
    normalize_answer,
    token_f1,
    zero_variance_share,
)
from trainer.rollouts.trajectory import ModuleCall, Trajectory

FAST = settings(max_examples=100, deadline=None)


def test_squad_normalization():
    assert normalize_answer("The Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a pear; THE end.") == "apple pear end"
    assert normalize_answer("theatre another") == "theatre another"  # articles only as whole words
    assert normalize_answer("  a  ") == ""


def test_token_f1_numbers():
    assert token_f1("The cat sat on the mat.", "a cat sat") == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert token_f1("Barack Obama", "barack obama!") == 1.0
    assert token_f1("red red blue", "red red green") == pytest.approx(2 / 3)  # multiset overlap: 2 of 3
    assert token_f1("x", "y") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("the", "") == 1.0 and token_f1("", "word") == 0.0


@FAST
@given(st.text(alphabet="ab the,.", max_size=20), st.text(alphabet="ab the,.", max_size=20))
def test_token_f1_symmetric_and_bounded(a, b):
    assert token_f1(a, b) == pytest.approx(token_f1(b, a))
    assert 0.0 <= token_f1(a, b) <= 1.0
    assert token_f1(a, a) == 1.0


def test_intra_group_similarity_mean_pairwise_f1():
    texts = ["paris france", "paris", "london"]
    expected = (token_f1(texts[0], texts[1]) + 0.0 + 0.0) / 3
    assert intra_group_similarity(texts) == pytest.approx(expected) == pytest.approx((2 / 3) / 3)
    assert intra_group_similarity(["same answer"] * 4) == 1.0
    assert math.isnan(intra_group_similarity(["alone"]))
    assert math.isnan(intra_group_similarity([]))


def test_group_reward_variance_and_zero_variance_share():
    r = [0.0, 1.0, 1.0, 1.0, np.nan, 2.0, 2.0, 4.0]
    ids = ["a", "a", "b", "b", "c", "d", "d", "d"]
    var = group_reward_variance(r, ids)
    assert var[0] == pytest.approx(0.5) and var[1] == 0.0 and math.isnan(var[2])
    assert var[3] == pytest.approx(np.var([2.0, 2.0, 4.0], ddof=1))
    assert zero_variance_share(r, ids) == 0.5  # b constant, c has no valid pair
    assert math.isnan(zero_variance_share([], []))


def test_advantage_resolution_on_figure2_enumeration():
    # All 16 two-rollout assignments of two binary rewards, one group each (GDPO Figure 2).
    rows, ids = [], []
    for g, (a, b) in enumerate(itertools.product(itertools.product((0, 1), repeat=2), repeat=2)):
        rows += [list(a), list(b)]
        ids += [g, g]
    rows = np.array(rows, dtype=float)
    grpo = advantage_resolution(rows, grpo_advantages(rows, ids), ids)
    gdpo = advantage_resolution(rows, gdpo_advantages(rows, ids), ids)
    assert grpo["distinct_reward_vectors"] == gdpo["distinct_reward_vectors"] == 28  # 16 groups, 4 with a tie
    # Within one group the pair (0,1) vs (1,0) is a tie for both methods (GDPO's two per-reward
    # advantages cancel), so both count 26; Figure 2's gain is across groups (test_advantages).
    assert grpo["distinct_advantages"] == 26 and gdpo["distinct_advantages"] == 26
    # A group where GDPO keeps a distinction GRPO drops.
    r = [[1, 0], [0, 1], [0, 1], [0, 0]]
    g = [0] * 4
    assert advantage_resolution(r, grpo_advantages(r, g), g)["resolution"] == pytest.approx(2 / 3)
    assert advantage_resolution(r, gdpo_advantages(r, g), g)["resolution"] == 1.0


def test_advantage_resolution_handles_nan_and_empty():
    r = [[1.0, np.nan], [1.0, 0.0], [0.0, np.nan]]
    out = advantage_resolution(r, [0.5, 0.5, -1.0], [0, 0, 0])
    assert out == {"distinct_advantages": 2, "distinct_reward_vectors": 3, "resolution": 2 / 3}
    assert math.isnan(advantage_resolution(np.zeros((0, 2)), [], [])["resolution"])


def _group(gid, module, completions, rewards):
    members = []
    for i, (text, r) in enumerate(zip(completions, rewards, strict=True)):
        call = ModuleCall(module, 0, "p", text, True, call_id=f"{gid}/{i}")
        members.append(GroupMember(call, Trajectory("e", [call], total_reward=r)))
    return ModuleGroup(gid, module, 0, members)


def test_module_group_metrics_keys_and_values():
    groups = [
        _group("g1", "rewriter", ["who is x", "who is x"], [0.0, 1.0]),
        _group("g2", "rewriter", ["a b", "c d"], [1.0, 1.0]),
        _group("g3", "answerer", ["paris", "paris france"], [0.0, 0.5]),
        ModuleGroup("empty", "answerer", 0, []),
    ]
    rewards = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 0.5])
    ids = np.array([0, 0, 1, 1, 2, 2])
    out = module_group_metrics(groups, rewards, grpo_advantages(rewards, ids))
    assert out["group_var/rewriter"] == pytest.approx((0.5 + 0.0) / 2)
    assert out["zero_var_share/rewriter"] == 0.5
    assert out["similarity/rewriter"] == pytest.approx((1.0 + 0.0) / 2)
    assert out["group_var/answerer"] == pytest.approx(0.125)
    assert out["zero_var_share/answerer"] == 0.0
    assert out["similarity/answerer"] == pytest.approx(2 / 3)
    assert out["adv_resolution"] == 1.0
    two_col = module_group_metrics(groups, np.column_stack([rewards, rewards]))
    assert two_col["group_var/rewriter"] == pytest.approx(1.0)  # variance of the row sums
    with pytest.raises(ValueError):
        module_group_metrics(groups, rewards[:3])


def test_docstring_examples():
    import doctest

    import trainer.algorithms.metrics

    result = doctest.testmod(trainer.algorithms.metrics)
    assert result.failed == 0 and result.attempted > 0


def test_annotate_group_stats_records_what_advantages_came_from():
    from trainer.algorithms.grouping import form_module_level_groups
    from trainer.algorithms.groups import group_reward_arrays
    from trainer.algorithms.metrics import annotate_group_stats
    from trainer.rollouts.trajectory import ModuleCall, Trajectory

    trajs = [Trajectory("q", [ModuleCall("answerer", 0, "q", text, True)], rewards={"fmt": f, "acc": a},
                        trajectory_id=f"t{i}")
             for i, (text, f, a) in enumerate([("paris", 1.0, 1.0), ("paris", 1.0, None), ("rome", 0.0, 0.0)])]
    groups = form_module_level_groups(trajs, group_size=4)  # up-sampled: one duplicate
    r, _ = group_reward_arrays(groups, reward_names=["fmt", "acc"])
    annotate_group_stats(groups, r, reward_names=["fmt", "acc"], weights=[1.0, 2.0])
    (g,) = groups
    totals = [m.reward for m in g.members]
    assert sorted(totals) == sorted([3.0, 1.0, 0.0, totals[3]])  # 1 + 2*1, 1 (acc unknown), 0, the copy
    assert g.members[1].reward_components == {"fmt": 1.0, "acc": None}
    assert g.reward_mean == pytest.approx(np.mean(totals))
    assert g.reward_var == pytest.approx(np.var(totals, ddof=1))
    assert 0.0 < g.similarity < 1.0
    data = g.to_dict()
    assert data["reward_var"] == g.reward_var and data["members"][0]["reward_components"]["acc"] == 1.0


def test_annotate_group_stats_scalar_rewards_and_groups_without_signal():
    from trainer.algorithms.groups import GroupMember, ModuleGroup
    from trainer.algorithms.metrics import annotate_group_stats
    from trainer.rollouts.trajectory import ModuleCall, Trajectory

    alone = ModuleGroup("a", "m", 0, [GroupMember(ModuleCall("m", 0, "q", "x", True), Trajectory("e"))])
    unknown = ModuleGroup("b", "m", 0, [GroupMember(ModuleCall("m", 0, "q", "x", True), Trajectory("e")),
                                        GroupMember(ModuleCall("m", 0, "q", "y", True), Trajectory("e"))])
    annotate_group_stats([alone, unknown], [0.5, np.nan, np.nan])
    assert (alone.reward_mean, alone.reward_var, alone.similarity) == (0.5, None, None)
    assert (unknown.reward_mean, unknown.reward_var) == (None, None)
    assert [m.reward for m in unknown.members] == [None, None] and unknown.members[0].reward_components == {}
    with pytest.raises(ValueError, match="2 rewards for 3"):
        annotate_group_stats([alone, unknown], [0.0, 1.0])
