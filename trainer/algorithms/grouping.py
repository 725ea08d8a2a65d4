"""MMGRPO module-level groups (paper 000, Algorithm 1 and Section 3.1) (teacher mixtures: ``teacher_mix``;
the group type: ``groups``).

Pipeline for the rollouts of one example: key every module call by (module, relative invocation
index) (Algorithm 1, lines 3-7) -> PadGroups ``fill`` / ``truncate`` (line 8) -> SelectKDiverseElements
to exactly G members (line 9). Trajectories of several examples may be passed at once: groups never
mix examples.

Every member of a group carries its trajectory-level reward r (Section 3.1: "each element consists of
a module-level input prompt q, the corresponding output o, and the final trajectory-level reward r").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from trainer.algorithms.groups import GroupMember, ModuleGroup, nan_if_none
from trainer.rollouts.trajectory import ModuleCall, Trajectory

__all__ = [
    "form_module_level_groups",
    "module_group_codes",
    "pad_groups",
    "relative_invocation_indices",
    "select_k_diverse",
]

RngLike = np.random.Generator | int | None


def _generator(rng: RngLike) -> np.random.Generator:
    # None means seed 0: grouping is reproducible unless the caller asks for other randomness.
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(0 if rng is None else rng)


# ---------------------------------------------------------------------------------------------------
# SelectKDiverseElements


def _sorted_order(values: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
    # Ascending, NaN last. Equal values keep index order, or a random order when an rng is given, so
    # which of several equal rewards is kept is not always the first one.
    if rng is None:
        return np.argsort(values, kind="stable")
    perm = rng.permutation(values.size)
    return perm[np.argsort(values[perm], kind="stable")]


def _most_balanced_best(score: np.ndarray, centre: float) -> int:
    # Candidates whose scores tie (up to rounding) are equally good; take the most even split between
    # low and high values so the choice does not depend on float noise in the prefix sums.
    tol = 1e-9 * max(1.0, float(np.abs(score).max()))
    tied = np.flatnonzero(score >= score.max() - tol)
    return int(tied[np.argmin(np.abs(tied - centre))])


def select_k_diverse(rewards: Sequence[float] | np.ndarray, k: int, *, rng: RngLike = None) -> list[int]:
    """SelectKDiverseElements (MMGRPO paper 000, Section 3.1; Algorithm 1 line 9): indices of exactly
    ``k`` elements whose reward variance is maximal.

    - Down-sampling (k <= n): the k-subset of maximum variance over all k-subsets, exactly. An optimal
      subset is always some i smallest plus k-i largest values (the sum of squared pairwise differences
      is convex in each chosen value, so a chosen value lying between two unchosen ones can be moved
      to one of them without loss), so the k+1 candidates are scored with prefix sums: O(n log n).
    - Up-sampling (k > n): every element once, then k-n copies. By the same convexity every copy is of
      the minimum or the maximum, so the k-n+1 splits between them are scored and the best is taken.

    NaN rewards are chosen only after every valid one and are never copied while a valid one exists.
    Ties between equal values go by index, or randomly when ``rng`` (a Generator or a seed) is given.
    Returns sorted indices when down-sampling, ``[0..n-1] + copies`` when up-sampling.

    Example::

        >>> select_k_diverse([0.5, 0.0, 1.0, 0.4, 0.9], 2)     # the two extremes
        [1, 2]
        >>> select_k_diverse([0.0, 0.0, 0.0, 1.0, 1.0], 3)     # {0,1,1} and {0,0,1} tie: the first
        [0, 3, 4]
        >>> select_k_diverse([0.0, 1.0, 1.0], 5)                # keep all, then one 0 and one 1
        [0, 1, 2, 0, 2]
    """
    r = np.asarray(rewards, dtype=float).reshape(-1)  # (n,)
    n = r.size
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if n == 0:
        raise ValueError("select_k_diverse needs at least one element to select from")
    if k == n:
        return list(range(n))
    gen = None if rng is None else _generator(rng)
    order = _sorted_order(r, gen)  # (n,) indices, ascending, NaN last
    n_valid = int((~np.isnan(r)).sum())
    valid = order[:n_valid]
    if k <= n:
        if k >= n_valid:
            return sorted(valid.tolist() + order[n_valid:][: k - n_valid].tolist())
        v = r[valid] - r[valid].mean()  # (m,) centred: the score below cancels badly on large offsets
        s1 = np.concatenate([[0.0], np.cumsum(v)])  # prefix sums, (m+1,)
        s2 = np.concatenate([[0.0], np.cumsum(v * v)])
        low = np.arange(k + 1)  # number taken from the bottom
        top = n_valid - (k - low)  # first index of the suffix
        total = s1[low] + (s1[n_valid] - s1[top])
        total_sq = s2[low] + (s2[n_valid] - s2[top])
        score = total_sq - total * total / k  # (k+1,) = (k-1) * variance of each candidate
        best = _most_balanced_best(score, k / 2)
        return sorted(valid[:best].tolist() + valid[n_valid - (k - best) :].tolist())
    extra = k - n
    if n_valid == 0:
        return list(range(n)) + [int(i) for i in np.resize(np.arange(n), extra)]
    lo_i, hi_i = int(valid[0]), int(valid[-1])
    lo, hi = r[lo_i], r[hi_i]
    v = r[valid]
    j = np.arange(extra + 1)  # copies of the minimum; the rest copy the maximum
    total = v.sum() + j * lo + (extra - j) * hi
    total_sq = (v * v).sum() + j * lo * lo + (extra - j) * hi * hi
    score = total_sq - total * total / (n_valid + extra)
    best = _most_balanced_best(score, extra / 2)
    return list(range(n)) + [lo_i] * best + [hi_i] * (extra - best)


# ---------------------------------------------------------------------------------------------------
# Algorithm 1: FormModuleLevelGroups, with PadGroups


def _student_module(
    module_map: Mapping[Any, str] | None, trajectory: Trajectory, call: ModuleCall
) -> str:
    # Footnote 5 of MMGRPO: a teacher's module keys are mapped to the student's module.
    if not module_map:
        return call.module
    return module_map.get((trajectory.teacher, call.module), module_map.get(call.module, call.module))


def pad_groups(
    invocations: Sequence[Sequence[Any]],
    padding: Literal["fill", "truncate"] = "fill",
    *,
    fill_strategy: Literal["random", "last"] = "random",
    rng: RngLike = None,
) -> list[list[tuple[int, Any, bool]]]:
    """PadGroups (MMGRPO Section 3.1, Algorithm 1 line 8) for one module of one example.

    ``invocations[j]`` lists trajectory j's calls to the module, in order (K_j of them). Returns the
    groups by invocation index, each a list of ``(j, call, padded)``:

    - ``truncate``: indices ``0 .. min_j K_j - 1`` ("only those invocation positions represented in
      every trajectory are retained");
    - ``fill``: indices ``0 .. max_j K_j - 1``; a trajectory with ``0 < K_j <= index`` is padded with a
      copy of one of its own calls to the module (``random``, as in the authors' runs with DSPy's
      ``fill_strategy="randint"``, or its ``last`` one). A trajectory that never called the module has
      nothing to lend, so its groups are short and SelectKDiverseElements completes them.

    Example::

        >>> [[(j, c, p) for j, c, p in g] for g in pad_groups([["a0", "a1"], ["b0"], []], "fill", fill_strategy="last")]
        [[(0, 'a0', False), (1, 'b0', False)], [(0, 'a1', False), (1, 'b0', True)]]
        >>> pad_groups([["a0", "a1"], ["b0"], []], "truncate")
        []
    """
    if padding not in ("fill", "truncate"):
        raise ValueError(f"padding must be 'fill' or 'truncate', got {padding!r}")
    if fill_strategy not in ("random", "last"):
        raise ValueError(f"fill_strategy must be 'random' or 'last', got {fill_strategy!r}")
    counts = [len(calls) for calls in invocations]
    if not counts:
        return []
    n_groups = max(counts) if padding == "fill" else min(counts)
    gen = _generator(rng)
    groups: list[list[tuple[int, Any, bool]]] = []
    for index in range(n_groups):
        group = []
        for j, calls in enumerate(invocations):
            if index < len(calls):
                group.append((j, calls[index], False))
            elif calls:  # only reachable under fill
                pick = len(calls) - 1 if fill_strategy == "last" else int(gen.integers(len(calls)))
                group.append((j, calls[pick], True))
        groups.append(group)
    return groups


def form_module_level_groups(
    trajectories: Iterable[Trajectory],
    *,
    group_size: int,
    padding: Literal["fill", "truncate"] = "fill",
    rng: RngLike = None,
    fill_strategy: Literal["random", "last"] = "random",
    module_map: Mapping[Any, str] | None = None,
) -> list[ModuleGroup]:
    """FormModuleLevelGroups (MMGRPO paper 000, Algorithm 1): module-level GRPO groups of exactly
    ``group_size`` (G) members.

    For each example: every call of every trajectory goes to key (module, relative invocation index),
    the index counted per module within the trajectory (lines 3-7; the stored ``invocation_index`` is
    recomputed after teacher modules are mapped to the student's via ``module_map``, footnote 5); then
    PadGroups (line 8, see ``pad_groups``) and SelectKDiverseElements on the members' trajectory
    rewards (line 9). So the number of groups is ``sum_M max_j K_{M,j}`` under ``fill`` and
    ``sum_M min_j K_{M,j}`` under ``truncate`` (Section 3.1), per example. ``module_map`` keys may be a
    teacher module name or a ``(teacher, module)`` pair. ``rng`` (Generator or seed; None = seed 0)
    drives ``fill`` picks and ties.

    Example (MMGRPO 3.1: M1 called twice and M2 once in each of R=3 rollouts gives three groups)::

        >>> def rollout(i, r):
        ...     calls = [ModuleCall(m, 0, f"q{i}", f"o{i}{m}", True) for m in ("M1", "M1", "M2")]
        ...     return Trajectory("ex", calls, total_reward=r)
        >>> groups = form_module_level_groups([rollout(i, r) for i, r in enumerate([0.0, 1.0, 0.5])], group_size=2)
        >>> [(g.group_id, [m.trajectory.reward for m in g.members]) for g in groups]
        [('ex/M1#0', [0.0, 1.0]), ('ex/M1#1', [0.0, 1.0]), ('ex/M2#0', [0.0, 1.0])]
    """
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    gen = _generator(rng)
    by_example: dict[str, list[Trajectory]] = {}
    for traj in trajectories:
        by_example.setdefault(traj.example_id, []).append(traj)
    groups: list[ModuleGroup] = []
    for example_id, trajs in by_example.items():
        traj_rewards = [nan_if_none(t.reward) for t in trajs]
        per_traj: list[dict[str, list[ModuleCall]]] = []
        modules: dict[str, None] = {}  # first-appearance order
        for traj in trajs:
            keyed: dict[str, list[ModuleCall]] = {}
            for call in traj.calls:
                module = _student_module(module_map, traj, call)
                keyed.setdefault(module, []).append(call)
                modules.setdefault(module, None)
            per_traj.append(keyed)
        for module in modules:
            padded = pad_groups(
                [keyed.get(module, []) for keyed in per_traj], padding, fill_strategy=fill_strategy, rng=gen
            )
            for index, entries in enumerate(padded):
                candidates = [GroupMember(call, trajs[j], padded=pad) for j, call, pad in entries]
                rewards = [traj_rewards[j] for j, _, _ in entries]
                members = _take(candidates, select_k_diverse(rewards, group_size, rng=gen))
                groups.append(ModuleGroup(f"{example_id}/{module}#{index}", module, index, members, example_id))
    return groups


def _take(candidates: list[GroupMember], indices: list[int]) -> list[GroupMember]:
    seen: set[int] = set()
    out = []
    for i in indices:
        member = candidates[i]
        if i in seen:
            member = dataclasses.replace(member, duplicated=True)
        seen.add(i)
        out.append(member)
    return out


# ---------------------------------------------------------------------------------------------------
# Algorithm 1 on flat arrays (the batch path: no objects, no loop over groups)


def relative_invocation_indices(trajectory_codes: Any, module_codes: Any) -> np.ndarray:
    """Algorithm 1, lines 4-7, vectorized: for calls listed in trajectory order, the 0-based count of
    earlier calls with the same (trajectory, module). Inputs and output (N,) ints.

    Example::

        >>> relative_invocation_indices([0, 0, 0, 1, 1], [0, 0, 1, 0, 0]).tolist()
        [0, 1, 0, 0, 1]
    """
    traj = np.asarray(trajectory_codes, dtype=np.int64)
    mod = np.asarray(module_codes, dtype=np.int64)
    if traj.size == 0:
        return np.zeros(0, dtype=np.int64)
    key = traj * (int(mod.max()) + 1) + mod  # (N,)
    order = np.argsort(key, kind="stable")  # keeps call order inside each key
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])  # (n_keys,)
    run_start = np.repeat(starts, np.diff(np.r_[starts, key.size]))  # (N,) start of each run
    out = np.empty_like(key)
    out[order] = np.arange(key.size) - run_start
    return out


def module_group_codes(example_codes: Any, module_codes: Any, invocation_indices: Any) -> np.ndarray:
    """Group key of Algorithm 1 line 6, (module, relative invocation index), within each example, as
    (N,) integer group ids ready for the advantage functions. Use it when no padding is needed (every
    rollout calls every module the same number of times); otherwise use ``form_module_level_groups``.

    Example::

        >>> module_group_codes([0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 0, 0]).tolist()
        [0, 1, 2, 3]
        >>> module_group_codes([0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]).tolist()
        [0, 1, 0, 2]
    """
    ex = np.asarray(example_codes, dtype=np.int64)
    mod = np.asarray(module_codes, dtype=np.int64)
    inv = np.asarray(invocation_indices, dtype=np.int64)
    if ex.size == 0:
        return np.zeros(0, dtype=np.intp)
    key = np.ravel_multi_index((ex, mod, inv), (int(ex.max()) + 1, int(mod.max()) + 1, int(inv.max()) + 1))
    _, codes = np.unique(key, return_inverse=True)
    return codes.reshape(-1).astype(np.intp)
