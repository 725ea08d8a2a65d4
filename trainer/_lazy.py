"""A package's public names served from their modules on first use (PEP 562), so importing one light
module of the package does not import the heavy ones (torch, transformers, PEFT) beside it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_names(package: str, public: Mapping[str, Sequence[str]]) -> tuple[list[str], Callable[[str], Any]]:
    """(`__all__`, `__getattr__`) for `package`, from {module: its public names}."""
    home = {name: module for module, names in public.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return sorted(home), __getattr__
