"""The "sampling" group of `RunConfig`'s fields: how completions are sampled, and how long they may be."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config.fields import VLLM_MAX_TEMPERATURE, ConfigError, _meta


@dataclass
class SamplingFields:
    """The sampling settings; a base of `RunConfig`, whose `__post_init__` calls these checks."""

    temperature: float = field(default=1.0, metadata=_meta("Sampling temperature.", "sampling",
        bounds="> 0, <= 2 with backend 'vllm'"))
    top_p: float = field(default=1.0, metadata=_meta("Nucleus sampling threshold (1 = off).", "sampling",
        bounds="0 < x <= 1"))
    top_k: int = field(default=0, metadata=_meta("Top-k sampling (0 = off).", "sampling", bounds=">= 0"))
    max_new_tokens: int = field(default=256, metadata=_meta("Longest completion of one module call.", "sampling",
        bounds=">= 1, < max_context_length"))
    max_context_length: int = field(default=8192, metadata=_meta(
        "Train context length: calls whose prompt + completion is longer are left out of the "
        "update (MMGRPO 5.2).", "sampling", bounds="> max_new_tokens"))

    def _check_sampling_numbers(self):
        if self.temperature <= 0:
            raise ConfigError("temperature", f"temperature must be > 0 (use a small value like 0.01 for near-greedy), not {self.temperature!r}.")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p", f"top_p must be in (0, 1], not {self.top_p!r}.")
        if self.max_new_tokens >= self.max_context_length:
            raise ConfigError("max_new_tokens", 
                f"max_new_tokens ({self.max_new_tokens}) must be smaller than max_context_length "
                f"({self.max_context_length}): the prompt needs room too."
            )

    def _check_sampling_for_vllm(self):
        if self.backend == "vllm" and self.temperature > VLLM_MAX_TEMPERATURE:
            raise ConfigError("temperature", f"vLLM samples at temperatures up to {VLLM_MAX_TEMPERATURE:g}; choose "
                              f"one of at most {VLLM_MAX_TEMPERATURE:g} or the 'hf' backend.")
