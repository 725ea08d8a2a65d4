"""The "lora" group of `RunConfig`'s fields: the LoRA adapter that trains, and what vLLM serves of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config.fields import LORA_TARGETS, VLLM_LORA_RANKS, ConfigError, _meta


@dataclass
class LoraFields:
    """The LoRA adapter; a base of `RunConfig`, whose `__post_init__` calls these checks."""

    lora_r: int = field(default=16, metadata=_meta("LoRA rank (MMGRPO: 16).", "lora",
        bounds=">= 1, <= 512 with backend 'vllm'"))
    lora_alpha: int = field(default=64, metadata=_meta("LoRA alpha (MMGRPO: 64).", "lora", bounds=">= 1"))
    lora_dropout: float = field(default=0.05, metadata=_meta("LoRA dropout (MMGRPO: 0.05).", "lora",
        bounds="0 <= x < 1"))
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS), metadata=_meta(
        "Projection modules that get adapters (MMGRPO: q, k, v, o, up, down, gate).", "lora",
            bounds="at least one module; with backend 'vllm', only among q_proj, k_proj, v_proj, o_proj, "
                   "up_proj, down_proj, gate_proj"))

    def _check_lora_dropout(self):
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError("lora_dropout", f"lora_dropout must be in [0, 1), not {self.lora_dropout!r}.")

    def _check_lora_targets(self):
        if not self.lora_targets:
            raise ConfigError("lora_targets", "lora_targets must name at least one module, e.g. ['q_proj', 'v_proj'].")

    def _check_lora_for_vllm(self):
        if self.backend == "vllm" and self.lora_r > VLLM_LORA_RANKS[-1]:
            raise ConfigError("lora_r", f"vLLM serves LoRA adapters up to rank {VLLM_LORA_RANKS[-1]}; choose a "
                              f"lora_r of at most {VLLM_LORA_RANKS[-1]} or the 'hf' backend.")
        if self.backend == "vllm" and set(self.lora_targets) - set(LORA_TARGETS):
            # vLLM's LoRA loader refuses an adapter with modules outside the model's linear layers it
            # serves (vllm/lora/lora_model.py, "unexpected modules") when the first request uses it.
            raise ConfigError("lora_targets", f"vLLM serves adapters on {', '.join(LORA_TARGETS)}; "
                              f"{', '.join(sorted(set(self.lora_targets) - set(LORA_TARGETS)))} would be refused "
                              "when the engine loads the adapter. Choose among those or the 'hf' backend.")
