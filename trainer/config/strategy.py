"""The "strategy" group of `RunConfig`'s fields: how rollouts are sampled and grouped (GRPO, MMGRPO,
MHGPO), and the checks of the batch shape and estimator each strategy needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from trainer.config.fields import ConfigError, Sampling, Strategy, _meta


@dataclass
class StrategyFields:
    """The grouping strategy and its options; a base of `RunConfig`, whose `__post_init__` calls
    `_check_strategy`."""

    strategy: Strategy = field(default="grpo", metadata=_meta(
        "'grpo': one group per example (single-module programs); 'mmgrpo': module-level groups "
        "keyed by (module, invocation index) (MMGRPO Alg. 1); 'mhgpo': multi-agent rollout "
        "sampling with heterogeneous groups (MHGPO Alg. 2-5).", "strategy"))
    # Not MMGRPO's alone: grpo forms the same module-level groups (trainer/algorithms/scoring.py), which a program
    # calling a module a varying number of times pads; only MHGPO's groups never read it.
    padding: Literal["fill", "truncate"] = field(default="fill", metadata=_meta(
        "MMGRPO PadGroups: 'fill' keeps every invocation index and completes short groups; "
        "'truncate' keeps only indices present in every trajectory.", "strategy",
        when={"strategy": ("grpo", "mmgrpo")}))
    teacher_rollouts: dict[str, int] = field(default_factory=dict, metadata=_meta(
        "MMGRPO teacher mixture: rollouts per example from each teacher program (name -> count); "
        "the student program makes the rest of rollouts_per_example.", "strategy",
        when={"strategy": ("mmgrpo",)},
            bounds="each count >= 1, leaving rollouts_per_example at least one student rollout"))
    sampling: Sampling = field(default="fof", metadata=_meta(
        "MHGPO rollout sampling: 'is' independent sampling (homogeneous groups at every agent), "
        "'fof' fork on the first agent, 'rr' round-robin fork point with fork_probabilities.", "strategy",
        when={"strategy": ("mhgpo",)}))
    fork_probabilities: list[float] = field(default_factory=list, metadata=_meta(
        "MHGPO-RR: probability of forking at each agent, in program order (paper: 0.7, 0.1, 0.2).", "strategy",
        when={"strategy": ("mhgpo",), "sampling": ("rr",)},
            bounds="each >= 0, summing to 1, one per agent of the program"))

    def _check_strategy(self):
        if self.strategy == "grpo" and self.rollouts_per_example != self.group_size:
            raise ConfigError("rollouts_per_example", 
                f"with strategy 'grpo' every example's rollouts form its group: set rollouts_per_example "
                f"({self.rollouts_per_example}) equal to group_size ({self.group_size}), or use strategy 'mmgrpo'."
            )
        if self.strategy != "mmgrpo" and self.teacher_rollouts:
            raise ConfigError("teacher_rollouts", "teacher_rollouts is an MMGRPO option: set strategy = 'mmgrpo' or remove it.")
        if self.teacher_rollouts:
            for name, count in self.teacher_rollouts.items():
                if not isinstance(count, int) or count < 1:
                    raise ConfigError("teacher_rollouts", f"teacher_rollouts[{name!r}] must be a whole number >= 1, not {count!r}.")
            student = self.rollouts_per_example - sum(self.teacher_rollouts.values())
            if student < 1:
                raise ConfigError("teacher_rollouts", 
                    f"teacher rollouts ({sum(self.teacher_rollouts.values())}) leave no rollout for the student "
                    f"out of rollouts_per_example={self.rollouts_per_example}: raise it or lower the teachers'."
                )
        if self.strategy == "mhgpo" and self.sampling == "rr":
            if not self.fork_probabilities:
                raise ConfigError("fork_probabilities", "sampling 'rr' needs fork_probabilities, one per agent, e.g. [0.7, 0.1, 0.2].")
            if any(p < 0 for p in self.fork_probabilities):
                raise ConfigError("fork_probabilities", f"fork_probabilities must be >= 0, got {self.fork_probabilities}.")
            total = sum(self.fork_probabilities)
            if abs(total - 1) > 1e-6:
                raise ConfigError("fork_probabilities", 
                    f"fork_probabilities must sum to 1 (got {total:g}): one probability per agent, e.g. [0.7, 0.1, 0.2]."
                )
        elif self.fork_probabilities:
            raise ConfigError("fork_probabilities", "fork_probabilities is an MHGPO round-robin option: set strategy='mhgpo', sampling='rr'.")
        if self.strategy == "mhgpo" and self.rollouts_per_example != self.group_size:
            raise ConfigError("rollouts_per_example", 
                f"MHGPO forks each question {self.group_size} ways (G): set rollouts_per_example equal to group_size."
            )
        if self.strategy == "mhgpo" and self.estimator == "gdpo":
            raise ConfigError("estimator", 
                "MHGPO propagates one scalar reward backwards through the agents (Eq. 4), so GDPO's "
                "per-reward normalization does not apply: choose estimator 'grpo' with strategy 'mhgpo'."
            )

    def check_program_agents(self, modules: list[str]) -> None:
        """Checks what depends on the program's modules (known only once it is resolved)."""
        if self.strategy == "mhgpo" and self.sampling == "rr" and len(self.fork_probabilities) != len(modules):
            raise ConfigError("fork_probabilities", 
                f"fork_probabilities has {len(self.fork_probabilities)} entries but program {self.program!r} "
                f"has {len(modules)} agents ({', '.join(modules)}): give one probability per agent."
            )
