"""The "task" group of `RunConfig`'s fields: the program, its rewards (`RewardSpec`) and its data."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from trainer.config.fields import _DSPY_ONLY, ConfigError, _meta


@dataclass
class RewardSpec:
    """One reward of the task: a registered reward function, its weight, its parameters, and an
    optional condition (GDPO Eq. 8: this reward counts only when reward `condition_on` >= `threshold`)."""

    name: str
    weight: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)
    condition_on: str | None = None
    threshold: float = 1.0

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ConfigError("rewards", "every reward needs a name, e.g. {name = 'exact_match'}")
        # A JSON or TOML config can hold anything here; each is refused beside the rewards, not as a crash.
        for key in ("weight", "threshold"):
            value = getattr(self, key)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ConfigError("rewards", f"reward {self.name!r}: {key} must be a number, not {value!r}.")
        if not isinstance(self.params, dict):
            raise ConfigError("rewards", f"reward {self.name!r}: params must be a table of parameter values, "
                              f"e.g. {{limit = 4000}}, not {self.params!r}.")
        if self.condition_on is not None and not isinstance(self.condition_on, str):
            raise ConfigError("rewards", f"reward {self.name!r}: condition_on must name another reward, "
                              f"not {self.condition_on!r}.")
        if not math.isfinite(self.weight):
            raise ConfigError("rewards", f"reward {self.name!r}: weight must be a finite number, not {self.weight!r}.")
        if self.condition_on == self.name:
            raise ConfigError("rewards", f"reward {self.name!r} cannot be conditioned on itself; name another reward.")
        from trainer.rewards import get_reward  # the registry validates the name and its parameters

        get_reward(self.name, **self.params)


def _reward_from_dict(data: dict[str, Any]) -> RewardSpec:
    if not isinstance(data, dict):
        raise ConfigError("rewards", f"a reward must be a table like {{name = 'exact_match', weight = 1.0}}, not {data!r}.")
    known = {f.name for f in dataclasses.fields(RewardSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError("rewards", f"unknown reward keys: {', '.join(unknown)} (known: {', '.join(sorted(known))}).")
    return RewardSpec(**data)


@dataclass
class TaskFields:
    """The program and task; a base of `RunConfig`, whose `__post_init__` reads `rewards` into
    `RewardSpec`s (`_reward_from_dict`) before these checks."""

    program: str = field(default="toy", metadata=_meta(
        "Registered LM program (trainer.programs) whose modules are trained.", "task"))
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec("exact_match")], metadata=_meta(
        "Rewards of the task with weights and optional conditioning (GDPO Eq. 8).", "task",
        bounds="at least one registered reward, each once; condition_on names another of the run's rewards"))
    format_failure_reward: float = field(default=0.0, metadata=_meta(
        "Reward of a trajectory whose module output failed to parse (MMGRPO 3.1 fallback); the "
        "partial trajectory up to the failing call is still trained.", "task", bounds="any number"))
    train_data: str | None = field(default=None, metadata=_meta(
        "JSONL file of training examples (the worker exports the task's dataset here). Empty for "
        "programs that generate their examples (toy).", "task"))
    dev_data: str | None = field(default=None, metadata=_meta(
        "JSONL file of evaluation examples. Empty: the program's own dev split, if any.", "task"))
    corpus_data: str | None = field(default=None, metadata=_meta(
        "JSONL retrieval corpus (title, text) for search programs.", "task"))
    program_state: str | None = field(default=None, metadata=_meta(
        "A DSPy program's state saved with its save() after prompt optimization (MIPROv2, GEPA: the "
        "optimized instructions and demos), loaded before training. DSPy programs only.", "task",
        when=_DSPY_ONLY))

    def _check_rewards(self):
        if not self.rewards:
            raise ConfigError("rewards", "at least one reward is needed, e.g. rewards = [{name = 'exact_match'}].")
        names = [r.name for r in self.rewards]
        if len(set(names)) != len(names):
            raise ConfigError("rewards", f"each reward may appear once; repeated: {sorted({n for n in names if names.count(n) > 1})}.")
        for reward in self.rewards:
            if reward.condition_on is not None and reward.condition_on not in names:
                raise ConfigError("rewards", 
                    f"reward {reward.name!r} is conditioned on {reward.condition_on!r}, which is not one of "
                    f"the run's rewards ({', '.join(names)}): add it or remove the condition."
                )
