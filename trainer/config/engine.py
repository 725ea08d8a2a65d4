"""The "engine" group of `RunConfig`'s fields: the sampling engine's own knobs (vLLM's, the hf backend's)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config.fields import ConfigError, _meta

# Versions of lag a batch may have (AReaL trains well to 4; past 8 the truncated weights carry little).
MAX_STALENESS = 8


@dataclass
class EngineFields:
    """The sampling engine's knobs; a base of `RunConfig`, whose `__post_init__` calls `_check_engine_knobs`."""

    vllm_gpu_memory_utilization: float = field(default=0.5, metadata=_meta(
        "vLLM: share of the GPU's memory the engine may take (weights, KV cache); the rest is left "
        "to training on the same GPU. 0.5 fits one H100 shared by sampling and training of a model up "
        "to 8B with LoRA. Not read on a CPU, where vLLM sizes its KV cache in bytes.", "engine",
        when={"backend": ("vllm",)}, bounds="0 < x <= 1"))
    vllm_max_model_len: int | None = field(default=None, metadata=_meta(
        "vLLM: the longest prompt + completion the engine serves (its KV cache is sized for it). Empty: "
        "max_context_length, within the model's own positions. Every module call's prompt plus "
        "max_new_tokens must fit, or the step fails saying so.", "engine", when={"backend": ("vllm",)},
            bounds="empty, > max_new_tokens"))
    vllm_enable_sleep_mode: bool = field(default=False, metadata=_meta(
        "vLLM: the engine sleeps during each policy update and wakes to sample, freeing its KV cache "
        "and weights for training on the same GPU (TRL's vllm_enable_sleep_mode; LLM.sleep(level=1)). "
        "CUDA only: vLLM's CPU engine refuses it.", "engine", when={"backend": ("vllm",)}))
    hf_generate_rows: int = field(default=0, metadata=_meta(
        "hf backend: prompt x sample rows per generate call. 0: derived from the model's KV-cache size "
        "and max_new_tokens, so a call's cache stays within about 2 GiB (at most 256 rows).", "engine",
        when={"backend": ("hf",)}, bounds=">= 0"))
    max_staleness: int = field(default=0, metadata=_meta(
        "Sampling and training at the same time: while the trainer updates, a sampler process of its "
        "own generates the next batches with the newest adapter it has, and a batch sampled by policy "
        "version v trains at update t only if t - v <= max_staleness (at most this many batches wait). "
        "0: sample, then train, in one process (the synchronous loop). 1 hides sampling behind training "
        "at one version of lag (verl's one-step off-policy); each version more is more lag to correct, "
        "for little more speed.", "engine", bounds="0 <= x <= 8"))
    sampler_gpus: int = field(default=0, metadata=_meta(
        "With max_staleness >= 1 on a machine with two GPUs or more: how many of them the sampler process "
        "takes for itself (the last ones); the trainer keeps the others. 0: both share the trainer's GPU.",
        "engine", bounds=">= 0"))

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
        self._check_pipeline()
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

    def _check_pipeline(self):
        """The asynchronous pipeline's settings (docs/explanation/the-asynchronous-pipeline.md)."""
        for name in ("max_staleness", "sampler_gpus"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(name, f"{name} must be a whole number of at least 0, not {value!r}.")
        if self.max_staleness > MAX_STALENESS:
            raise ConfigError("max_staleness", f"max_staleness is at most {MAX_STALENESS} (versions of lag the "
                              f"off-policy correction can still carry), not {self.max_staleness}.")
        if not self.max_staleness:
            if self.sampler_gpus:
                raise ConfigError("sampler_gpus", "sampler_gpus gives GPUs to the sampler process, which only "
                                  "runs with max_staleness >= 1: raise max_staleness or leave sampler_gpus 0.")
            return
        if self.num_processes > 1 or self.sharding == "fsdp":
            raise ConfigError("max_staleness", "the sampler process feeds one trainer process: use num_processes 1 "
                              "and sharding 'ddp' with max_staleness >= 1, or max_staleness 0 for many ranks.")
        if self.vllm_enable_sleep_mode:
            raise ConfigError("vllm_enable_sleep_mode", "sleep mode hands the GPU to the update between samplings; "
                              "with max_staleness >= 1 both run at once, so turn sleep mode off.")
