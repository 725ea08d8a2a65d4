"""The sampling-backend protocol: n completions per prompt, with token ids and log-probs.

Log-prob convention (every backend): `Sample.logprobs[t]` is the log-probability of the sampled
token t under softmax(logits / temperature), the distribution the trainer's `sequence_logprobs`
computes with the same temperature. They are a check, never the ratio's denominator (the trainer
computes its own old log-probs): they feed the truncated importance-sampling correction and the
sampler / trainer mismatch metric. Top-k / top-p truncation is not reflected in them (hf); vLLM's
"processed_logprobs" mode does reflect it, which the mismatch metric then shows.

Prompts are raw text or chat messages (`trainer.rollouts.prompts`); every backend tokenizes them with
`trainer.rollouts.prompts.encode_prompt`, as the updater does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable


class BackendUnavailableError(ImportError):
    """A backend's optional dependency is not installed; the message says which extra to install."""


@dataclass(frozen=True)
class Sample:
    """One sampled completion."""

    text: str
    """Decoded completion, special tokens (EOS) removed."""
    token_ids: list[int]
    """Sampled completion tokens, including the EOS when the sample stopped on it."""
    logprobs: list[float] | None
    """Per-token log-probs of `token_ids` (see the module docstring); None when unavailable."""
    finish_reason: Literal["stop", "length"] = "stop"
    """'stop': ended on EOS; 'length': hit max_new_tokens."""


@runtime_checkable
class SamplingBackend(Protocol):
    """What the rollout code needs from a sampler."""

    name: str

    def generate(
        self,
        prompts: list[Any],
        n: int,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = None,
        max_new_tokens: int = 256,
        seed: int = 0,
    ) -> list[list[Sample]]:
        """`n` samples for each prompt, in prompt order: result[i][j] is sample j of prompts[i].

        `temperature=0` is greedy. `top_k` None or 0 disables top-k. Same inputs and seed give the
        same samples on the same machine.
        """
        ...

    def update_adapter(
        self, adapter_path: str | os.PathLike[str] | None = None, *, version: int | None = None
    ) -> None:
        """Sample with the current LoRA weights from now on.

        `adapter_path` is a folder written by `PolicyUpdater.save_adapter`; `version` a new positive
        integer per saved adapter (vLLM caches adapters by it). A backend that shares the live PEFT
        model with the updater may need neither.
        """
        ...


def validate_request(
    prompts: list[Any], n: int, temperature: float, top_p: float, max_new_tokens: int
) -> None:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of prompts (texts or message lists), not one string")
    if n < 1 or max_new_tokens < 1:
        raise ValueError("n and max_new_tokens must be >= 1")
    if temperature < 0.0 or not (0.0 < top_p <= 1.0):
        raise ValueError("need temperature >= 0 (0 = greedy) and 0 < top_p <= 1")
