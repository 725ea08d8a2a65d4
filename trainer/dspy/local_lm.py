"""``CohortLM``: a DSPy LM that samples from a local model through Cohort's own sampling backend.

A prompt optimizer (MIPROv2, GEPA), an evaluation, or the program after training all call the model
outside a training rollout; they need an LM that answers on its own. ``CohortLM`` is a ``dspy.LM``
on an engine (DSPy 3.4's ``complete(Request) -> Response``) that renders the request's chat messages
with the model's chat template, as the trainer does (``trainer.rollouts.prompts``), and samples them with
``HFBackend``, the backend training samples with, optionally with a LoRA adapter Cohort trained. So
the prompts that were optimized, the rollouts that trained and the program that is returned all see
the same weights and the same rendering.

The model is loaded on first use and shared by every copy of the LM (DSPy copies LMs freely); calls
from several threads (``dspy.Evaluate(num_threads=...)``) are served one at a time. The ``model``
name DSPy sees is ``cohort/<model>`` or ``cohort/<model>@<adapter folder>``, so a program whose LM
now carries a trained adapter reads as a changed model to ``dspy.BetterTogether``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage

from trainer.dspy.lm import request_messages

__all__ = ["CohortLM", "SamplerEngine", "backend_sampler"]

DEFAULT_MAX_TOKENS = 256


class _Loaded:
    """The model, tokenizer and sampling backend of one (model, adapter, device), loaded once."""

    _cache: dict[tuple[str, str | None, str], _Loaded] = {}
    _cache_lock = threading.Lock()

    def __init__(self, model: str, adapter: str | None, device: str, model_cache_dir: str | None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from trainer.backends.hf import HFBackend
        from trainer.config import RunConfig
        from trainer.models.paths import resolve_model_path

        path = resolve_model_path(RunConfig(model=model), None, model_cache_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
        if adapter is not None:
            from peft import PeftModel

            base = PeftModel.from_pretrained(base, adapter)
        base.eval()
        self.backend = HFBackend(base, self.tokenizer, batch_size=16)
        self.lock = threading.Lock()  # one generate at a time, whichever LM (and seed) asks

    @classmethod
    def get(cls, model: str, adapter: str | None, device: str, model_cache_dir: str | None) -> _Loaded:
        key = (model, adapter, device)
        with cls._cache_lock:
            if key not in cls._cache:
                cls._cache[key] = cls(model, adapter, device, model_cache_dir)
            return cls._cache[key]


class SamplerEngine:
    """A DSPy engine answering each request with one sample of ``sample(messages, temperature,
    max_tokens) -> trainer.backends.Sample``; the defaults apply where the request sets none."""

    def __init__(self, sample: Callable[..., Any], default_temperature: float, default_max_tokens: int):
        self.sample = sample
        self.default_temperature, self.default_max_tokens = default_temperature, default_max_tokens

    def complete(self, request) -> Response:
        config = getattr(request, "config", None)
        temperature = getattr(config, "temperature", None)
        max_tokens = getattr(config, "max_tokens", None)
        sample = self.sample(request_messages(request),
                             self.default_temperature if temperature is None else temperature,
                             max_tokens or self.default_max_tokens)
        usage = Usage(input_tokens=0, output_tokens=len(sample.token_ids), total_tokens=len(sample.token_ids))
        return Response(id=None, model=request.model, message=Message.assistant([TextPart(sample.text)]),
                        finish_reason="stop", usage=usage)

    def stream(self, request):
        raise NotImplementedError("Cohort samples whole completions; streaming is not supported")

    def close(self) -> None:
        pass


def backend_sampler(backend: Any, tokenizer: Any, prompt_format: str, lock: threading.Lock, *,
                    seed: int = 0) -> Callable[..., Any]:
    """``sample(messages, temperature, max_tokens)`` on a loaded sampling backend (HF or vLLM), with the
    prompt rendered as the trainer renders it; one call at a time."""
    from trainer.rollouts.prompts import render_prompt

    seeds = itertools.count(seed)

    def sample(messages, temperature: float, max_tokens: int):
        prompt = render_prompt(tokenizer, messages, prompt_format)
        with lock:
            [[one]] = backend.generate([prompt], 1, temperature=temperature, max_new_tokens=max_tokens,
                                       seed=next(seeds) % (2**31))
        return one

    return sample


def _loaded_sampler(model: str, adapter: str | None, device: str, model_cache_dir: str | None, seed: int):
    """A sampler that loads (model, adapter, device) on its first call, once per process; its own seed
    stream starts at `seed`, so two LMs with different seeds sample differently from one loaded model."""
    sampler = None

    def sample(messages, temperature: float, max_tokens: int):
        nonlocal sampler
        if sampler is None:
            loaded = _Loaded.get(model, adapter, device, model_cache_dir)
            sampler = backend_sampler(loaded.backend, loaded.tokenizer, "chat", loaded.lock, seed=seed)
        return sampler(messages, temperature, max_tokens)

    return sample


class CohortLM(dspy.LM):
    """A DSPy LM sampling from ``model`` (a Cohort model id such as ``builtin:smollm2-135m-instruct``,
    a folder or a hub id) with Cohort's HF backend, optionally with a trained LoRA ``adapter`` folder.

    ``temperature`` and ``max_tokens`` are the defaults for calls that do not set their own. DSPy's
    response cache is off unless ``cache=True``: sampled answers should differ between calls.
    """

    def __init__(self, model: str, *, adapter: str | Path | None = None, temperature: float = 0.7,
                 max_tokens: int = DEFAULT_MAX_TOKENS, device: str = "cpu", seed: int = 0,
                 model_cache_dir: str | Path | None = None, cache: bool = False):
        adapter = str(Path(adapter).resolve()) if adapter is not None else None
        if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{adapter} is not a LoRA adapter folder (no adapter_config.json)")
        sample = _loaded_sampler(model, adapter, device, str(model_cache_dir) if model_cache_dir else None, seed)
        engine = SamplerEngine(sample, temperature, max_tokens)
        name = f"cohort/{model}" + (f"@{adapter}" if adapter else "")
        super().__init__(name, engine=engine, cache=cache, temperature=temperature, max_tokens=max_tokens)
        self.cohort_model, self.adapter, self.device = model, adapter, device
        self.model_cache_dir = model_cache_dir

    def with_adapter(self, adapter: str | Path | None) -> CohortLM:
        """The same model and settings with another adapter (None: the base model)."""
        return CohortLM(self.cohort_model, adapter=adapter, temperature=self.kwargs.get("temperature", 0.7),
                        max_tokens=self.kwargs.get("max_tokens", DEFAULT_MAX_TOKENS), device=self.device,
                        model_cache_dir=self.model_cache_dir, cache=self.cache)
