"""Trajectory data model: module calls, rollouts, and the fork tree MHGPO builds over them.

A *trajectory* (MMGRPO's rho) is one execution of an LM program on one example: the ordered module
calls it made, its final output, and its rewards. A *module call* (MMGRPO's trace zeta = (M, q, o)) is
one LM invocation inside it.

MHGPO's fork sampling (paper 001, Algorithm 2) makes several trajectories share a prefix of calls: the
calls before the fork point are run once and reused by all G forks. Two links record that tree:

- ``ModuleCall.parent_id`` is the call whose output fed this call's input (MHGPO Eq. 4's "direct
  successor" edge, seen from the successor). Shared prefix calls are the *same* ``ModuleCall`` objects
  in every fork, with one ``call_id``.
- ``Trajectory.parent_id`` is the trajectory this one was forked from: fork 0 of a ``fork_on`` is the
  trunk (no parent), forks 1..G-1 point at it and share its calls up to the fork point.

Everything serializes to plain JSON with ``to_dict`` (NaN becomes ``None``) for the dashboard.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ModuleCall", "Trajectory", "apply_format_failure", "jsonable", "unique_calls"]


def jsonable(value: Any) -> Any:
    """Turn ``value`` into plain JSON data: NaN/inf floats become ``None``, tuples and sets become
    lists, dataclasses and mapping-like objects (a ``dspy.Prediction``) become dicts, anything else
    unknown becomes its ``str``.

    Example: ``jsonable({"a": (1, float("nan")), "b": {2}}) == {"a": [1, None], "b": [2]}``.
    """
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", None) == 0:
        return jsonable(value.item())  # numpy scalar
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if callable(getattr(value, "keys", None)) and hasattr(value, "__getitem__"):
        return {str(k): jsonable(value[k]) for k in value.keys()}  # mapping-like, e.g. a dspy.Prediction
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return value.to_dict()
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [jsonable(v) for v in sorted(value, key=repr)]
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())  # numpy array
    return str(value)


def _float_or_none(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


@dataclass
class ModuleCall:
    """One module (agent) invocation: MMGRPO's trace (M, q, o), MHGPO's rollout pair (q_k,i, o_k,i).

    ``invocation_index`` is the 0-based index of this call among the calls to the same module in its
    trajectory (MMGRPO Algorithm 1, lines 4-7). ``specific_reward`` is MHGPO's agent-specific reward
    R_k^spe (a format penalty), ``propagated_reward`` its shared reward after backward propagation
    (MHGPO Eq. 4), and ``reward`` their sum (the "final reward" of the call).

    Example::

        >>> c = ModuleCall("answerer", 0, "Q: 2+2?", "4", True, parsed="4", specific_reward=-0.5)
        >>> c.reward is None           # nothing propagated yet
        True
        >>> c.propagated_reward = 1.0
        >>> c.reward
        0.5
    """

    module: str
    invocation_index: int
    prompt: str
    completion: str
    parsed_ok: bool
    parsed: Any = None
    specific_reward: float = 0.0
    propagated_reward: float | None = None
    advantage: float | None = None
    call_id: str = ""
    parent_id: str | None = None
    group_id: str | None = None
    messages: list[dict[str, str]] | None = None
    """The chat messages `prompt` was rendered from (None for a raw-text prompt); `prompt` is the
    text the model saw."""
    tokens: dict[str, Any] | None = None
    """Per-token details of the completion (RunConfig.token_details), plain JSON: "pieces" (each
    sampled token decoded on its own), "sampler" / "trainer" (log-probs), "entropy" (nats), "topk"
    ([position, [[piece, probability], ...]] at the forks); see trainer/run/token_details.py. None:
    no details (and no "tokens" key in `to_dict`)."""

    @property
    def reward(self) -> float | None:
        """MHGPO's final reward R_k,i = R^shared_k,i + R^spe_k(q, o) (the equation after Eq. 4)."""
        if self.propagated_reward is None:
            return None
        return float(self.propagated_reward) + float(self.specific_reward)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: every field plus the derived ``reward``; ``tokens`` only when there are details."""
        out = {
            "call_id": self.call_id,
            "parent_id": self.parent_id,
            "module": self.module,
            "invocation_index": self.invocation_index,
            "prompt": str(self.prompt),
            "messages": [dict(m) for m in self.messages] if self.messages is not None else None,
            "completion": self.completion,
            "parsed_ok": self.parsed_ok,
            "parsed": jsonable(self.parsed),
            "specific_reward": _float_or_none(self.specific_reward),
            "propagated_reward": _float_or_none(self.propagated_reward),
            "reward": _float_or_none(self.reward),
            "advantage": _float_or_none(self.advantage),
            "group_id": self.group_id,
        }
        if self.tokens is not None:
            out["tokens"] = jsonable(self.tokens)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModuleCall:
        """Inverse of ``to_dict`` (``reward`` is derived, so it is ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if kwargs.get("specific_reward") is None:
            kwargs["specific_reward"] = 0.0
        return cls(**kwargs)


@dataclass
class Trajectory:
    """One rollout of a program on one example (MMGRPO's (rho, r); MHGPO's T_i).

    ``rewards`` holds the per-reward components by name (``None``: the reward could not be computed).
    ``total_reward`` is the scalar trajectory reward when the trainer has combined the components
    (weighted sum) or a format failure set it; ``reward`` falls back to the plain sum of the known
    components. Sampling info: ``teacher`` (MMGRPO teacher program), ``fork_point`` (MHGPO fork agent),
    ``group_id`` (the rollout group it was sampled in), ``parent_id`` (the trajectory it was forked
    from), ``policy_version`` (how many updates the weights that sampled it had had: the version v
    whose staleness t - v the update t that trains it measures; ``None`` where nobody recorded it).
    ``failed`` with an ``error``: the program or a reward raised (``trainer.rollouts.failures``).

    Example::

        >>> t = Trajectory("ex1", rewards={"format": 1.0, "correct": 0.5, "length": None})
        >>> t.reward                   # 1.0 + 0.5; the unknown component is left out
        1.5
        >>> t.reward_vector(["correct", "length"])
        [0.5, nan]
    """

    example_id: str
    calls: list[ModuleCall] = field(default_factory=list)
    rewards: dict[str, float | None] = field(default_factory=dict)
    final_output: Any = None
    failed: bool = False
    teacher: str | None = None
    fork_point: str | None = None
    group_id: str | None = None
    parent_id: str | None = None
    trajectory_id: str = ""
    total_reward: float | None = None
    policy_version: int | None = None
    error: str | None = None
    """What the program's or a reward's code raised in this rollout (``trainer.rollouts.failures.describe_error``:
    ``"Type: message"``, where, a short traceback tail); such a trajectory is also ``failed``. ``None``
    for a rollout that ran through or only failed to parse."""

    @property
    def reward(self) -> float | None:
        """The scalar trajectory-level reward r (MMGRPO Section 3.1): ``total_reward`` when set,
        else the sum of the components that are not ``None``; ``None`` when nothing is known."""
        if self.total_reward is not None:
            return float(self.total_reward)
        known = [float(v) for v in self.rewards.values() if v is not None and not math.isnan(float(v))]
        return sum(known) if known else None

    def reward_vector(self, names: Iterable[str]) -> list[float]:
        """The components ``names`` in order, ``nan`` for missing or ``None`` ones (GDPO's r_1..r_n)."""
        out = []
        for name in names:
            value = self.rewards.get(name)
            out.append(math.nan if value is None else float(value))
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: every field, the calls as dicts, plus the derived scalar ``reward``."""
        return {
            "trajectory_id": self.trajectory_id,
            "parent_id": self.parent_id,
            "example_id": self.example_id,
            "calls": [c.to_dict() for c in self.calls],
            "rewards": {str(k): _float_or_none(v) for k, v in self.rewards.items()},
            "total_reward": _float_or_none(self.total_reward),
            "reward": _float_or_none(self.reward),
            "final_output": jsonable(self.final_output),
            "failed": self.failed,
            "teacher": self.teacher,
            "fork_point": self.fork_point,
            "group_id": self.group_id,
            "policy_version": self.policy_version,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        """Inverse of ``to_dict`` (derived ``reward`` ignored). Calls shared between trajectories in
        memory come back as separate objects with the same ``call_id``."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names and k != "calls"}
        kwargs["calls"] = [ModuleCall.from_dict(c) for c in data.get("calls", [])]
        kwargs["rewards"] = dict(kwargs.get("rewards") or {})
        return cls(**kwargs)


def apply_format_failure(
    trajectory: Trajectory,
    failure_reward: float | Mapping[str, float],
    reward_names: Iterable[str] | None = None,
) -> Trajectory:
    """Apply MMGRPO's format-failure fallback (paper 000, Section 3.1): "we retain the partial
    trajectory up to and including the failed module call and assign a fallback reward to the full run
    (i.e., a formatting error penalty)".

    The first call with ``parsed_ok=False`` ends the trajectory: later calls are dropped, ``failed`` is
    set, ``final_output`` becomes ``None``, ``total_reward`` becomes the failure reward, and every reward
    component in ``reward_names`` (default: the components already present) takes it too, so GDPO's
    per-reward normalization also ranks the failure lowest. ``failure_reward`` may be a mapping
    ``{component: value}`` for per-component values; then ``total_reward`` is their sum. A trajectory
    without a failed call is returned unchanged. Returns a new ``Trajectory`` (the call objects are
    shared, not copied).

    A trajectory already ``failed`` without a failed call (its program or a reward raised; ``error``
    says what) gets the same fallback rewards and keeps all its calls and its final output.

    Example::

        >>> calls = [ModuleCall("rewriter", 0, "q", "ok", True), ModuleCall("reranker", 0, "q2", "??", False),
        ...          ModuleCall("answerer", 0, "q3", "x", True)]
        >>> t = apply_format_failure(Trajectory("ex", calls, {"f1": 0.3}), -1.0)
        >>> [c.module for c in t.calls], t.failed, t.total_reward, t.rewards
        (['rewriter', 'reranker'], True, -1.0, {'f1': -1.0})
    """
    cut = next((i for i, c in enumerate(trajectory.calls) if not c.parsed_ok), None)
    if cut is None and not trajectory.failed:
        return trajectory
    names = list(reward_names) if reward_names is not None else list(trajectory.rewards)
    rewards = dict(trajectory.rewards)
    if isinstance(failure_reward, Mapping):
        for name in names:
            rewards[name] = float(failure_reward[name])
        total = sum(float(failure_reward[name]) for name in names)
    else:
        for name in names:
            rewards[name] = float(failure_reward)
        total = float(failure_reward)
    return dataclasses.replace(
        trajectory,
        calls=list(trajectory.calls if cut is None else trajectory.calls[: cut + 1]),
        rewards=rewards,
        failed=True,
        final_output=trajectory.final_output if cut is None else None,
        total_reward=total,
    )


def unique_calls(trajectories: Iterable[Trajectory]) -> list[ModuleCall]:
    """Every distinct call of ``trajectories`` once, in first-seen order (a forked prefix call shared
    by G trajectories appears once). Calls are the same when they have the same non-empty ``call_id``,
    or are the same object.

    Example::

        >>> shared = ModuleCall("rewriter", 0, "q", "o", True, call_id="c0")
        >>> a = Trajectory("ex", [shared, ModuleCall("answerer", 0, "q", "x", True, call_id="c1")])
        >>> b = Trajectory("ex", [shared, ModuleCall("answerer", 0, "q", "y", True, call_id="c2")])
        >>> [c.call_id for c in unique_calls([a, b])]
        ['c0', 'c1', 'c2']
    """
    seen: set[Any] = set()
    out: list[ModuleCall] = []
    for traj in trajectories:
        for call in traj.calls:
            key = call.call_id or id(call)
            if key not in seen:
                seen.add(key)
                out.append(call)
    return out
