"""Sampling backends: `hf` (transformers, any device) and `vllm` (optional extra, CUDA).

Use `get_backend(name, **kwargs)`; each backend module is imported only when chosen, so vLLM is never
imported unless asked for.
"""

from __future__ import annotations

from typing import Any

from trainer.backends.base import BackendUnavailableError, Sample, SamplingBackend

BACKENDS = ("hf", "vllm")


def get_backend(name: str, **kwargs: Any) -> SamplingBackend:
    """Build a sampling backend by name.

    - "hf": `HFBackend(model, tokenizer, *, batch_size=...)` around the live PEFT policy model.
    - "vllm": `VLLMBackend(model_path, *, tokenizer=..., max_lora_rank=16, ...)`; needs the `[vllm]` extra.
      Prompts reach vLLM as the ids `trainer.rollouts.prompts.encode_prompt` gives with that tokenizer.
    """
    if name == "hf":
        from trainer.backends.hf import HFBackend

        return HFBackend(**kwargs)
    if name == "vllm":
        from trainer.backends.vllm import VLLMBackend

        return VLLMBackend(**kwargs)
    raise ValueError(f"unknown sampling backend {name!r}; choose one of {BACKENDS}")


__all__ = ["BACKENDS", "BackendUnavailableError", "Sample", "SamplingBackend", "get_backend"]
