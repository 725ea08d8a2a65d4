"""A module-level group and its members (MMGRPO Section 3.1), and the arrays the advantage functions
take from groups.

Every member of a group carries its trajectory-level reward r (Section 3.1: "each element consists of
a module-level input prompt q, the corresponding output o, and the final trajectory-level reward r").
How the groups are formed: ``trainer.algorithms.grouping`` (MMGRPO Algorithm 1) and
``trainer.algorithms.propagation.mhgpo_groups`` (MHGPO's group identifiers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from trainer.rollouts.trajectory import ModuleCall, Trajectory, jsonable

__all__ = ["GroupMember", "ModuleGroup", "assign_advantages", "group_reward_arrays", "nan_if_none"]


@dataclass
class GroupMember:
    """One element (q, o, r) of a group: a module call and the rollout it came from.

    ``padded``: a PadGroups ``fill`` copy of another invocation of the same module in the same
    trajectory. ``duplicated``: an extra copy made by SelectKDiverseElements up-sampling. ``advantage``
    belongs to the member (the same call may sit in several groups, or twice in one). ``reward`` and
    ``reward_components`` are the values the advantage was computed from (set by
    ``trainer.algorithms.metrics.annotate_group_stats``), so the dashboard can recompute and compare estimators.

    Example::

        >>> m = GroupMember(ModuleCall("m", 0, "q", "o", True, call_id="c7"), Trajectory("e", trajectory_id="t3"),
        ...                 duplicated=True, advantage=-0.5)
        >>> m.to_dict()  # doctest: +NORMALIZE_WHITESPACE
        {'call_id': 'c7', 'trajectory_id': 't3', 'padded': False, 'duplicated': True, 'advantage': -0.5,
         'reward': None, 'reward_components': {}}
    """

    call: ModuleCall
    trajectory: Trajectory
    padded: bool = False
    duplicated: bool = False
    advantage: float | None = None
    reward: float | None = None
    reward_components: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call.call_id,
            "trajectory_id": self.trajectory.trajectory_id,
            "padded": self.padded,
            "duplicated": self.duplicated,
            "advantage": jsonable(self.advantage),
            "reward": jsonable(self.reward),
            "reward_components": jsonable(self.reward_components),
        }


@dataclass
class ModuleGroup:
    """A module-level GRPO group: G members that share a module and relative invocation index (MMGRPO)
    or an MHGPO group identifier. ``kind`` is ``homogeneous`` when every member saw the same prompt,
    ``heterogeneous`` otherwise (MHGPO's terms); ``to_dict`` is plain JSON for the dashboard.
    ``reward_mean``, ``reward_var`` (unbiased) and ``similarity`` (mean pairwise token F1 of the
    completions) are filled in by ``trainer.algorithms.metrics.annotate_group_stats`` once rewards are known.

    Example::

        >>> t = Trajectory("e", trajectory_id="t0")
        >>> calls = [ModuleCall("reranker", 0, prompt, "1 2", True, call_id=f"c{i}") for i, prompt in enumerate("ab")]
        >>> g = ModuleGroup("e/reranker#0", "reranker", 0, [GroupMember(c, t) for c in calls], "e")
        >>> g.kind, [m["call_id"] for m in g.to_dict()["members"]]
        ('heterogeneous', ['c0', 'c1'])
    """

    group_id: str
    module: str
    invocation_index: int | None
    members: list[GroupMember] = field(default_factory=list)
    example_id: str | None = None
    reward_mean: float | None = None
    reward_var: float | None = None
    similarity: float | None = None

    @property
    def kind(self) -> Literal["homogeneous", "heterogeneous"]:
        return "homogeneous" if len({m.call.prompt for m in self.members}) <= 1 else "heterogeneous"

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "example_id": self.example_id,
            "module": self.module,
            "invocation_index": self.invocation_index,
            "kind": self.kind,
            "reward_mean": jsonable(self.reward_mean),
            "reward_var": jsonable(self.reward_var),
            "similarity": jsonable(self.similarity),
            "members": [m.to_dict() for m in self.members],
        }


def nan_if_none(value: float | None) -> float:
    return float("nan") if value is None else float(value)


# ---------------------------------------------------------------------------------------------------
# Arrays for the advantage functions


def group_reward_arrays(
    groups: Sequence[ModuleGroup],
    *,
    reward_names: Sequence[str] | None = None,
    source: Literal["trajectory", "call"] = "trajectory",
) -> tuple[np.ndarray, np.ndarray]:
    """Flatten groups into ``(rewards, group_ids)`` for ``grpo_advantages`` / ``gdpo_advantages``:
    members in group order, ``group_ids`` (M,) the group's position in ``groups``.

    ``source="trajectory"``: the member's trajectory reward r (MMGRPO), (M,), or its components
    ``reward_names`` (M, K) for GDPO. ``source="call"``: the call's final reward R = shared + specific
    (MHGPO), (M,). Unknown rewards are NaN.

    Example::

        >>> t0, t1 = Trajectory("e", rewards={"a": 1.0, "b": 0.0}), Trajectory("e", rewards={"a": 0.0, "b": None})
        >>> c = ModuleCall("m", 0, "q", "o", True)
        >>> g = ModuleGroup("e/m#0", "m", 0, [GroupMember(c, t0), GroupMember(c, t1)])
        >>> r, ids = group_reward_arrays([g], reward_names=["a", "b"])
        >>> r.tolist(), ids.tolist()
        ([[1.0, 0.0], [0.0, nan]], [0, 0])
    """
    members = [(gi, m) for gi, g in enumerate(groups) for m in g.members]
    ids = np.asarray([gi for gi, _ in members], dtype=np.intp)
    if source == "call":
        if reward_names is not None:
            raise ValueError("source='call' gives one scalar reward per call; leave reward_names unset")
        return np.asarray([nan_if_none(m.call.reward) for _, m in members], dtype=float), ids
    if source != "trajectory":
        raise ValueError(f"source must be 'trajectory' or 'call', got {source!r}")
    if reward_names is None:
        return np.asarray([nan_if_none(m.trajectory.reward) for _, m in members], dtype=float), ids
    rows = [m.trajectory.reward_vector(reward_names) for _, m in members]
    return np.asarray(rows, dtype=float).reshape(len(members), len(reward_names)), ids


def assign_advantages(groups: Sequence[ModuleGroup], advantages: Sequence[float] | np.ndarray) -> None:
    """Write advantages (the A-hat of MMGRPO Eq. 5 / MHGPO Eq. 5, in ``group_reward_arrays`` member
    order) onto the members, and onto each call through its original member (neither padded nor
    duplicated).

    Example::

        >>> c0, c1 = ModuleCall("m", 0, "q", "a", True), ModuleCall("m", 0, "q", "b", True)
        >>> g = ModuleGroup("g", "m", 0, [GroupMember(c0, Trajectory("e")), GroupMember(c1, Trajectory("e")),
        ...                               GroupMember(c1, Trajectory("e"), duplicated=True)])
        >>> assign_advantages([g], [-1.0, 0.5, 0.5])
        >>> c0.advantage, c1.advantage, [m.advantage for m in g.members]
        (-1.0, 0.5, [-1.0, 0.5, 0.5])
    """
    values = np.asarray(advantages, dtype=float).reshape(-1)
    members = [m for g in groups for m in g.members]
    if len(members) != values.size:
        raise ValueError(f"{values.size} advantages for {len(members)} group members")
    for member, value in zip(members, values.tolist(), strict=True):
        member.advantage = value
        if not member.padded and not member.duplicated:
            member.call.advantage = value
