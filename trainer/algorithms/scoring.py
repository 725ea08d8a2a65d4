"""What a step computes from its scored rollouts, the same in one process or on every rank of many:
rewards (with GDPO's conditioning, Eq. 8), groups and advantages (MMGRPO Algorithm 1, MHGPO Eq. 4,
GRPO / GDPO estimators) and the step's metrics.

A `BatchScorer` needs no model: `trainer.run.loop.Trainer` holds one, and a many-process run calls it on
every rank with the gathered whole batch (trainer.policy.distributed), which is why it is a unit of its own
(and why tests can check the ranks' groups against one process's without loading a model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trainer.algorithms.advantages import conditioned_reward, gdpo_advantages, grpo_advantages
from trainer.algorithms.grouping import form_module_level_groups
from trainer.algorithms.groups import ModuleGroup, group_reward_arrays
from trainer.algorithms.metrics import annotate_group_stats, module_group_metrics, zero_variance_share
from trainer.algorithms.propagation import apply_specific_rewards, mhgpo_groups, propagate_rewards
from trainer.config import RunConfig
from trainer.rollouts.failures import call_rewards
from trainer.rollouts.trajectory import Trajectory, apply_format_failure, unique_calls

PENALTY_PREFIX = "mhgpo_penalty_"


class BatchScorer:
    """Rewards, groups, advantages and metrics of a step's rollouts under `config`.

    `reward_fns`: the built reward functions by name; `agents`: the program's modules in order;
    `teacher_agents`: each MMGRPO teacher's modules (mapped one to one onto the student's)."""

    def __init__(self, config: RunConfig, reward_fns: Mapping[str, Any], agents: Sequence[str],
                 teacher_agents: Mapping[str, Sequence[str]] | None = None):
        self.config = config
        self.reward_fns = reward_fns  # shared with the trainer: one set of reward functions
        self.agents = tuple(agents)
        self.teacher_agents = {name: tuple(a) for name, a in (teacher_agents or {}).items()}

    # --- rewards ---------------------------------------------------------------------------------
    def component_names(self) -> list[str]:
        # Under MHGPO the agent penalties are agent-specific rewards, not trajectory components.
        if self.config.strategy == "mhgpo":
            return [n for n in self.reward_fns if not n.startswith(PENALTY_PREFIX)]
        return list(self.reward_fns)

    def score(self, trajectories: list[Trajectory], examples_by_id: dict[str, dict]) -> list[Trajectory]:
        names = self.component_names()
        scored = []
        for traj in trajectories:
            if not traj.failed and all(call.parsed_ok for call in traj.calls):
                # A reward that raises (or returns no number) fails this trajectory, like a program error.
                error = call_rewards(traj, examples_by_id[traj.example_id], self.reward_fns, names)
                if error is None:
                    scored.append(traj)
                    continue
                traj.failed, traj.error = True, error
            scored.append(apply_format_failure(traj, self.config.format_failure_reward, names))
        matrix = self._reward_matrix(scored, names)  # (N, K), conditioned
        weights = np.asarray([self._spec(n).weight for n in names])
        for traj, row in zip(scored, matrix, strict=True):
            if not traj.failed:
                known = ~np.isnan(row)
                traj.total_reward = float(np.sum(row[known] * weights[known])) if known.any() else None
        return scored

    def _spec(self, name: str):
        return next(s for s in self.config.rewards if s.name == name)

    def _condition(self, matrix: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """GDPO Eq. 8 on the (N, K) reward matrix: a reward counts only where its condition holds."""
        for k, name in enumerate(names):
            spec = self._spec(name)
            if spec.condition_on is not None and spec.condition_on in names:
                matrix = conditioned_reward(matrix, target=k, condition=list(names).index(spec.condition_on),
                                            threshold=spec.threshold)
        return matrix

    def _reward_matrix(self, trajectories: Sequence[Trajectory], names: Sequence[str]) -> np.ndarray:
        rows = np.asarray([t.reward_vector(names) for t in trajectories], dtype=float).reshape(-1, len(names))
        return self._condition(rows, names)

    # --- groups and advantages -------------------------------------------------------------------
    def groups_and_advantages(self, trajectories: list[Trajectory], step: int) -> tuple[list[ModuleGroup], np.ndarray, np.ndarray]:
        """Groups, their member reward matrix (M, K) and advantages (M,)."""
        c = self.config
        if c.strategy == "mhgpo":
            penalties = {}
            for name, fn in self.reward_fns.items():
                if name.startswith(PENALTY_PREFIX):
                    penalties[fn.params.get("module", name.removeprefix(PENALTY_PREFIX))] = fn.per_call
            apply_specific_rewards(trajectories, penalties)
            propagate_rewards(trajectories)  # MHGPO Eq. 4
            groups = mhgpo_groups(trajectories)
            rewards, ids = group_reward_arrays(groups, source="call")  # R = shared + specific, (M,)
            annotate_group_stats(groups, rewards)
            scale = {"grpo_batch_std": "batch", "grpo_no_std": "none"}.get(c.estimator, "group")
            return groups, rewards, grpo_advantages(rewards, ids, scale=scale)
        module_map = {(name, t): s for name, agents in self.teacher_agents.items()
                      for t, s in zip(agents, self.agents, strict=True)}
        groups = form_module_level_groups(trajectories, group_size=c.group_size, padding=c.padding,
                                          rng=np.random.default_rng([c.seed, step, 2]), module_map=module_map or None)
        names = self.component_names()
        raw, ids = group_reward_arrays(groups, reward_names=names)  # (M, K)
        rewards = self._condition(raw, names)
        weights = [self._spec(n).weight for n in names]
        # The event carries what the advantages came from, so the dashboard can compare estimators.
        annotate_group_stats(groups, rewards, reward_names=names, weights=weights)
        if c.estimator == "gdpo":
            advantages = gdpo_advantages(rewards, ids, weights=weights, batch_norm=c.gdpo_batch_norm)
        else:
            scale = {"grpo": "group", "grpo_batch_std": "batch", "grpo_no_std": "none"}[c.estimator]
            advantages = grpo_advantages(rewards, ids, weights=weights, scale=scale)
        return groups, rewards, advantages

    def metrics(self, trajectories, groups, rewards, advantages, update_stats) -> dict[str, float]:
        totals = [t.reward for t in trajectories if t.reward is not None]
        metrics: dict[str, float] = {
            "reward/mean": float(np.mean(totals)) if totals else math.nan,
            "failure_rate": float(np.mean([t.failed for t in trajectories])) if trajectories else math.nan,
            "error_rate": float(np.mean([t.error is not None for t in trajectories])) if trajectories else math.nan,
        }
        for name in self.component_names():
            values = [t.rewards.get(name) for t in trajectories if t.rewards.get(name) is not None]
            metrics[f"reward/{name}"] = float(np.mean(values)) if values else math.nan
        calls = unique_calls(trajectories)
        for name, fn in self.reward_fns.items():
            if name.startswith(PENALTY_PREFIX):
                module = fn.params.get("module", name.removeprefix(PENALTY_PREFIX))
                values = [fn.per_call(c) for c in calls if c.module == module]
                metrics[f"format_penalty/{module}"] = float(np.mean(values)) if values else math.nan
        for module in self.agents:
            module_calls = [c for c in calls if c.module == module]
            if module_calls:
                metrics[f"parse_ok/{module}"] = float(np.mean([c.parsed_ok for c in module_calls]))
        if groups:
            metrics.update(module_group_metrics(groups, rewards, advantages))
            total = np.nansum(rewards, axis=1) if rewards.ndim == 2 else rewards
            ids = np.asarray([gi for gi, g in enumerate(groups) for _ in g.members])
            metrics["zero_var_share"] = zero_variance_share(total, ids)
        metrics["groups"] = float(len(groups))
        for key in ("loss", "kl", "clip_fraction", "clip_fraction_low", "clip_fraction_high", "grad_norm",
                    "lr", "tokens_per_s", "completion_tokens", "truncated", "optimizer_steps"):
            if key in update_stats:
                metrics[key] = float(update_stats[key])
        # Sampler / trainer mismatch: only where the backend reported its log-probs.
        metrics.update({k: float(v) for k, v in update_stats.items() if k.startswith(("mismatch/", "is_weight/"))})
        return metrics
