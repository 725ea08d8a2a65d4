"""The LoRA adapter of the policy: its configuration, wrapping, loading and memory settings.

The adapter is MMGRPO Section 5's (r=16, alpha=64, dropout 0.05 on q, k, v, o, up, down, gate);
the base weights are frozen and loaded once: the KL reference is the same model with the adapter
disabled.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj")


def lora_config(
    r: int = 16,
    alpha: int = 64,
    dropout: float = 0.05,
    targets: Sequence[str] = DEFAULT_LORA_TARGETS,
    *,
    init_lora_weights: bool | str = True,
) -> LoraConfig:
    """The LoRA adapter of MMGRPO Section 5 (rank 16, alpha 64, dropout 0.05, all projections).

    `init_lora_weights=True` is PEFT's default and the paper's setting: B = 0, so the adapter starts as
    the identity and the very first update moves only the B matrices (A gets a zero gradient while
    B = 0). `"orthogonal"` starts with A and B both non-zero but B @ A = 0 (needs an even rank).
    """
    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(targets),
        bias="none",
        task_type="CAUSAL_LM",
        init_lora_weights=init_lora_weights,
    )


def wrap_with_lora(
    model: torch.nn.Module,
    *,
    r: int = 16,
    alpha: int = 64,
    dropout: float = 0.05,
    targets: Sequence[str] = DEFAULT_LORA_TARGETS,
    init_lora_weights: bool | str = True,
    seed: int | None = 0,
) -> PeftModel:
    """Wrap `model` with a fresh LoRA adapter; base weights are frozen, only `lora_` params train.

    `seed` makes the random A init reproducible without touching the caller's RNG stream.
    """
    config = lora_config(r, alpha, dropout, targets, init_lora_weights=init_lora_weights)
    with _seeded(seed):
        return get_peft_model(model, config)


def load_policy_model(
    model_path: str | os.PathLike[str],
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    gradient_checkpointing: bool = False,
    **lora_kwargs: Any,
) -> tuple[PeftModel, Any]:
    """Load a causal LM and its tokenizer from a folder or hub id, wrapped with LoRA. -> (model, tokenizer).

    One copy of the base weights: the KL reference is the same model with the adapter disabled.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype or torch.float32).to(device)
    model = wrap_with_lora(base, **lora_kwargs)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model, tokenizer


def enable_gradient_checkpointing(model: PeftModel) -> None:
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    activation memory drops from one set per layer to one layer's, for about a third more compute.

    With frozen base weights nothing before the first LoRA layer requires grad, so the checkpointed
    blocks would see inputs without grad and (in the reentrant variant) drop the adapters' gradient:
    the input embeddings are made to require grad (PEFT's `prepare_model_for_kbit_training` does
    the same), and the non-reentrant variant is used.
    """
    model.get_base_model().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()


def lora_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The trainable LoRA parameters by name (what the optimizer updates)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad and "lora_" in n}


def train_mode_dropout(model: torch.nn.Module) -> float:
    """The largest dropout probability a train-mode forward pass of `model` applies (0.0: none, so a
    training pass computes what an eval pass does): its dropout modules (PEFT's `lora_dropout`,
    GPT-2's) and the functional dropouts its config sets (Llama's and Qwen's `attention_dropout`).
    A config rate that a model never applies (a classifier's) only makes the answer cautious.

        >>> train_mode_dropout(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1)))
        0.1
    """
    rates = [float(m.p) for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)]
    get_base = getattr(model, "get_base_model", None)
    config = getattr(get_base() if callable(get_base) else model, "config", None)
    settings = config.to_dict() if hasattr(config, "to_dict") else {}
    rates += [float(v) for k, v in settings.items()
              if ("dropout" in k or "pdrop" in k) and isinstance(v, int | float) and not isinstance(v, bool)]
    return max(rates, default=0.0)



@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device | None = None):
    """Run a block under a fixed torch seed, restoring the caller's RNG state afterwards."""
    if seed is None:
        yield
        return
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
