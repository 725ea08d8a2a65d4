"""MHGPO's rewards and groups (paper 001): backward reward propagation (Eq. 4), agent-specific rewards,
and the groups named by the calls' group identifiers (Eq. 5). The samplers that set those identifiers
are ``trainer.rollouts.sampling``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainer.algorithms.groups import GroupMember, ModuleGroup
from trainer.rollouts.program import LinearChain  # noqa: F401 - the doctests' program and LM
from trainer.rollouts.program import numbered as _numbered  # noqa: F401 - the doctests' LM
from trainer.rollouts.sampling import fork_on, fork_on_first, independent_sampling  # noqa: F401 - the doctests'
from trainer.rollouts.trajectory import ModuleCall, Trajectory, unique_calls

__all__ = ["apply_specific_rewards", "mhgpo_groups", "propagate_rewards"]


def _nanmean(values: list[float]) -> float | None:
    known = [v for v in values if v is not None and not math.isnan(v)]
    return sum(known) / len(known) if known else None


def propagate_rewards(trajectories: Sequence[Trajectory]) -> None:
    """Backward reward propagation (MHGPO Eq. 4): the shared reward of a call is the mean (Aggr) of
    the shared rewards of its direct successors; a call that ends trajectories takes their rewards
    (``Trajectory.reward``, the output reward R^shared_i). Sets ``propagated_reward`` on every call;
    unknown (``None``) rewards are left out of the means, and a call with nothing known gets ``None``.

    The tree comes from ``parent_id``; a call without ids follows the previous call of its trajectory.

    Example (fork at the reranker, G=2: the rewriter call has two direct successors)::

        >>> chain = LinearChain(("rewriter", "reranker", "answerer"))
        >>> t0, t1 = fork_on(chain, "q?", "reranker", group_size=2, generate=_numbered)
        >>> t0.total_reward, t1.total_reward = 1.0, 0.0
        >>> propagate_rewards([t0, t1])
        >>> [c.propagated_reward for c in t0.calls], [c.propagated_reward for c in t1.calls]
        ([0.5, 1.0, 1.0], [0.5, 0.0, 0.0])
    """
    objects: dict[Any, list[ModuleCall]] = {}
    parent: dict[Any, Any] = {}
    ends: dict[Any, list[float]] = {}

    def key(call: ModuleCall) -> Any:
        return call.call_id or id(call)

    for traj in trajectories:
        previous = None
        for call in traj.calls:
            k = key(call)
            same = objects.setdefault(k, [])
            if not any(c is call for c in same):
                same.append(call)
            if k not in parent:
                parent[k] = call.parent_id if call.call_id else (key(previous) if previous is not None else None)
            previous = call
        if traj.calls:
            reward = traj.reward
            ends.setdefault(key(traj.calls[-1]), []).append(math.nan if reward is None else reward)
    children: dict[Any, list[Any]] = {}
    for k, p in parent.items():
        if p is not None and p in objects:
            children.setdefault(p, []).append(k)
    depth: dict[Any, int] = {}
    for k in objects:
        chain = []
        node = k
        while node is not None and node not in depth:
            chain.append(node)
            if len(chain) > len(objects):
                raise ValueError(f"parent_id links form a cycle through call {node!r}")
            up = parent.get(node)
            node = up if up in objects else None
        d = depth[node] if node is not None else -1
        for n in reversed(chain):
            d += 1
            depth[n] = d
    shared: dict[Any, float | None] = {}
    for k in sorted(objects, key=lambda n: -depth[n]):  # successors before predecessors
        values = [shared[c] for c in children.get(k, [])] + ends.get(k, [])
        shared[k] = _nanmean([math.nan if v is None else v for v in values])
        for call in objects[k]:
            call.propagated_reward = shared[k]


def apply_specific_rewards(
    trajectories: Sequence[Trajectory], specific: Mapping[str, Callable[[ModuleCall], float]]
) -> None:
    """Agent-specific rewards (MHGPO, after Eq. 4): ``specific[agent](call)`` becomes the call's
    ``specific_reward`` R^spe_k(q, o), so its final reward is ``R = R^shared + R^spe``. Agents without
    an entry keep their current value (0 by default).

    Example (the paper's answer-length penalty)::

        >>> (t,) = fork_on_first(LinearChain(("answerer",)), ["q?"], group_size=1, generate=lambda a, p: ["w " * 12])
        >>> t.total_reward = 1.0
        >>> propagate_rewards([t])
        >>> apply_specific_rewards([t], {"answerer": lambda c: -1.0 if len(c.completion.split()) > 10 else 0.0})
        >>> t.calls[0].specific_reward, t.calls[0].reward
        (-1.0, 0.0)
    """
    for call in unique_calls(trajectories):
        fn = specific.get(call.module)
        if fn is not None:
            call.specific_reward = float(fn(call))


def mhgpo_groups(trajectories: Sequence[Trajectory]) -> list[ModuleGroup]:
    """The groups named by the calls' MHGPO group identifiers (Eq. 5: "all samples that share the same
    group identifier"), each call once, in first-seen order; calls with ``group_id=None`` are left out.
    Feed them to ``group_reward_arrays(groups, source="call")`` and an advantage function.

    Example (IS keeps one group per fork; the other calls have no group id)::

        >>> trajs = independent_sampling(LinearChain(("a", "b")), ["q"], group_size=2, generate=_numbered)
        >>> [(g.module, [m.call.completion for m in g.members]) for g in mhgpo_groups(trajs)]
        [('a', ['a0', 'a1']), ('b', ['b2', 'b3'])]
    """
    owner: dict[Any, Trajectory] = {}
    for traj in trajectories:
        for call in traj.calls:
            owner.setdefault(call.call_id or id(call), traj)
    groups: dict[str, ModuleGroup] = {}
    for call in unique_calls(trajectories):
        if call.group_id is None:
            continue
        traj = owner[call.call_id or id(call)]
        group = groups.get(call.group_id)
        if group is None:
            group = groups[call.group_id] = ModuleGroup(
                call.group_id, call.module, call.invocation_index, [], traj.example_id
            )
        else:
            if group.module != call.module:
                group.module = "*"
            if group.invocation_index != call.invocation_index:
                group.invocation_index = None
            if group.example_id != traj.example_id:
                group.example_id = None
        group.members.append(GroupMember(call, traj))
    return list(groups.values())
