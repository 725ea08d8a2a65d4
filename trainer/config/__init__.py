"""`RunConfig`: everything a training run needs, in one typed dataclass.

The web form validates with this very class and the worker runs it, so an invalid combination is
caught before anything is queued. Every field carries its help text and form group in its
metadata (`RunConfig.field_help()`), so the form, the CLI and this package say the same thing; a field
read only under some choices (MHGPO's sampling, the vLLM knobs) also says which
(`RunConfig.field_conditions()`), so the form shows it only then.
Invalid values raise `ValueError` with a message that says how to fix them.

The package declares the fields by form group, one module each (`model`, `task`, `prompts`,
`strategy`, `advantage`, `batch`, `optim`, `lora`, `sampling`, `engine`, `evaluation`: a dataclass
base holding its fields and their checks); `run_config` composes them into `RunConfig`; `fields` holds
what they share (`_meta`, `GROUP_TITLES`, `ConfigError`, the constants and choice types), and
`presets` the papers' setups. Import the names from `trainer.config`.

    >>> RunConfig(program="toy", group_size=4, rollouts_per_example=4).group_size
    4
    >>> RunConfig(program="toy", strategy="mhgpo", sampling="rr", fork_probabilities=[0.5])
    Traceback (most recent call last):
    ...
    trainer.config.ConfigError: fork_probabilities must sum to 1 (got 0.5): one probability per agent, e.g. [0.7, 0.1, 0.2].
"""

from __future__ import annotations

from trainer.config.fields import (
    BUILTIN_MODELS,
    GROUP_TITLES,
    LORA_TARGETS,
    PROGRAM_OPTIMIZES_PROMPTS,
    SMOLLM2_MODEL,
    TINY_MODEL,
    VLLM_LORA_RANKS,
    VLLM_MAX_TEMPERATURE,
    ConfigError,
    Estimator,
    PromptOptimizer,
    Sampling,
    Strategy,
    literal_choices,
)
from trainer.config.presets import PRESETS, preset_titles, preset_values
from trainer.config.run_config import RunConfig, from_preset
from trainer.config.task import RewardSpec

__all__ = [
    "BUILTIN_MODELS", "GROUP_TITLES", "LORA_TARGETS", "PRESETS", "PROGRAM_OPTIMIZES_PROMPTS", "SMOLLM2_MODEL",
    "TINY_MODEL",
    "VLLM_LORA_RANKS", "VLLM_MAX_TEMPERATURE", "ConfigError", "Estimator", "PromptOptimizer", "RewardSpec",
    "RunConfig", "Sampling", "Strategy", "from_preset", "literal_choices", "preset_titles", "preset_values",
]

# `doctest.testmod(trainer.config)` (tests/trainer/test_config.py) finds the examples of this
# package's own docstrings only; these live in its modules.
__test__ = {"RunConfig.field_conditions": RunConfig.field_conditions}
