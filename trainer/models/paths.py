"""Where the model a config names is on this machine: a folder or hub id as given, or a built-in
model built into the model cache on first use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.config import BUILTIN_MODELS, ConfigError, RunConfig
from trainer.models.builtin import build_builtin_model
from trainer.models.smollm2 import ModelBuildError


def resolve_model_path(config: RunConfig, program: Any, cache_dir: str | Path | None = None) -> str:
    """The folder or hub id to load; a built-in model (`builtin:tiny` with the program's words,
    `builtin:smollm2-135m-instruct`) is built into the model cache on first use."""
    if config.model not in BUILTIN_MODELS:
        return config.model
    corpus = list(getattr(program, "tokenizer_corpus", ()) or ())
    base = Path(cache_dir or os.environ.get("COHORT_MODEL_CACHE") or Path.home() / ".cache" / "cohort")
    try:
        return str(build_builtin_model(config.model, base, program=config.program, corpus=corpus, seed=config.seed))
    except ModelBuildError as exc:
        raise ConfigError("model", str(exc)) from None
