"""Local model builders: no download, everything is built on the machine that uses it."""

from trainer.models.tiny import DEFAULT_TINY_DIR_ENV, build_tiny_model, ensure_tiny_model

__all__ = ["DEFAULT_TINY_DIR_ENV", "build_tiny_model", "ensure_tiny_model"]
