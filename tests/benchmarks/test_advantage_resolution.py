"""benchmarks/advantage_resolution.py (GDPO paper, Figures 2 and 3): the enumerated counts of small
cases worked by hand, and the paper's stated Figure 2 numbers, through Cohort's own estimators."""

import numpy as np

from benchmarks.advantage_resolution import counts, outcomes, table
from trainer.algorithms.advantages import gdpo_advantages, grpo_advantages

PAIR = [0, 0]  # one group of two rollouts


def test_two_rollouts_two_binary_rewards_is_figure_2():
    # Rollout reward vectors in {00, 01, 10, 11}; unordered pairs: 4 + C(4, 2) = 10 outcomes.
    # GRPO sees only the totals (0..2): equal totals give (0, 0); any unequal pair gives (-0.7071, 0.7071)
    # because the group std scales 1 and 2 apart alike: 2 groups. Without the std, a gap of 1 gives
    # (-0.5, 0.5) and a gap of 2 (-1, 1): 3 groups. GDPO: per reward each column is (0, 0) or
    # (-0.7071, 0.7071), so the sums are 0, +-0.7071 or +-1.4142: 3 groups.
    assert len(outcomes(2, 2)) == 10
    assert counts(2, 2) == {"outcomes": 10, "GRPO": 2, "GRPO w/o std": 3, "GDPO": 3}


def test_three_rollouts_one_reward_by_hand():
    # 000, 001, 011, 111: all-equal outcomes give zeros; 001 gives (-0.577, -0.577, 1.155) and 011 its
    # mirror (-1.155, 0.577, 0.577), which is a different multiset: 3 groups for every estimator.
    assert counts(3, 1) == {"outcomes": 4, "GRPO": 3, "GRPO w/o std": 3, "GDPO": 3}


def test_figure_2_totals_0_1_and_0_2_collapse_under_grpo_and_stay_apart_under_gdpo():
    one, two = [[0, 0], [1, 0]], [[0, 0], [1, 1]]  # totals (0, 1) and (0, 2)
    grpo = [grpo_advantages(r, PAIR, eps=0.0).round(4).tolist() for r in (one, two)]
    assert grpo == [[-0.7071, 0.7071], [-0.7071, 0.7071]]
    gdpo = [gdpo_advantages(r, PAIR, batch_norm=False, eps=0.0).round(4).tolist() for r in (one, two)]
    assert gdpo == [[-0.7071, 0.7071], [-1.4142, 1.4142]]
    no_std = [grpo_advantages(r, PAIR, scale="none").round(4).tolist() for r in (one, two)]
    assert no_std == [[-0.5, 0.5], [-1.0, 1.0]]  # the paper's "removing the std" numbers


def test_three_rollouts_totals_1_1_1_from_heterogeneous_partitions():
    """The paper (Section 3) says GDPO gives non-zero advantages to totals (1, 1, 1) made of r1 = (1, 1, 0),
    r2 = (0, 0, 1). Under its own Eq. 4-5 with equal weights it does not: with two binary rewards whose
    sum is 1 for every rollout, r2 = 1 - r1, so r2 normalized is exactly minus r1 normalized and the
    sum is 0. What GDPO does keep apart is that partition from the homogeneous (1, 1, 1) = r1 alone:
    the per-reward advantages differ, and so does everything downstream that reads them."""
    rewards = np.asarray([[1, 0], [1, 0], [0, 1]], dtype=float)
    group = [0, 0, 0]
    assert grpo_advantages(rewards, group, eps=0.0).tolist() == [0.0, 0.0, 0.0]
    assert np.allclose(gdpo_advantages(rewards, group, batch_norm=False, eps=0.0), 0.0)
    per_reward = [gdpo_advantages(rewards[:, [k]], group, batch_norm=False, eps=0.0) for k in (0, 1)]
    assert np.allclose(per_reward[0], [0.5774, 0.5774, -1.1547], atol=1e-4)
    assert np.allclose(per_reward[1], -per_reward[0])
    # With unequal weights (Eq. 7) the cancellation is gone.
    weighted = gdpo_advantages(rewards, group, weights=[1.0, 0.5], batch_norm=False, eps=0.0)
    assert np.abs(weighted).min() > 0.2


def test_the_table_covers_both_sweeps_and_gdpo_never_resolves_less():
    rows = table()
    assert [(r["rollouts"], r["rewards"]) for r in rows[:2]] == [(2, 2), (3, 2)]
    assert [r["rewards"] for r in rows if r["rollouts"] == 4][-6:] == [1, 2, 3, 4, 5, 6]
    assert all(r["GDPO"] >= r["GRPO w/o std"] >= r["GRPO"] for r in rows)
    four_three = next(r for r in rows if (r["rollouts"], r["rewards"]) == (4, 3))
    assert four_three == {"rollouts": 4, "rewards": 3, "outcomes": 330, "GRPO": 14, "GRPO w/o std": 20, "GDPO": 45}
