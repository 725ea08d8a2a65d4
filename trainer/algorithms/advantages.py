"""Group-relative advantages: GRPO (and its batch-std and Dr. GRPO variants) and GDPO.

Conventions (docs/explanation/algorithms.md):

- groups are explicit: every function takes ``group_ids`` (one label per member, any order);
- std is the unbiased one (ddof=1) and ``eps`` is added to every std: ``(r - mean) / (std + eps)``;
- a group with fewer than two valid rewards, or whose valid rewards are all equal, gives 0;
- NaN rewards (a reward function returned ``None``) are left out of means and stds, and a member whose
  reward is NaN gets advantage 0 (it carries no information about how good its completion was).

Everything is vectorized over groups: members are mapped to integer group codes once, and per-group
sums come from one ``np.bincount`` over ``code * K + column`` for all K reward columns at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "GroupStats",
    "conditioned_reward",
    "factorize_groups",
    "gdpo_advantages",
    "group_stats",
    "grpo_advantages",
]


def factorize_groups(group_ids: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map group labels to integer codes: returns ``codes`` (N,) in ``0..n_groups-1`` and ``first``
    (n_groups,), the index of each group's first member.

    Labels may be ints, strings, or any hashable (tuples go through a dict). Codes follow the sorted
    order of labels for numeric/string labels and first appearance otherwise.

    Example::

        >>> codes, first = factorize_groups(["b", "a", "b", "c"])
        >>> codes.tolist(), first.tolist()
        ([1, 0, 1, 2], [1, 0, 3])
    """
    arr = None
    if not (isinstance(group_ids, (list, tuple)) and group_ids and isinstance(group_ids[0], tuple)):
        arr = np.asarray(group_ids)
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in "biufUS":
        _, first, codes = np.unique(arr, return_index=True, return_inverse=True)
        return codes.reshape(-1).astype(np.intp), first.astype(np.intp)
    seen: dict[Any, int] = {}
    firsts: list[int] = []
    codes_list = []
    for i, label in enumerate(group_ids):
        code = seen.get(label)
        if code is None:
            code = seen[label] = len(seen)
            firsts.append(i)
        codes_list.append(code)
    return np.asarray(codes_list, dtype=np.intp), np.asarray(firsts, dtype=np.intp)


@dataclass(frozen=True)
class GroupStats:
    """Per-group, per-column statistics of a (N, K) reward array, NaN left out.

    ``count``, ``mean``, ``var`` and ``std`` (ddof=1; 0 without spread) and ``spread`` (at least two
    valid values, not all equal) have shape (n_groups, K); ``codes`` (N,) maps members to groups and
    ``first`` (n_groups,) gives each group's first member. See ``group_stats`` for an example.
    """

    codes: np.ndarray
    first: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    std: np.ndarray
    spread: np.ndarray


def _as_2d(rewards: Any) -> np.ndarray:
    r = np.asarray(rewards, dtype=float)
    if r.ndim == 1:
        return r[:, None]
    if r.ndim != 2:
        raise ValueError(f"rewards must have shape (N,) or (N, K), got {r.shape}")
    return r


def group_stats(rewards: Any, group_ids: Sequence[Any] | np.ndarray) -> GroupStats:
    """Group means and unbiased stds of every reward column, NaN left out (the statistics of
    GRPO Eq. 2 / GDPO Eq. 4 / MHGPO Eq. 5).

    Example::

        >>> s = group_stats([[1.0, 0.0], [3.0, np.nan], [5.0, 2.0]], ["g", "g", "h"])
        >>> s.mean.tolist(), s.count.tolist(), s.spread.tolist()
        ([[2.0, 0.0], [5.0, 2.0]], [[2.0, 1.0], [1.0, 1.0]], [[True, False], [False, False]])
        >>> round(float(s.std[0, 0]), 4)   # std of (1, 3) with ddof=1
        1.4142
    """
    r = _as_2d(rewards)  # (N, K)
    codes, first = _codes_for(r, group_ids)
    count, mean, var, spread, _ = _moments(r, codes, len(first))
    return GroupStats(codes=codes, first=first, count=count, mean=mean, var=var, std=np.sqrt(var), spread=spread)


def _codes_for(r: np.ndarray, group_ids: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    codes, first = factorize_groups(group_ids)
    if codes.shape != (r.shape[0],):
        raise ValueError(
            f"group_ids must have one label per reward row: {codes.shape[0]} labels, {r.shape[0]} rows"
        )
    return codes, first


def _moments(r: np.ndarray, codes: np.ndarray, n_groups: int):
    """Per-(group, column) count, mean, unbiased var and spread (G, K), and each member's deviation
    from its group mean (N, K): exactly 0 for NaN entries, singletons and constant groups."""
    n, k = r.shape
    size = n_groups * k
    flat = (codes[:, None] * k + np.arange(k)).ravel()  # (N*K,) index of (group, column)
    values = r.ravel()
    valid = ~np.isnan(values)
    # Shift every (group, column) by one of its own values (whichever the scatter keeps). Members equal
    # to it become exactly 0, so a constant group gets deviations exactly 0 instead of the ulp noise
    # of a float mean ("std 0 gives 0" holds exactly), and the sums below cancel less.
    anchor = np.zeros(size)
    anchor[flat[valid]] = values[valid]
    shifted = np.where(valid, values - np.take(anchor, flat), 0.0)  # (N*K,)
    count = np.bincount(flat, weights=valid, minlength=size)
    differing = np.bincount(flat, weights=shifted != 0, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_shift = np.bincount(flat, weights=shifted, minlength=size) / count  # NaN when count is 0
    # Two passes (mean, then squared deviations) instead of E[x^2] - E[x]^2, which cancels badly.
    dev = np.where(valid, shifted - np.take(mean_shift, flat), 0.0)
    sq = np.bincount(flat, weights=dev * dev, minlength=size)
    spread = (count >= 2) & (differing > 0)
    var = np.where(spread, sq / np.maximum(count - 1, 1), 0.0)
    shape = (n_groups, k)
    return (count.reshape(shape), (anchor + mean_shift).reshape(shape), var.reshape(shape),
            spread.reshape(shape), dev.reshape(n, k))


def _weights(weights: Any, k: int) -> np.ndarray:
    if weights is None:
        return np.ones(k)
    w = np.asarray(weights, dtype=float).reshape(-1)
    if w.shape != (k,):
        raise ValueError(f"weights must have one value per reward column ({k}), got {w.shape[0]}")
    return w


def grpo_advantages(
    rewards: Any,
    group_ids: Sequence[Any] | np.ndarray,
    *,
    weights: Any = None,
    scale: Literal["group", "batch", "none"] = "group",
    eps: float = 1e-4,
) -> np.ndarray:
    """GRPO advantages on the (weighted) reward sum: GDPO paper Eq. 1-2, MHGPO Eq. 3/5.

    ``rewards`` (N,) or (N, K); with K columns the total is ``sum_k w_k r_k`` (Eq. 1, weights default
    to 1) over the columns that are not NaN, as TRL does; a row that is all NaN is left out. Then

    - ``scale="group"``: ``(r - mean_group) / (std_group + eps)`` (Eq. 2);
    - ``scale="batch"``: ``(r - mean_group) / (std_batch + eps)``, std over every valid reward;
    - ``scale="none"``: ``r - mean_group`` (Dr. GRPO, GDPO Section 2).

    Members of a group with fewer than two valid totals, or all-equal totals, get 0; so do NaN rows.
    Returns (N,) floats.

    Example (GDPO Figure 2, two rollouts, two binary rewards: every non-tied pair collapses to the same
    advantages)::

        >>> grpo_advantages([[0, 0], [0, 1]], [0, 0], eps=0.0).round(4).tolist()   # totals (0, 1)
        [-0.7071, 0.7071]
        >>> grpo_advantages([[0, 0], [1, 1]], [0, 0], eps=0.0).round(4).tolist()   # totals (0, 2)
        [-0.7071, 0.7071]
        >>> grpo_advantages([[0, 0], [0, 1]], [0, 0]).round(5).tolist()   # eps=1e-4: -0.5 / (0.70711 + 1e-4)
        [-0.70701, 0.70701]
        >>> grpo_advantages([[0, 0], [1, 1]], [0, 0], scale="none").tolist()  # Dr. GRPO keeps (0, 2) apart
        [-1.0, 1.0]
    """
    r = np.asarray(rewards, dtype=float)
    if r.ndim == 2:
        w = _weights(weights, r.shape[1])
        total = np.nansum(r * w, axis=1)  # (N,)
        total[np.isnan(r).all(axis=1)] = np.nan
    elif r.ndim == 1:
        total = r * _weights(weights, 1)[0] if weights is not None else r.copy()
    else:
        raise ValueError(f"rewards must have shape (N,) or (N, K), got {r.shape}")
    if total.size == 0:
        return np.zeros(0)
    codes, first = _codes_for(total, group_ids)
    _, _, var, spread, dev = _moments(total[:, None], codes, len(first))
    centered = dev[:, 0]  # (N,) r - mean_group; exactly 0 for NaN, singleton and constant groups
    if scale == "group":
        denom = np.sqrt(np.take(var[:, 0], codes)) + eps
    elif scale == "batch":
        valid_total = total[~np.isnan(total)]
        denom = (valid_total.std(ddof=1) if valid_total.size >= 2 else 0.0) + eps
    elif scale == "none":
        denom = 1.0
    else:
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    informative = np.take(spread[:, 0], codes) & ~np.isnan(total)
    with np.errstate(invalid="ignore", divide="ignore"):
        adv = centered / denom
    return np.where(informative, adv, 0.0)


def gdpo_advantages(
    rewards: Any,
    group_ids: Sequence[Any] | np.ndarray,
    *,
    weights: Any = None,
    eps: float = 1e-4,
    batch_norm: bool = True,
) -> np.ndarray:
    """GDPO advantages (paper 002, Eq. 4-7): normalize each reward within its group, sum, then
    normalize over the batch.

    ``rewards`` (N, K). For each column k, ``A_k = (r_k - mean_group) / (std_group + eps)`` (Eq. 4),
    0 for NaN entries and for groups whose column k has fewer than two valid or all-equal values;
    ``A = sum_k w_k A_k`` (Eq. 5, weighted as Eq. 7); with ``batch_norm``,
    ``(A - mean_batch) / (std_batch + eps)`` (Eq. 6) over the members with at least one valid reward.
    Members whose every column was left out (NaN, singleton or constant group) get exactly 0, and a
    batch whose A are all equal (up to rounding) gives 0 everywhere. Returns (N,) floats.

    Example (GDPO Figure 2: rewards (0, 1) on both objectives, two rollouts)::

        >>> r = [[0, 0], [1, 1]]
        >>> gdpo_advantages(r, [0, 0], batch_norm=False, eps=0.0).round(4).tolist()
        [-1.4142, 1.4142]
        >>> gdpo_advantages([[0, 0], [1, 0]], [0, 0], batch_norm=False, eps=0.0).round(4).tolist()
        [-0.7071, 0.7071]
        >>> gdpo_advantages(r, [0, 0], eps=0.0).round(4).tolist()   # Eq. 6 on (-1.4142, 1.4142)
        [-0.7071, 0.7071]
    """
    r = _as_2d(rewards)  # (N, K)
    if r.shape[0] == 0:
        return np.zeros(0)
    w = _weights(weights, r.shape[1])
    codes, first = _codes_for(r, group_ids)
    _, _, var, spread, dev = _moments(r, codes, len(first))
    missing = np.isnan(r)  # (N, K)
    used = np.take(spread, codes, axis=0) & ~missing  # (N, K) entries that carry a group-relative signal
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0 in left-out entries when eps = 0
        per_reward = dev / (np.sqrt(np.take(var, codes, axis=0)) + eps)  # (N, K), Eq. 4
    summed = np.where(used, per_reward, 0.0) @ w  # (N,), Eq. 5 / Eq. 7
    # Row-wise any() through a small matmul: numpy's reductions over a short last axis are slow.
    ones = np.ones(r.shape[1])
    has_signal = used.astype(float) @ ones > 0  # (N,)
    if not batch_norm:
        return np.where(has_signal, summed, 0.0)
    present = (~missing).astype(float) @ ones > 0  # members with at least one reward take part in Eq. 6
    batch = summed[present]
    batch_std = batch.std(ddof=1) if batch.size >= 2 else 0.0
    # Per-reward advantages are O(1); a batch std within rounding of 0 means every A is 0 up to float
    # noise (e.g. two rewards whose advantages cancel), and dividing would blow that noise up to +-1.
    if batch_std <= 1e-12 * max(np.abs(w).sum(), 1e-300):
        return np.zeros(r.shape[0])
    normed = (summed - batch.mean()) / (batch_std + eps)  # Eq. 6
    return np.where(has_signal, normed, 0.0)


def conditioned_reward(rewards: Any, *, target: int, condition: int, threshold: float) -> np.ndarray:
    """GDPO Eq. 8: reward column ``target`` (r_k) counts only where column ``condition`` (r_l) is at
    least ``threshold`` (t); elsewhere it becomes 0. Returns a new (N, K) array.

    Where r_l is NaN the condition cannot be checked, so r_k becomes NaN too (left out downstream).

    Example (a length reward that counts only for correct answers)::

        >>> conditioned_reward([[1.0, 0.8], [0.0, 0.9], [np.nan, 0.7]], target=1, condition=0, threshold=1.0).tolist()
        [[1.0, 0.8], [0.0, 0.0], [nan, nan]]
    """
    r = _as_2d(rewards).copy()
    cond = r[:, condition]
    with np.errstate(invalid="ignore"):
        r[:, target] = np.where(cond >= threshold, r[:, target], 0.0)
    r[np.isnan(cond), target] = np.nan
    return r
