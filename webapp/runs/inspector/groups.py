"""Read side of the group inspector: one module-level group, its members' reward components, the
advantage the run used, and what GRPO on the summed reward and GDPO would give on the same rewards,
so advantage collapse (GDPO paper 002, Section 2) is visible member by member.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from django.http import Http404

from trainer.algorithms.advantages import gdpo_advantages, grpo_advantages
from trainer.algorithms.metrics import intra_group_similarity
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.models import Group, GroupMember, Run

DECIMALS = 6  # advantages equal to 6 decimals count as one value (as trainer.algorithms.metrics.advantage_resolution)
MHGPO_COMPONENTS = ("shared", "specific")


@dataclass
class MemberView:
    member: GroupMember
    components: list[float | None]  # in GroupView.names order
    total: float | None
    used: float | None
    grpo: float
    gdpo: float
    per_reward: list[float]  # GDPO Eq. 4: A_k per reward


@dataclass
class GroupView:
    group: Group
    names: list[str]
    weights: list[float]
    source: str  # where the components came from (members, rollouts or MHGPO's shared + specific)
    members: list[MemberView]
    distinct_rewards: int
    distinct_used: int
    distinct_grpo: int
    distinct_gdpo: int
    variance: float | None
    similarity: float | None

    @property
    def weighted_names(self) -> list[tuple[str, float]]:
        return list(zip(self.names, self.weights, strict=True))

    @property
    def grpo_collapses(self) -> bool:
        return self.distinct_grpo < self.distinct_rewards


def _distinct(values, decimals: int = DECIMALS) -> int:
    # + 0.0 folds -0.0 into 0.0, as advantage_resolution does.
    rounded = {round(float(v), decimals) + 0.0 for v in values if v is not None and math.isfinite(v)}
    return len(rounded)


def _weights(run: Run, names: list[str]) -> list[float]:
    rewards = (run.config or {}).get("rewards") if isinstance(run.config, dict) else None
    # A run trained elsewhere stores its client's config as sent: anything but a list of specs is no weights.
    specs = {str(r.get("name")): r.get("weight", 1.0) for r in (rewards if isinstance(rewards, list) else [])
             if isinstance(r, dict)}
    out = []
    for name in names:
        try:
            out.append(float(specs.get(name, 1.0)))
        except (TypeError, ValueError, OverflowError):
            out.append(1.0)
    return out


def _component_source(run: Run, members: list[GroupMember]) -> tuple[str, list[str], list[dict]]:
    """The per-member reward components the advantages came from.

    The trainer stores them on each member (the conditioned GDPO Eq. 8 values); older events lack
    them, so fall back to the rollout's components (MMGRPO: every member carries its trajectory's
    rewards), and for MHGPO, whose call reward is R = R_shared + R_spe (MHGPO Eq. 4 and after), to
    those two parts.
    """
    if any(m.reward_components for m in members):
        dicts = [m.reward_components or {} for m in members]
        source = "members"
    elif (run.config or {}).get("strategy") == "mhgpo":
        dicts = [{"shared": m.call.propagated_reward, "specific": m.call.specific_reward} for m in members]
        return "mhgpo", list(MHGPO_COMPONENTS), dicts
    else:
        dicts = [m.call.rollout.reward_components or {} for m in members]
        source = "rollouts"
    names = list(dict.fromkeys(k for d in dicts for k in d))
    return source, names, dicts


def group_detail(run: Run, group_id: int) -> GroupView:
    """The group (scoped to `run`) with its members and the estimator comparison. Four queries
    (two for the members' compressed texts)."""
    group = Group.objects.filter(run=run, pk=group_id).first()
    if group is None:
        raise Http404("No such group in this run.")
    members = list(GroupMember.objects.filter(group=group).select_related("call", "call__rollout")
                   .defer("call__prompt", "call__messages", "call__rollout__final_output").order_by("position"))
    fill_call_texts([m.call for m in members])
    source, names, dicts = _component_source(run, members)
    weights = [1.0] * len(names) if source == "mhgpo" else _weights(run, names)
    r = np.asarray([[np.nan if d.get(n) is None else float(d[n]) for n in names] for d in dicts],
                   dtype=float).reshape(len(members), len(names))  # (M, K)
    ids = np.zeros(len(members), dtype=np.intp)  # one group
    if names and members:
        grpo = grpo_advantages(r, ids, weights=weights)  # GDPO Eq. 1-2: normalize the weighted sum
        # GDPO Eq. 4-5 (7): per-reward normalization, weighted sum. Eq. 6 (batch-wise) is one affine
        # map for the whole step, so it changes neither the order nor the number of distinct values.
        gdpo = gdpo_advantages(r, ids, weights=weights, batch_norm=False)
        per_reward = np.column_stack([gdpo_advantages(r[:, [k]], ids, batch_norm=False) for k in range(len(names))])
        totals = np.nansum(r * np.asarray(weights), axis=1)
        totals[np.isnan(r).all(axis=1)] = np.nan
    else:
        grpo = gdpo = np.zeros(len(members))
        per_reward = np.zeros((len(members), 0))
        totals = np.asarray([np.nan if m.reward is None else m.reward for m in members], dtype=float)
    views = [
        MemberView(m, [None if math.isnan(v) else v for v in r[i].tolist()],
                   None if math.isnan(totals[i]) else float(totals[i]), m.advantage, float(grpo[i]), float(gdpo[i]),
                   per_reward[i].tolist())
        for i, m in enumerate(members)
    ]
    valid = totals[~np.isnan(totals)]
    reward_rows = {tuple(None if math.isnan(v) else round(v, DECIMALS) for v in row) for row in r.tolist()}
    similarity = group.similarity
    if similarity is None and len(members) >= 2:
        computed = intra_group_similarity([m.call.completion for m in members])
        similarity = None if math.isnan(computed) else computed
    return GroupView(
        group=group, names=names, weights=weights, source=source, members=views,
        distinct_rewards=len(reward_rows), distinct_used=_distinct(v.used for v in views),
        distinct_grpo=_distinct(grpo.tolist()), distinct_gdpo=_distinct(gdpo.tolist()),
        variance=group.reward_var if group.reward_var is not None else (
            float(valid.var(ddof=1)) if valid.size >= 2 else None),
        similarity=similarity,
    )
