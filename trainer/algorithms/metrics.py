"""Group metrics the dashboard plots per step: how much signal each module's groups carry.

- group reward variance and the share of zero-variance groups (a group whose rewards are all equal, or
  that has fewer than two, gives every member advantage 0: no learning signal);
- intra-group similarity: mean pairwise token F1 of the completions (MHGPO paper 001, Fig. 9), which
  climbs as heterogeneous groups turn de facto homogeneous during training;
- advantage resolution: distinct advantage values over distinct reward vectors within groups (GDPO
  paper 002, Section 2 and Fig. 3): below 1 when different reward combinations collapse onto the same
  advantage.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainer.algorithms.advantages import factorize_groups, group_stats
from trainer.algorithms.groups import ModuleGroup
from trainer.rewards.text import f1_tokens, normalize_answer
from trainer.rewards.text import token_f1 as _token_f1

__all__ = [
    "advantage_resolution",
    "annotate_group_stats",
    "group_reward_variance",
    "intra_group_similarity",
    "module_group_metrics",
    "normalize_answer",
    "token_f1",
    "zero_variance_share",
]

def token_f1(a: str, b: str) -> float:
    """Token-level F1 between two texts after SQuAD normalization (the F1 of MHGPO Fig. 9; symmetric).
    Two texts that normalize to nothing score 1; one empty and one not score 0. The same function
    the F1 reward uses (``trainer.rewards.text``), so a metric and a reward never disagree.

    Example::

        >>> round(token_f1("The cat sat on the mat.", "a cat sat"), 4)   # 'cat sat on mat' vs 'cat sat'
        0.6667
        >>> token_f1("Paris!", "paris"), token_f1("", "the"), token_f1("x", "")
        (1.0, 1.0, 0.0)
    """
    return _token_f1(a, b)


def intra_group_similarity(texts: Sequence[str]) -> float:
    """Intra-group similarity (MHGPO Fig. 9): mean token F1 over all unordered pairs of the group's
    completions. ``nan`` for fewer than two texts (no pair to compare).

    Example::

        >>> round(intra_group_similarity(["a b", "a b", "c d"]), 4)   # pairs: 1, 0, 0
        0.3333
    """
    tokens = [normalize_answer(t).split() for t in texts]
    if len(tokens) < 2:
        return math.nan
    scores = [f1_tokens(a, b) for a, b in itertools.combinations(tokens, 2)]
    return sum(scores) / len(scores)


def group_reward_variance(rewards: Any, group_ids: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Unbiased variance of the rewards within each group, NaN left out; ``nan`` for a group with fewer
    than two valid rewards. ``rewards`` (N,), result (n_groups,) in ``factorize_groups`` code order.

    Example::

        >>> group_reward_variance([0.0, 1.0, 1.0, 1.0, np.nan], ["a", "a", "b", "b", "c"]).tolist()
        [0.5, 0.0, nan]
    """
    stats = group_stats(np.asarray(rewards, dtype=float).reshape(-1), group_ids)
    return np.where(stats.count[:, 0] >= 2, stats.var[:, 0], np.nan)


def zero_variance_share(rewards: Any, group_ids: Sequence[Any] | np.ndarray) -> float:
    """Share of groups that give no learning signal: fewer than two valid rewards, or all equal (their
    advantages are all 0 under GRPO). ``nan`` when there is no group.

    Example::

        >>> zero_variance_share([0.0, 1.0, 1.0, 1.0, 0.5], ["a", "a", "b", "b", "c"])   # b constant, c alone
        0.6666666666666666
    """
    r = np.asarray(rewards, dtype=float).reshape(-1)
    if r.size == 0:
        return math.nan
    stats = group_stats(r, group_ids)
    return float(np.mean(~stats.spread[:, 0]))


def advantage_resolution(
    rewards: Any, advantages: Any, group_ids: Sequence[Any] | np.ndarray, *, decimals: int = 6
) -> dict[str, float]:
    """GDPO's advantage resolution (Section 2, Fig. 2-3): within each group, count the distinct reward
    vectors and the distinct advantages (rounded to ``decimals``), summed over groups. Advantages are a
    function of the reward vector inside a group, so ``resolution`` = advantages / reward vectors is at
    most 1; below 1 means different reward combinations collapsed onto one advantage.

    Example (rewards r1 = (1, 0, 0, 0), r2 = (0, 1, 1, 0): GRPO on the sum sees totals (1, 1, 1, 0))::

        >>> from trainer.algorithms.advantages import gdpo_advantages, grpo_advantages
        >>> r, g = [[1, 0], [0, 1], [0, 1], [0, 0]], [0, 0, 0, 0]
        >>> advantage_resolution(r, grpo_advantages(r, g), g)
        {'distinct_advantages': 2, 'distinct_reward_vectors': 3, 'resolution': 0.6666666666666666}
        >>> advantage_resolution(r, gdpo_advantages(r, g), g)["resolution"]
        1.0
    """
    r = np.asarray(rewards, dtype=float)
    r = r[:, None] if r.ndim == 1 else r  # (N, K)
    adv = np.asarray(advantages, dtype=float).reshape(-1)  # (N,)
    if r.shape[0] == 0:
        return {"distinct_advantages": 0, "distinct_reward_vectors": 0, "resolution": math.nan}
    codes, _ = factorize_groups(group_ids)
    missing = np.isnan(r)
    # + 0.0 turns -0.0 into 0.0: np.unique over rows compares bytes.
    reward_rows = np.column_stack([codes, np.where(missing, 0.0, r) + 0.0, missing])
    adv_rows = np.column_stack([codes, np.round(adv, decimals) + 0.0])
    n_rewards = len(np.unique(reward_rows, axis=0))
    n_adv = len(np.unique(adv_rows, axis=0))
    return {"distinct_advantages": n_adv, "distinct_reward_vectors": n_rewards, "resolution": n_adv / n_rewards}


def module_group_metrics(
    groups: Sequence[ModuleGroup], rewards: Any, advantages: Any = None
) -> dict[str, float]:
    """The per-step group metrics, keyed for ``StepMetric`` (``group_var/<module>`` etc.).

    ``rewards`` (M,) scalar or (M, K) per-reward member rewards and ``advantages`` (M,) in the member
    order of ``group_reward_arrays(groups)``; with K columns the variance metrics use the row sums.
    Per module: ``group_var`` (mean within-group variance), ``zero_var_share``, ``similarity`` (mean
    intra-group similarity of the completions); with advantages, ``adv_resolution`` over all groups.

    Example::

        >>> from trainer.algorithms.advantages import grpo_advantages
        >>> from trainer.algorithms.grouping import form_module_level_groups
        >>> from trainer.algorithms.groups import group_reward_arrays
        >>> from trainer.rollouts.trajectory import ModuleCall, Trajectory
        >>> trajs = [Trajectory("q", [ModuleCall("answerer", 0, "q", text, True)], total_reward=r)
        ...          for text, r in [("paris", 1.0), ("paris france", 0.0), ("london", 0.0)]]
        >>> groups = form_module_level_groups(trajs, group_size=3)
        >>> r, ids = group_reward_arrays(groups)
        >>> {k: round(v, 4) for k, v in module_group_metrics(groups, r, grpo_advantages(r, ids)).items()}
        {'group_var/answerer': 0.3333, 'zero_var_share/answerer': 0.0, 'similarity/answerer': 0.2222, 'adv_resolution': 1.0}
    """
    r = np.asarray(rewards, dtype=float)
    groups = [g for g in groups if g.members]  # an empty group has no member rows
    ids = np.asarray([gi for gi, g in enumerate(groups) for _ in g.members], dtype=np.intp)  # (M,)
    if r.shape[0] != ids.size:
        raise ValueError(f"{r.shape[0]} rewards for {ids.size} group members")
    out: dict[str, float] = {}
    if ids.size == 0:
        return out
    if r.ndim == 2:
        total = np.nansum(r, axis=1)
        total[np.isnan(r).all(axis=1)] = np.nan
    else:
        total = r
    # ids are 0..n_groups-1 in group order, so per-group arrays line up with ``groups``.
    variance = group_reward_variance(total, ids)  # (n_groups,)
    no_signal = ~group_stats(total, ids).spread[:, 0]  # (n_groups,)
    similarity = np.asarray([intra_group_similarity([m.call.completion for m in g.members]) for g in groups])
    modules = np.asarray([g.module for g in groups])
    for module in dict.fromkeys(g.module for g in groups):
        mask = modules == module
        out[f"group_var/{module}"] = _nanmean(variance[mask])
        out[f"zero_var_share/{module}"] = float(np.mean(no_signal[mask]))
        out[f"similarity/{module}"] = _nanmean(similarity[mask])
    if advantages is not None:
        out["adv_resolution"] = advantage_resolution(r, advantages, ids)["resolution"]
    return out


def annotate_group_stats(
    groups: Sequence[ModuleGroup],
    rewards: Any,
    *,
    reward_names: Sequence[str] | None = None,
    weights: Any = None,
) -> None:
    """Store on each group and member what its advantages were computed from, for the step event.

    ``rewards`` are the member rewards in ``group_reward_arrays(groups)`` order: (M,) scalars (the
    trajectory reward r of MMGRPO Section 3.1, or the call reward R = shared + specific of MHGPO
    Eq. 4), or (M, K) components ``reward_names`` (GDPO's r_1..r_K, after Eq. 8 conditioning). Each
    member gets ``reward`` (with K columns the weighted sum ``sum_k w_k r_k`` of GDPO Eq. 1, NaN
    left out) and ``reward_components``; each group ``reward_mean``, ``reward_var`` (unbiased, NaN
    left out; None below two valid rewards) and ``similarity`` (``intra_group_similarity`` of its
    completions, MHGPO Fig. 9).

    Example::

        >>> from trainer.algorithms.groups import GroupMember, ModuleGroup
        >>> from trainer.rollouts.trajectory import ModuleCall, Trajectory
        >>> calls = [ModuleCall("answerer", 0, "q", text, True) for text in ("paris", "paris", "rome")]
        >>> g = ModuleGroup("q/answerer#0", "answerer", 0, [GroupMember(c, Trajectory("q")) for c in calls])
        >>> annotate_group_stats([g], [[1, 1], [1, 0], [0, 0]], reward_names=["format", "correct"])
        >>> [m.reward for m in g.members], g.members[1].reward_components, g.reward_mean, g.reward_var
        ([2.0, 1.0, 0.0], {'format': 1.0, 'correct': 0.0}, 1.0, 1.0)
        >>> round(g.similarity, 4)   # pairs: 1, 0, 0
        0.3333
    """
    r = np.asarray(rewards, dtype=float)
    members = [m for g in groups for m in g.members]
    if r.shape[0] != len(members):
        raise ValueError(f"{r.shape[0]} rewards for {len(members)} group members")
    if r.ndim == 2:
        if reward_names is None or len(reward_names) != r.shape[1]:
            raise ValueError("rewards with K columns need reward_names, one name per column")
        w = np.ones(r.shape[1]) if weights is None else np.asarray(weights, dtype=float).reshape(-1)
        total = np.nansum(r * w, axis=1)  # (M,)
        total[np.isnan(r).all(axis=1)] = np.nan
    else:
        total = r.reshape(-1)
    for i, member in enumerate(members):
        member.reward = None if np.isnan(total[i]) else float(total[i])
        if r.ndim == 2:
            member.reward_components = {name: (None if np.isnan(v) else float(v))
                                        for name, v in zip(reward_names, r[i].tolist(), strict=True)}
    start = 0
    for group in groups:
        values = total[start:start + len(group.members)]
        start += len(group.members)
        valid = values[~np.isnan(values)]
        group.reward_mean = float(valid.mean()) if valid.size else None
        group.reward_var = float(valid.var(ddof=1)) if valid.size >= 2 else None
        similarity = intra_group_similarity([m.call.completion for m in group.members])
        group.similarity = None if math.isnan(similarity) else similarity


def _nanmean(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else math.nan
