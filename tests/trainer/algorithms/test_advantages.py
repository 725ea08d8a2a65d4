"""GRPO / GDPO advantages: the papers' numbers, then properties on random batches."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trainer.algorithms.advantages import (
    conditioned_reward,
    factorize_groups,
    gdpo_advantages,
    group_stats,
    grpo_advantages,
)

FAST = settings(max_examples=120, deadline=None)
R2 = 1 / math.sqrt(2)  # 0.7071: (+-0.5) / std(0, 1) with ddof=1


# --------------------------------------------------------------------------------------------------
# GDPO paper, Figure 2: two rollouts, two binary rewards


def test_figure2_grpo_sum_gives_0_7071_and_gdpo_gives_1_4142():
    rewards = [[0, 0], [1, 1]]  # (0, 1) on both rewards
    assert grpo_advantages(rewards, [7, 7], eps=0.0) == pytest.approx([-R2, R2], abs=1e-12)
    gdpo = gdpo_advantages(rewards, [7, 7], batch_norm=False, eps=0.0)
    assert gdpo == pytest.approx([-1.4142, 1.4142], abs=1e-4)
    # With the default eps = 1e-4 on every std the numbers move only in the 4th decimal.
    assert grpo_advantages(rewards, [7, 7]) == pytest.approx([-0.70706, 0.70706], abs=1e-5)
    assert gdpo_advantages(rewards, [7, 7], batch_norm=False) == pytest.approx([-1.41401, 1.41401], abs=1e-5)


def _fig2_enumeration():
    """Every ordered assignment of two binary rewards to two rollouts: 16 groups of two."""
    for a, b in itertools.product(itertools.product((0, 1), repeat=2), repeat=2):
        yield [list(a), list(b)]


def test_figure2_grpo_collapses_to_two_advantage_groups_gdpo_keeps_three():
    grpo_groups, gdpo_groups = set(), set()
    totals_to_grpo = {}
    for rewards in _fig2_enumeration():
        grpo = tuple(sorted(np.round(grpo_advantages(rewards, [0, 0], eps=0.0), 4)))
        gdpo = tuple(sorted(np.round(gdpo_advantages(rewards, [0, 0], batch_norm=False, eps=0.0), 4)))
        grpo_groups.add(grpo)
        gdpo_groups.add(gdpo)
        totals_to_grpo.setdefault(tuple(sorted(sum(r) for r in rewards)), set()).add(grpo)
    assert grpo_groups == {(0.0, 0.0), (-0.7071, 0.7071)}
    assert gdpo_groups == {(0.0, 0.0), (-0.7071, 0.7071), (-1.4142, 1.4142)}
    # (0, 1), (0, 2) and (1, 2) all collapse onto the same GRPO advantages.
    for totals in [(0, 1), (0, 2), (1, 2)]:
        assert totals_to_grpo[totals] == {(-0.7071, 0.7071)}
    for totals in [(0, 0), (1, 1), (2, 2)]:
        assert totals_to_grpo[totals] == {(0.0, 0.0)}


def test_figure2_gdpo_distinguishes_0_1_from_0_2():
    one = gdpo_advantages([[0, 0], [1, 0]], [0, 0], batch_norm=False, eps=0.0)
    two = gdpo_advantages([[0, 0], [1, 1]], [0, 0], batch_norm=False, eps=0.0)
    assert one == pytest.approx([-R2, R2])
    assert two == pytest.approx([-2 * R2, 2 * R2])


def test_gdpo_batch_normalization_eq6():
    # Eq. 6 on (-1.4142, 1.4142): mean 0, std 2 -> (-0.7071, 0.7071).
    assert gdpo_advantages([[0, 0], [1, 1]], [0, 0], eps=0.0) == pytest.approx([-R2, R2])
    # Two groups: the batch step rescales both by the same std.
    rewards = [[0, 0], [1, 1], [0, 0], [1, 0]]
    pre = gdpo_advantages(rewards, [0, 0, 1, 1], batch_norm=False, eps=0.0)
    assert pre == pytest.approx([-2 * R2, 2 * R2, -R2, R2])
    post = gdpo_advantages(rewards, [0, 0, 1, 1], eps=0.0)
    assert post == pytest.approx(pre / pre.std(ddof=1))


def test_gdpo_weights_eq7():
    rewards = [[0, 0], [1, 0], [0, 1], [1, 1]]
    a = math.sqrt(3) / 2  # 0.5 / std(0, 1, 0, 1) with ddof=1
    got = gdpo_advantages(rewards, [0] * 4, weights=[2.0, 1.0], batch_norm=False, eps=0.0)
    assert got == pytest.approx([-3 * a, a, -a, 3 * a])


def test_grpo_weighted_sum_eq1_and_scales():
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    totals = rewards @ [3.0, 1.0]  # (3, 1, 4)
    got = grpo_advantages(rewards, [0, 0, 0], weights=[3.0, 1.0])
    assert got == pytest.approx((totals - totals.mean()) / (totals.std(ddof=1) + 1e-4))


def test_grpo_batch_and_none_scales():
    r = [0.0, 1.0, 0.0, 3.0]
    ids = ["a", "a", "b", "b"]
    batch_std = np.std(r, ddof=1)  # sqrt(2)
    assert grpo_advantages(r, ids, scale="batch") == pytest.approx(
        np.array([-0.5, 0.5, -1.5, 1.5]) / (batch_std + 1e-4)
    )
    assert grpo_advantages(r, ids, scale="none") == pytest.approx([-0.5, 0.5, -1.5, 1.5])
    assert grpo_advantages(r, ids) == pytest.approx(
        [-0.5 / (R2 + 1e-4), 0.5 / (R2 + 1e-4), -1.5 / (1.5 * 2 * R2 + 1e-4), 1.5 / (1.5 * 2 * R2 + 1e-4)]
    )


def test_dr_grpo_keeps_0_1_and_0_2_apart():
    # GDPO Section 2: without the std, (0, 1) -> (-0.5, 0.5) and (0, 2) -> (-1, 1).
    assert grpo_advantages([0.0, 1.0], [0, 0], scale="none") == pytest.approx([-0.5, 0.5])
    assert grpo_advantages([0.0, 2.0], [0, 0], scale="none") == pytest.approx([-1.0, 1.0])


def test_explicit_group_ids_not_blocks():
    r = [1.0, 5.0, 0.0, 7.0]
    interleaved = grpo_advantages(r, ["x", "y", "x", "y"], eps=0.0)
    assert interleaved == pytest.approx([R2, -R2, -R2, R2])


def test_nan_member_gets_zero_and_is_left_out():
    r = [1.0, np.nan, 0.0]
    assert grpo_advantages(r, [0, 0, 0], eps=0.0) == pytest.approx([R2, 0.0, -R2])
    rk = [[1.0, np.nan], [0.0, 1.0], [np.nan, 0.0]]
    # Column 0 is (1, 0) over members 0, 1; column 1 is (1, 0) over members 1, 2.
    pre = gdpo_advantages(rk, [0, 0, 0], batch_norm=False, eps=0.0)
    assert pre == pytest.approx([R2, -R2 + R2, -R2])
    # An all-NaN row: 0, and out of the batch statistics.
    rows = [[1.0, 1.0], [0.0, 0.0], [np.nan, np.nan]]
    out = gdpo_advantages(rows, [0, 0, 0], eps=0.0)
    assert out == pytest.approx([R2, -R2, 0.0])


def test_grpo_all_nan_row_in_2d_is_left_out_but_partial_rows_use_known_components():
    rows = [[1.0, np.nan], [0.0, 0.0], [np.nan, np.nan]]
    assert grpo_advantages(rows, [0, 0, 0], eps=0.0) == pytest.approx([R2, -R2, 0.0])


def test_singleton_and_constant_groups_are_zero_exactly():
    r = [0.1, 0.1, 0.1, 3.0, 0.7, 0.2]
    ids = [0, 0, 0, 1, 2, 2]
    out = grpo_advantages(r, ids)
    assert out[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert out[4] > 0 > out[5]
    rk = np.column_stack([r, r])
    assert gdpo_advantages(rk, ids)[:4].tolist() == [0.0] * 4


def test_all_constant_batch_gives_zeros():
    assert gdpo_advantages([[1.0, 2.0], [1.0, 2.0]], [0, 0]).tolist() == [0.0, 0.0]
    assert grpo_advantages([], []).shape == (0,)
    assert gdpo_advantages(np.zeros((0, 2)), []).shape == (0,)


def test_cancelling_rewards_do_not_blow_rounding_noise_up_to_unit_advantages():
    # Two rewards whose group advantages cancel exactly in theory: every A is 0 up to one ulp, so the
    # batch step must give 0, not noise divided by a noise-sized std.
    r = np.array([[3.0, 0.0], [0.0, 1.0], [1.0, 7.0], [1.0, 7.0]])
    out = gdpo_advantages(r, [0, 0, 1, 1], eps=0.0)
    assert out.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_docstring_examples():
    import doctest

    import trainer.algorithms.advantages

    assert doctest.testmod(trainer.algorithms.advantages).failed == 0


def test_conditioned_reward_eq8():
    r = np.array([[1.0, 0.8], [0.5, 0.9], [0.0, 0.7], [np.nan, 0.4]])
    got = conditioned_reward(r, target=1, condition=0, threshold=0.5)
    assert got[:, 1].tolist()[:3] == [0.8, 0.9, 0.0]
    assert math.isnan(got[3, 1])
    assert got[:, 0].tolist()[:3] == [1.0, 0.5, 0.0]
    assert r[2, 1] == 0.7  # input untouched


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="weights"):
        gdpo_advantages([[0, 1], [1, 0]], [0, 0], weights=[1.0])
    with pytest.raises(ValueError, match="scale"):
        grpo_advantages([0, 1], [0, 0], scale="median")
    with pytest.raises(ValueError, match="one label per reward row"):
        grpo_advantages([0, 1, 2], [0, 0])
    with pytest.raises(ValueError, match="shape"):
        grpo_advantages(np.zeros((2, 2, 2)), [0, 0])


def test_factorize_groups_accepts_tuples_and_strings():
    codes, first = factorize_groups([("a", 1), ("b", 0), ("a", 1)])
    assert codes.tolist() == [0, 1, 0] and first.tolist() == [0, 1]
    codes, first = factorize_groups(np.array([10, 3, 10, 5]))
    assert codes.tolist() == [2, 0, 2, 1] and first.tolist() == [1, 3, 0]


def test_group_stats_unbiased_std_and_nan():
    s = group_stats([[2.0], [4.0], [np.nan], [9.0]], [0, 0, 0, 1])
    assert s.count[:, 0].tolist() == [2.0, 1.0]
    assert s.mean[:, 0].tolist() == [3.0, 9.0]
    assert s.std[0, 0] == pytest.approx(math.sqrt(2))
    assert s.std[1, 0] == 0.0 and not s.spread[1, 0]


# --------------------------------------------------------------------------------------------------
# Properties on random batches


def _reference_gdpo(r, ids, w, eps, batch_norm):
    """A per-group Python loop, written straight from GDPO Eq. 4-7 and the conventions."""
    n, k = r.shape
    a = np.zeros(n)
    signal = np.zeros(n, dtype=bool)
    for g in set(ids):
        members = [i for i in range(n) if ids[i] == g]
        for col in range(k):
            vals = [r[i, col] for i in members if not math.isnan(r[i, col])]
            if len(vals) < 2 or max(vals) == min(vals):
                continue
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
            for i in members:
                if not math.isnan(r[i, col]):
                    a[i] += w[col] * (r[i, col] - mean) / (std + eps)
                    signal[i] = True
    if not batch_norm:
        return a
    present = [i for i in range(n) if not all(math.isnan(x) for x in r[i])]
    vals = [a[i] for i in present]
    if len(vals) < 2 or max(vals) == min(vals):
        return np.zeros(n)
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return np.where(signal, (a - mean) / (std + eps), 0.0)


known_value = st.one_of(
    st.sampled_from([0.0, 1.0, 0.5, -1.0, 3.0]),
    st.floats(-10, 10, allow_nan=False).map(lambda x: round(x, 3)),
)
reward_value = st.one_of(known_value, st.just(float("nan")))


@st.composite
def batches(draw, k_min=1, k_max=3, nan=True):
    n = draw(st.integers(1, 24))
    k = draw(st.integers(k_min, k_max))
    values = reward_value if nan else known_value
    r = np.array(draw(st.lists(st.lists(values, min_size=k, max_size=k), min_size=n, max_size=n)))
    ids = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    return r, ids


@FAST
@given(batches(), st.booleans(), st.lists(st.floats(0.1, 3.0), min_size=3, max_size=3))
def test_gdpo_matches_the_per_group_loop(batch, batch_norm, w):
    r, ids = batch
    w = np.array(w[: r.shape[1]])
    got = gdpo_advantages(r, ids, weights=w, batch_norm=batch_norm)
    assert got == pytest.approx(_reference_gdpo(r, ids.tolist(), w, 1e-4, batch_norm), abs=1e-9)


@FAST
@given(batches(k_max=1), st.sampled_from(["group", "batch", "none"]))
def test_grpo_group_advantages_sum_to_zero(batch, scale):
    r, ids = batch
    out = grpo_advantages(r[:, 0], ids, scale=scale)
    assert np.isfinite(out).all()
    for g in np.unique(ids):
        assert out[ids == g].sum() == pytest.approx(0.0, abs=1e-8)
    assert (out[np.isnan(r[:, 0])] == 0).all()


@FAST
@given(batches(k_min=2))
def test_gdpo_batch_output_has_mean_0_and_std_1(batch):
    r, ids = batch
    out = gdpo_advantages(r, ids)
    pre = gdpo_advantages(r, ids, batch_norm=False)
    present = ~np.isnan(r).all(axis=1)
    assume(present.sum() >= 2)
    s = pre[present].std(ddof=1)
    assume(s > 1e-9)  # below, the A are 0 up to rounding and the output is 0 by convention
    assert out[present].mean() == pytest.approx(0.0, abs=1e-9)
    # std is s / (s + eps): 1 up to the eps added to the batch std.
    assert out[present].std(ddof=1) == pytest.approx(s / (s + 1e-4), rel=1e-9)
    if s > 0.1:
        assert abs(out[present].std(ddof=1) - 1.0) < 1e-3


@FAST
@given(
    batches(k_min=2, nan=True),
    st.integers(0, 2),
    st.sampled_from([-4.0, -0.5, 0.25, 2.0, 7.0]),
    st.sampled_from([0.5, 2.0, 3.0, 10.0]),
)
def test_gdpo_invariant_to_shifting_or_scaling_one_reward(batch, column, shift, factor):
    r, ids = batch
    column = column % r.shape[1]
    base = gdpo_advantages(r, ids)
    shifted = r.copy()
    shifted[:, column] += shift
    assert gdpo_advantages(shifted, ids) == pytest.approx(base, abs=1e-6)
    # Scaling is exact without eps (eps does not scale with the reward).
    scaled = r.copy()
    scaled[:, column] *= factor
    assert gdpo_advantages(scaled, ids, eps=0.0) == pytest.approx(gdpo_advantages(r, ids, eps=0.0), abs=1e-9)


@FAST
@given(batches(), st.integers(0, 5), st.sampled_from(["group", "batch", "none"]))
def test_adding_a_nan_member_changes_nothing(batch, group, scale):
    r, ids = batch
    r2 = np.vstack([r, np.full((1, r.shape[1]), np.nan)])
    ids2 = np.append(ids, group)
    for fn in (lambda x, i: gdpo_advantages(x, i), lambda x, i: grpo_advantages(x, i, scale=scale)):
        out = fn(r2, ids2)
        assert out[-1] == 0.0
        assert out[:-1] == pytest.approx(fn(r, ids), abs=1e-12)


@FAST
@given(batches(k_max=2, nan=False), st.sampled_from(["group", "batch", "none"]))
def test_singleton_and_constant_groups_give_zero(batch, scale):
    r, ids = batch
    for out in (grpo_advantages(r, ids, scale=scale), gdpo_advantages(r, ids)):
        for g in np.unique(ids):
            rows = r[ids == g]
            if len(rows) == 1 or (rows == rows[0]).all():
                assert (out[ids == g] == 0.0).all()


@FAST
@given(batches(), st.randoms(use_true_random=False))
def test_order_of_members_does_not_matter(batch, rnd):
    r, ids = batch
    perm = list(range(len(ids)))
    rnd.shuffle(perm)
    perm = np.array(perm)
    relabel = {g: f"group-{g * 7 % 11}" for g in range(6)}  # labels need not be ints or consecutive
    labels = np.array([relabel[g] for g in ids[perm]])
    assert gdpo_advantages(r[perm], labels) == pytest.approx(gdpo_advantages(r, ids)[perm], abs=1e-9)
    assert grpo_advantages(r[perm], labels) == pytest.approx(grpo_advantages(r, ids)[perm], abs=1e-9)
