"""`RunConfig`, composed of the bases that declare each group of fields (one module per group), with
the validation that runs their checks in order, its (de)serialization, `from_preset`, and the field
help and conditions the launch form is built from."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config.advantage import AdvantageFields
from trainer.config.batch import BatchFields
from trainer.config.engine import EngineFields
from trainer.config.evaluation import EvalFields
from trainer.config.fields import ConfigError, literal_choices
from trainer.config.lora import LoraFields
from trainer.config.model import ModelFields
from trainer.config.optim import OptimFields
from trainer.config.presets import preset_values
from trainer.config.prompts import PromptFields
from trainer.config.sampling import SamplingFields
from trainer.config.strategy import StrategyFields
from trainer.config.task import RewardSpec, TaskFields, _reward_from_dict


# A dataclass collects its bases' fields in reverse MRO order, the last base's first: the bases are
# listed from the last group to the first, so `dataclasses.fields(RunConfig)` runs model, task, prompts,
# strategy, advantage, batch, optim, lora, sampling, engine, eval, the order of the launch form,
# `field_help()`, serialized configs and the API schema. (No docstring: the dataclass's generated one,
# its signature, is kept.)
@dataclass
class RunConfig(EvalFields, EngineFields, SamplingFields, LoraFields, OptimFields, BatchFields,
                AdvantageFields, StrategyFields, PromptFields, TaskFields, ModelFields):
    def __post_init__(self):
        self.rewards = [r if isinstance(r, RewardSpec) else _reward_from_dict(r) for r in self.rewards]
        self._check_choices()
        self._check_numbers()
        self._check_combinations()

    # --- validation --------------------------------------------------------------------------
    # The first failing check is the error reported, so the groups' checks run in this fixed order.
    def _check_choices(self):
        for f in dataclasses.fields(self):
            choices = literal_choices(f.type)
            value = getattr(self, f.name)
            if choices and value not in choices:
                raise ConfigError(f.name, f"{f.name} must be one of {', '.join(map(repr, choices))}, not {value!r}.")

    def _check_numbers(self):
        # Whole numbers of every group, checked here in one pass: their order, older than the groups'
        # modules, decides which error a config with several is refused with.
        positive = ["num_processes", "group_size", "rollouts_per_example", "examples_per_step", "steps", "micro_batch_size",
                    "ppo_epochs", "lora_r", "lora_alpha", "max_new_tokens",
                    "max_context_length", "eval_size"]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, f"{name} must be a whole number of at least 1, not {value!r}.")
        for name in ("eval_every", "checkpoint_every", "warmup_steps", "top_k", "seed", "keep_rollouts_last_steps",
                     "keep_rollouts_every", "gradient_accumulation_steps", "prompt_optimizer_trials",
                     "prompt_optimizer_demos", "prompt_optimizer_labeled_demos"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(name, f"{name} must be a whole number of at least 0, not {value!r}.")
        self._check_optim_numbers()
        self._check_token_details()
        self._check_lora_dropout()
        self._check_sampling_numbers()
        self._check_model_numbers()
        self._check_lora_targets()

    def _check_combinations(self):
        self._check_rewards()
        self._check_estimator()
        self._check_group_size()
        self._check_strategy()
        self._check_process_split()
        self._check_lora_for_vllm()
        self._check_sampling_for_vllm()
        self._check_engine_knobs()
        self._check_vllm_processes()

    # --- (de)serialization -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)} (see RunConfig.field_help()).")
        return cls(**data)

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """Loads a TOML file; a top-level `preset = "<name>"` starts from that preset."""
        try:
            data = tomllib.loads(Path(path).read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML: {exc}") from None
        preset = data.pop("preset", None)
        if preset is not None:
            return from_preset(preset, **data)
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str | Path) -> RunConfig:
        """A `.toml` file (see `from_toml`) or a `.json` file of fields."""
        path = Path(path)
        if path.suffix == ".json":
            try:
                return cls.from_dict(json.loads(path.read_text()))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: not valid JSON: {exc}") from None
        return cls.from_toml(path)

    def replace(self, **changes) -> RunConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_help(cls) -> dict[str, dict[str, str]]:
        """`{field: {"help": ..., "group": ...}}` for forms and `--help`."""
        return {f.name: {"help": f.metadata["help"], "group": f.metadata["group"]}
                for f in dataclasses.fields(cls) if f.metadata}

    @classmethod
    def field_conditions(cls) -> dict[str, dict[str, list[str]]]:
        """`{field: {other_field: [values]}}`: a field is read only while every other field listed has
        one of its values (booleans as "true" / "false"; `PROGRAM_OPTIMIZES_PROMPTS` is the program's
        property). Fields read whatever the rest says are left out. Conditions are written closed (a
        test checks it): a field whose controlling field has conditions of its own repeats them, so a
        form can judge each field alone.

            >>> RunConfig.field_conditions()["fork_probabilities"]
            {'strategy': ['mhgpo'], 'sampling': ['rr']}
        """
        return {f.name: {key: list(values) for key, values in f.metadata["when"].items()}
                for f in dataclasses.fields(cls) if f.metadata.get("when")}


def from_preset(name: str, **overrides: Any) -> RunConfig:
    """A config from a paper preset, with `overrides` (e.g. a smaller model or fewer steps)."""
    return RunConfig.from_dict({**preset_values(name), **overrides})
