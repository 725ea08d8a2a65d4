"""The "optim" group of `RunConfig`'s fields: the optimizer, its schedule, the clipped loss and
its aggregation, micro-batches, and importance-sampling correction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from trainer.config.fields import ConfigError, _meta


@dataclass
class OptimFields:
    """The optimization settings; a base of `RunConfig`, whose `__post_init__` calls `_check_optim_numbers`."""

    learning_rate: float = field(default=1e-5, metadata=_meta("AdamW learning rate of the LoRA weights.", "optim",
        bounds="> 0"))
    lr_scheduler: Literal["constant", "linear", "cosine"] = field(default="constant", metadata=_meta(
        "Learning-rate schedule after warmup.", "optim"))
    warmup_steps: int = field(default=0, metadata=_meta("Optimizer steps of linear warmup.", "optim",
        bounds=">= 0"))
    weight_decay: float = field(default=0.0, metadata=_meta("AdamW weight decay.", "optim", bounds=">= 0"))
    clip_eps_low: float = field(default=0.2, metadata=_meta(
        "Lower clip range of the importance ratio: clip(ratio, 1 - eps_low, ...).", "optim", bounds="0 < x < 1"))
    clip_eps_high: float = field(default=0.2, metadata=_meta(
        "Upper clip range: clip(ratio, ..., 1 + eps_high); 0.28 is DAPO's clip-higher.", "optim",
            bounds="0 < x < 1"))
    kl_beta: float = field(default=0.0, metadata=_meta(
        "Weight of the KL penalty to the reference model (the base model, adapter disabled).", "optim",
            bounds=">= 0"))
    loss_aggregation: Literal["token", "sequence", "dr_grpo"] = field(default="token", metadata=_meta(
        "How token losses are averaged: 'token' over all tokens of the batch (DAPO), 'sequence' "
        "per completion then over completions (GRPO Eq. 1), 'dr_grpo' by a constant.", "optim"))
    micro_batch_size: int = field(default=8, metadata=_meta(
        "Completions per forward/backward pass on each process (TRL's per_device_train_batch_size; a "
        "memory knob that does not change the math).", "optim", bounds=">= 1"))
    gradient_accumulation_steps: int = field(default=0, metadata=_meta(
        "Micro-batches per optimizer step (TRL's meaning): one optimizer step sees micro_batch_size x "
        "gradient_accumulation_steps x num_processes completions, so a step's batch of B x R completions "
        "takes several optimizer steps (GDPO: 4-8). 0: the whole batch, one optimizer step per epoch.", "optim",
            bounds=">= 0"))
    max_grad_norm: float = field(default=1.0, metadata=_meta("Gradient-norm clipping threshold.", "optim",
        bounds="> 0"))
    ppo_epochs: int = field(default=1, metadata=_meta(
        "Passes over a step's rollouts (GRPO's mu, TRL's num_iterations); multiplies the optimizer steps "
        "of a step. Old log-probs come from before the first optimizer step, so from the second one on "
        "the clip bites.", "optim", bounds=">= 1"))
    importance_sampling_correction: bool = field(default=True, metadata=_meta(
        "Where the sampler is another copy of the policy (vLLM, or the sampler process of "
        "max_staleness >= 1), weight each token's loss by min(p_trainer / p_sampler, cap): corrects for "
        "sampler and trainer computing slightly different policies (TRL's "
        "vllm_importance_sampling_correction), or an older one (decoupled PPO, as in AReaL).", "optim"))
    importance_sampling_cap: float = field(default=2.0, metadata=_meta(
        "Upper bound of the importance-sampling weight (truncated importance sampling).", "optim",
        when={"importance_sampling_correction": ("true",)}, bounds=">= 1"))

    def _check_optim_numbers(self):
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

    def optimizer_steps_per_step(self) -> int:
        """Optimizer steps one training step takes when each rollout makes one module call:
        ppo_epochs x ceil(micro-batches per process / gradient_accumulation_steps). Schedules are
        sized with it; a program with more calls per rollout takes more (the rate then holds at the
        schedule's end)."""
        completions = -(-self.examples_per_step * self.rollouts_per_example // self.num_processes)
        micro = -(-completions // self.micro_batch_size)
        chunks = -(-micro // self.gradient_accumulation_steps) if self.gradient_accumulation_steps else 1
        return self.ppo_epochs * chunks
