"""Random models shaped like real instruct models, built locally (nothing is downloaded).

Memory and speed at real shapes depend on the vocabulary (the logits), the depth, the attention
layout (query and key/value heads) and the width. `build_shaped_model` takes a real model's
architecture from `SHAPES` and lets the width (and depth) be overridden, so a CPU can hold a model
with Qwen2.5's 151,936-token vocabulary and its 28 layers at width 64, while a GPU builds the real
thing in bf16. Its tokenizer has exactly the model's vocabulary (synthetic byte-level BPE merges,
so every id decodes) and the model family's real chat template and special tokens.

    path = build_shaped_model("/tmp/qwen-shaped", "qwen2.5-1.5b", hidden_size=64)
    model = AutoModelForCausalLM.from_pretrained(path)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

from trainer.models.tiny import build_atomically

BUILD_VERSION = 1

# Qwen2.5 instruct's chat template for plain conversations (its tool-calling branch left out):
# ChatML, with Qwen's default system message when the conversation has none.
QWEN_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Llama 3.1 instruct's header layout (its date and tool preamble left out).
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

_QWEN_TOKENS = {"specials": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "bos": None, "eos": "<|im_end|>",
                "pad": "<|endoftext|>", "template": QWEN_CHAT_TEMPLATE}
_LLAMA3_TOKENS = {"specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                               "<|eot_id|>"], "bos": "<|begin_of_text|>", "eos": "<|eot_id|>",
                  "pad": "<|end_of_text|>", "template": LLAMA3_CHAT_TEMPLATE}

# Architectures as published in each model's config.json.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                     "tie_word_embeddings": True, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
                     "tokens": _QWEN_TOKENS},
    "qwen2.5-1.5b": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                     "tie_word_embeddings": True, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
                     "tokens": _QWEN_TOKENS},
    "qwen2.5-3b": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008,
                   "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
                   "tie_word_embeddings": True, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
                   "tokens": _QWEN_TOKENS},
    "qwen3-8b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "tie_word_embeddings": False, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
                 "tokens": _QWEN_TOKENS},
    "llama3.1-8b": {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
                    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                    "tie_word_embeddings": False, "rope_theta": 500000.0, "max_position_embeddings": 131072,
                    "tokens": _LLAMA3_TOKENS},
}


def shape_config(shape: str, *, hidden_size: int | None = None, num_layers: int | None = None) -> dict[str, Any]:
    """The architecture of `shape`, narrowed to `hidden_size` (heads keep their count, so the
    head width shrinks; the MLP keeps its ratio) and cut to `num_layers` if given."""
    if shape not in SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; known: {', '.join(SHAPES)}")
    spec = {k: v for k, v in SHAPES[shape].items() if k != "tokens"}
    if hidden_size is not None and hidden_size != spec["hidden_size"]:
        heads = spec["num_attention_heads"]
        if hidden_size % (2 * heads):
            raise ValueError(f"hidden_size must be a multiple of {2 * heads} (2 x {heads} heads) for {shape}")
        spec["intermediate_size"] = max(8, round(spec["intermediate_size"] * hidden_size / spec["hidden_size"]))
        spec["hidden_size"] = hidden_size
        spec.pop("head_dim", None)  # hidden_size / heads
    if num_layers is not None:
        spec["num_hidden_layers"] = num_layers
    return spec


def build_shaped_model(path: str | os.PathLike[str], shape: str, *, hidden_size: int | None = None,
                       num_layers: int | None = None, dtype: torch.dtype = torch.float32, seed: int = 0) -> Path:
    """Build (or reuse) a random model of `shape` and its full-vocabulary tokenizer in `path`."""
    spec = shape_config(shape, hidden_size=hidden_size, num_layers=num_layers)
    params = {"build_version": BUILD_VERSION, "shape": shape, "spec": spec, "dtype": str(dtype), "seed": seed}

    def write(folder: Path) -> None:
        tokenizer = full_vocabulary_tokenizer(spec["vocab_size"], SHAPES[shape]["tokens"])
        tokenizer.save_pretrained(folder)
        fields = {k: v for k, v in spec.items() if k != "model_type"}
        config = AutoConfig.for_model(spec["model_type"], **fields, bos_token_id=tokenizer.bos_token_id,
                                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                                   eos_token_id=tokenizer.eos_token_id,
                                                   pad_token_id=tokenizer.pad_token_id)
        model.save_pretrained(folder)

    return build_atomically(path, {"shaped": params}, write)


def full_vocabulary_tokenizer(vocab_size: int, tokens: dict[str, Any]) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer of exactly `vocab_size` entries: the 256 byte symbols, synthetic
    two- and three-symbol merges, then the family's special tokens at the top (as in Qwen and
    Llama 3). Every id decodes, so a random model's samples are text."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    alphabet = sorted(alphabet)
    specials = tokens["specials"]
    budget = vocab_size - len(alphabet) - len(specials)
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    merges: list[tuple[str, str]] = []
    pairs = ((a, b) for a in alphabet for b in alphabet)
    triples = ((a + b, c) for a in alphabet for b in alphabet for c in alphabet)
    for left, right in (*_take(pairs, budget), *_take(triples, max(0, budget - len(alphabet) ** 2))):
        merges.append((left, right))
        vocab[left + right] = len(vocab)
    for special in specials:
        vocab[special] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=tokens["eos"], pad_token=tokens["pad"],
                                        bos_token=tokens["bos"], additional_special_tokens=list(specials),
                                        padding_side="left", model_max_length=131072)
    tokenizer.chat_template = tokens["template"]
    assert len(tokenizer) == vocab_size, (len(tokenizer), vocab_size)
    return tokenizer


def _take(iterator, count: int) -> list:
    out = []
    for item in iterator:
        if len(out) >= count:
            break
        out.append(item)
    return out
