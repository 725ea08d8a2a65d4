"""MMGRPO grouping: Algorithm 1, PadGroups, SelectKDiverseElements, teacher mixtures."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.algorithms.advantages import gdpo_advantages, grpo_advantages
from trainer.algorithms.grouping import (
    form_module_level_groups,
    module_group_codes,
    pad_groups,
    relative_invocation_indices,
    select_k_diverse,
)
from trainer.algorithms.groups import GroupMember, ModuleGroup, assign_advantages, group_reward_arrays
from trainer.algorithms.teacher_mix import sample_teacher_rollouts, teacher_rollout_plan
from trainer.rollouts.trajectory import ModuleCall, Trajectory

FAST = settings(max_examples=150, deadline=None)


def make_traj(example_id, modules, reward, *, tid="", teacher=None, rewards=None):
    calls = [ModuleCall(m, 0, f"{tid}:{m}:{i}:prompt", f"{tid}:{m}:{i}", True, call_id=f"{tid}/{i}")
             for i, m in enumerate(modules)]
    return Trajectory(example_id, calls, rewards=rewards or {}, total_reward=reward, trajectory_id=tid,
                      teacher=teacher)


def sample_var(values):
    return float(np.var(values, ddof=1)) if len(values) > 1 else 0.0


# --------------------------------------------------------------------------------------------------
# SelectKDiverseElements


def test_select_k_diverse_down_sampling_examples():
    assert select_k_diverse([0.5, 0.0, 1.0, 0.4, 0.9], 2) == [1, 2]
    # 8 zeros and 4 ones, keep 4: two of each is the maximum-variance subset.
    picked = select_k_diverse([0.0] * 8 + [1.0] * 4, 4)
    assert sorted(np.array([0.0] * 8 + [1.0] * 4)[picked]) == [0.0, 0.0, 1.0, 1.0]
    assert select_k_diverse([3.0, 1.0, 2.0], 3) == [0, 1, 2]


def test_select_k_diverse_up_sampling_keeps_every_element_once():
    out = select_k_diverse([0.0, 1.0, 1.0], 5)
    assert sorted(out[:3]) == [0, 1, 2] and len(out) == 5
    values = np.array([0.0, 1.0, 1.0])[out]
    assert sorted(values) == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert select_k_diverse([2.0], 3) == [0, 0, 0]


def test_select_k_diverse_nan_chosen_last_and_never_copied():
    r = [np.nan, 1.0, 0.0, np.nan, 0.5]
    assert select_k_diverse(r, 2) == [1, 2]
    assert sorted(select_k_diverse(r, 4)) == [0, 1, 2, 4]  # all three valid, then the first NaN
    up = select_k_diverse(r, 7)
    assert sorted(up[:5]) == [0, 1, 2, 3, 4] and set(up[5:]) <= {1, 2}
    assert select_k_diverse([np.nan, np.nan], 3) == [0, 1, 0]


def test_select_k_diverse_rejects_bad_arguments():
    with pytest.raises(ValueError):
        select_k_diverse([1.0, 2.0], 0)
    with pytest.raises(ValueError):
        select_k_diverse([], 2)


def test_select_k_diverse_is_deterministic_given_the_seed_and_breaks_ties_randomly():
    r = [0.0] * 6 + [1.0] * 6
    assert select_k_diverse(r, 4, rng=3) == select_k_diverse(r, 4, rng=3)
    assert select_k_diverse(r, 4) == [0, 1, 10, 11]  # no rng: ties follow the stable sort by value
    picks = {tuple(select_k_diverse(r, 4, rng=seed)) for seed in range(20)}
    assert len(picks) > 5
    for p in picks:
        assert sorted(np.array(r)[list(p)]) == [0.0, 0.0, 1.0, 1.0]


small_rewards = st.lists(
    st.one_of(st.sampled_from([0.0, 1.0, 0.5, 2.0]), st.floats(-5, 5, allow_nan=False)), min_size=1, max_size=8
)


@FAST
@given(small_rewards, st.data())
def test_select_k_diverse_down_sampling_equals_brute_force(rewards, data):
    """Also the check of the claim the implementation relies on: an optimal k-subset is a prefix plus a
    suffix of the sorted rewards."""
    k = data.draw(st.integers(1, len(rewards)))
    picked = select_k_diverse(rewards, k, rng=data.draw(st.none() | st.integers(0, 99)))
    assert len(picked) == k and len(set(picked)) == k
    best = max(sample_var([rewards[i] for i in c]) for c in itertools.combinations(range(len(rewards)), k))
    assert sample_var([rewards[i] for i in picked]) == pytest.approx(best, rel=1e-9, abs=1e-9)


@FAST
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=5), st.integers(1, 4))
def test_select_k_diverse_up_sampling_equals_brute_force(rewards, extra):
    n = len(rewards)
    k = n + extra
    picked = select_k_diverse(rewards, k)
    assert len(picked) == k and sorted(set(picked)) == list(range(n))
    best = max(
        sample_var(rewards + [rewards[i] for i in c]) for c in itertools.combinations_with_replacement(range(n), extra)
    )
    assert sample_var([rewards[i] for i in picked]) == pytest.approx(best, rel=1e-9, abs=1e-9)


# --------------------------------------------------------------------------------------------------
# PadGroups and Algorithm 1


def test_paper_example_two_modules_three_rollouts_three_groups():
    # MMGRPO 3.1: M1 twice and M2 once in each of R=3 rollouts -> three groups of three, no padding.
    trajs = [make_traj("ex", ["M1", "M2", "M1"], r, tid=f"t{i}") for i, r in enumerate([0.0, 1.0, 0.5])]
    groups = form_module_level_groups(trajs, group_size=3)
    assert [(g.module, g.invocation_index) for g in groups] == [("M1", 0), ("M1", 1), ("M2", 0)]
    for g in groups:
        assert [m.trajectory.trajectory_id for m in g.members] == ["t0", "t1", "t2"]
        assert not any(m.padded or m.duplicated for m in g.members)
    # The second M1 group holds each rollout's second M1 call (its 3rd call overall).
    assert [m.call.call_id for m in groups[1].members] == ["t0/2", "t1/2", "t2/2"]


def test_fill_pads_with_the_trajectorys_own_call_and_truncate_drops():
    a = make_traj("ex", ["M", "M", "M"], 1.0, tid="a")
    b = make_traj("ex", ["M"], 0.0, tid="b")
    c = make_traj("ex", ["N"], 0.5, tid="c")  # never calls M
    fill = form_module_level_groups([a, b, c], group_size=2, fill_strategy="last")
    m_groups = [g for g in fill if g.module == "M"]
    assert len(m_groups) == 3  # max_j K_{M,j} = 3
    for g in m_groups[1:]:
        padded = [m for m in g.members if m.padded]
        assert [m.call.call_id for m in padded] == ["b/0"]  # b lends its only M call
        assert padded[0].trajectory.trajectory_id == "b"
    trunc = form_module_level_groups([a, b, c], group_size=2, padding="truncate")
    assert [g.module for g in trunc] == []  # min over trajectories is 0 for both M and N
    trunc_ab = form_module_level_groups([a, b], group_size=2, padding="truncate")
    assert [(g.module, g.invocation_index) for g in trunc_ab] == [("M", 0)]


def test_fill_random_strategy_picks_among_own_calls_reproducibly():
    a = make_traj("ex", ["M"] * 6, 1.0, tid="a")
    b = make_traj("ex", ["M"] * 3, 0.0, tid="b")
    groups = form_module_level_groups([a, b], group_size=2, rng=5)
    picks = [m.call.call_id for g in groups for m in g.members if m.padded]
    assert len(picks) == 3 and set(picks) <= {"b/0", "b/1", "b/2"}
    again = form_module_level_groups([a, b], group_size=2, rng=5)
    assert picks == [m.call.call_id for g in again for m in g.members if m.padded]


def test_short_group_is_completed_by_up_sampling():
    trajs = [make_traj("ex", ["M"], r, tid=f"t{i}") for i, r in enumerate([0.0, 1.0])]
    trajs.append(make_traj("ex", ["N"], 0.2, tid="n"))
    groups = form_module_level_groups(trajs, group_size=4)
    m = next(g for g in groups if g.module == "M")
    assert len(m.members) == 4
    assert [x.duplicated for x in m.members] == [False, False, True, True]
    assert sorted(x.trajectory.reward for x in m.members) == [0.0, 0.0, 1.0, 1.0]


def test_down_sampling_keeps_the_most_diverse_rollouts():
    rewards = [0.5, 0.5, 0.0, 0.5, 1.0, 0.5]
    trajs = [make_traj("ex", ["M"], r, tid=f"t{i}") for i, r in enumerate(rewards)]
    (group,) = form_module_level_groups(trajs, group_size=2)
    assert sorted(m.trajectory.reward for m in group.members) == [0.0, 1.0]


def test_pad_groups_validates_mode():
    with pytest.raises(ValueError, match="padding"):
        pad_groups([["a"]], "zero")
    with pytest.raises(ValueError, match="group_size"):
        form_module_level_groups([], group_size=0)


def test_groups_never_mix_examples():
    trajs = [make_traj(ex, ["M"], r, tid=f"{ex}{i}") for ex in ("e1", "e2") for i, r in enumerate([0.0, 1.0])]
    groups = form_module_level_groups(trajs, group_size=2)
    assert [g.group_id for g in groups] == ["e1/M#0", "e2/M#0"]
    assert {m.trajectory.example_id for m in groups[1].members} == {"e2"}


@st.composite
def rollout_sets(draw):
    modules = ["A", "B", "C"][: draw(st.integers(1, 3))]
    n_traj = draw(st.integers(1, 6))
    trajs = []
    for j in range(n_traj):
        seq = draw(st.lists(st.sampled_from(modules), max_size=7))
        reward = draw(st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.none()))
        trajs.append(make_traj("ex", seq, reward, tid=f"t{j}"))
    return trajs


@FAST
@given(rollout_sets(), st.integers(1, 8), st.sampled_from(["fill", "truncate"]), st.integers(0, 3))
def test_group_count_and_every_group_has_exactly_g_members(trajs, g, padding, seed):
    groups = form_module_level_groups(trajs, group_size=g, padding=padding, rng=seed)
    counts = {}
    for t in trajs:
        for m in {c.module for c in t.calls}:
            counts.setdefault(m, [0] * len(trajs))
    for j, t in enumerate(trajs):
        for c in t.calls:
            counts[c.module][j] += 1
    agg = max if padding == "fill" else min
    assert len(groups) == sum(agg(v) for v in counts.values())
    for group in groups:
        assert len(group.members) == g
        originals = [m for m in group.members if not m.duplicated]
        # At most one member per rollout before up-sampling copies.
        assert len({m.trajectory.trajectory_id for m in originals}) == len(originals)
        for m in group.members:
            assert m.call in m.trajectory.calls and m.call.module == group.module
            if padding == "truncate":
                assert not m.padded


# --------------------------------------------------------------------------------------------------
# Arrays in and out, and the vectorized key of Algorithm 1


def test_group_rewards_into_gdpo_and_advantages_back():
    rows = [{"format": 1.0, "correct": 0.0}, {"format": 1.0, "correct": 1.0},
            {"format": 0.0, "correct": 0.0}, {"format": 1.0, "correct": None}]
    trajs = [make_traj("ex", ["M", "N"], None, tid=f"t{i}", rewards=r) for i, r in enumerate(rows)]
    groups = form_module_level_groups(trajs, group_size=4)
    r, ids = group_reward_arrays(groups, reward_names=["format", "correct"])
    assert r.shape == (8, 2) and ids.tolist() == [0] * 4 + [1] * 4
    assert math.isnan(r[3, 1])
    adv = gdpo_advantages(r, ids)
    assign_advantages(groups, adv)
    assert [m.call.advantage for m in groups[0].members] == pytest.approx(adv[:4].tolist())
    assert trajs[1].calls[0].advantage == max(adv[:4])  # format 1 and correct 1: the best rollout
    with pytest.raises(ValueError):
        assign_advantages(groups, adv[:3])


def test_group_reward_arrays_scalar_and_call_sources():
    t0, t1 = make_traj("e", ["M"], 1.0, tid="a"), make_traj("e", ["M"], None, tid="b")
    t0.calls[0].propagated_reward, t0.calls[0].specific_reward = 0.5, -0.5
    groups = form_module_level_groups([t0, t1], group_size=2)
    r, _ = group_reward_arrays(groups)
    assert r[0] == 1.0 and math.isnan(r[1])
    rc, _ = group_reward_arrays(groups, source="call")
    assert rc[0] == 0.0 and math.isnan(rc[1])
    with pytest.raises(ValueError):
        group_reward_arrays(groups, source="call", reward_names=["x"])


def test_vectorized_algorithm1_matches_the_object_path():
    rng = np.random.default_rng(0)
    modules = ["rewriter", "reranker", "answerer"]
    pattern = ["rewriter", "reranker", "reranker", "answerer"]
    trajs = [make_traj(f"q{q}", pattern, float(rng.integers(2)), tid=f"q{q}t{j}") for q in range(3) for j in range(4)]
    groups = form_module_level_groups(trajs, group_size=4)
    by_call = {m.call.call_id: g.group_id for g in groups for m in g.members}
    calls = [(t, c) for t in trajs for c in t.calls]
    traj_codes = [trajs.index(t) for t, _ in calls]
    mod_codes = [modules.index(c.module) for _, c in calls]
    ex_codes = [int(t.example_id[1:]) for t, _ in calls]
    inv = relative_invocation_indices(traj_codes, mod_codes)
    assert inv.tolist()[:4] == [0, 0, 1, 0]
    codes = module_group_codes(ex_codes, mod_codes, inv)
    # Same partition of calls into groups.
    pairs = {(by_call[c.call_id], int(code)) for (_, c), code in zip(calls, codes, strict=True)}
    assert len(pairs) == len(groups) == len(set(codes.tolist())) == 3 * 4


# --------------------------------------------------------------------------------------------------
# Teacher mixtures (MMGRPO 3.2, Algorithm 2 SampleTeacherRollouts)


def test_teacher_plan_requires_the_student():
    assert teacher_rollout_plan({"student": 3, "gpt": 1}, student="student") == ["student"] * 3 + ["gpt"]
    with pytest.raises(ValueError, match="must include the student"):
        teacher_rollout_plan({"gpt": 4}, student="student")
    with pytest.raises(ValueError, match="must include the student"):
        teacher_rollout_plan({"gpt": 4, "student": 0}, student="student")
    with pytest.raises(ValueError, match="non-negative"):
        teacher_rollout_plan({"student": 2, "gpt": -1}, student="student")


def test_teacher_rollouts_are_grouped_under_the_students_modules():
    def run(teacher, example, i):
        names = ["rewrite", "answer"] if teacher == "student" else ["big.rewrite", "big.answer"]
        return make_traj(example, names, float(i % 2), tid=f"{teacher}{i}")

    trajs = sample_teacher_rollouts("q1", {"student": 2, "big": 2}, run, student="student")
    assert [t.teacher for t in trajs] == ["student", "student", "big", "big"]
    groups = form_module_level_groups(
        trajs, group_size=4, module_map={("big", "big.rewrite"): "rewrite", "big.answer": "answer"}
    )
    assert [g.group_id for g in groups] == ["q1/rewrite#0", "q1/answer#0"]
    assert {m.trajectory.teacher for m in groups[0].members} == {"student", "big"}
    unmapped = form_module_level_groups(trajs, group_size=4)
    assert len(unmapped) == 4  # without the map the teacher's modules would form their own groups


def test_group_to_dict_is_json_and_kind():
    c0 = ModuleCall("m", 0, "same prompt", "a", True, call_id="c0")
    c1 = ModuleCall("m", 0, "same prompt", "b", True, call_id="c1")
    c2 = ModuleCall("m", 0, "other prompt", "b", True, call_id="c2")
    t = Trajectory("e", trajectory_id="t")
    homo = ModuleGroup("g", "m", 0, [GroupMember(c0, t), GroupMember(c1, t, duplicated=True, advantage=0.5)])
    assert homo.kind == "homogeneous"
    hetero = ModuleGroup("h", "m", 0, [GroupMember(c0, t), GroupMember(c2, t)])
    assert hetero.kind == "heterogeneous"
    data = json.loads(json.dumps(homo.to_dict()))
    assert data["members"][1] == {"call_id": "c1", "trajectory_id": "t", "padded": False, "duplicated": True,
                                  "advantage": 0.5, "reward": None, "reward_components": {}}
    assert (data["reward_mean"], data["reward_var"], data["similarity"]) == (None, None, None)


def test_grpo_on_module_groups_sums_to_zero_per_group():
    trajs = [make_traj("ex", ["A", "B"], r, tid=f"t{i}") for i, r in enumerate([0.0, 1.0, 1.0, 0.25])]
    groups = form_module_level_groups(trajs, group_size=3)
    r, ids = group_reward_arrays(groups)
    adv = grpo_advantages(r, ids)
    for g in range(len(groups)):
        assert adv[ids == g].sum() == pytest.approx(0.0, abs=1e-12)


def test_docstring_examples():
    import doctest

    import trainer.algorithms.grouping

    result = doctest.testmod(trainer.algorithms.grouping)
    assert result.failed == 0 and result.attempted > 0
