"""Import paths that moved when the trainer became packages, kept working with a DeprecationWarning.

A plugin, a notebook or a script written against an older Cohort keeps importing
``trainer.sampling``, ``trainer.loop`` or ``trainer.grouping``: `install()` (run by
``trainer/__init__.py``) puts a finder on ``sys.meta_path`` that answers each old path with a module
whose names are looked up, on first use, in the modules that hold them now. Names that moved out of a
module that is still there (``trainer.plugins.unavailable_plugins``) are served the same way by that
module's ``__getattr__`` (`moved_name`).

This module imports nothing of the trainer: the new homes are named as strings and imported only when
an old path is used, so the table never ties the layers together.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

# old module -> the modules that now hold its names, searched in order.
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "trainer.adapter_files": ("trainer.policy.adapter_files",),
    "trainer.advantages": ("trainer.algorithms.advantages",),
    "trainer.batching": ("trainer.policy.batching",),
    "trainer.checkpoint": ("trainer.run.checkpoint",),
    "trainer.cli": ("trainer.run.cli", "trainer.policy.adapter_files"),  # and FINAL_ADAPTER_DIR
    "trainer.distributed": ("trainer.policy.distributed",),
    "trainer.failures": ("trainer.rollouts.failures",),
    "trainer.gate": ("trainer.run.gate",),
    "trainer.grouping": ("trainer.algorithms.groups", "trainer.algorithms.grouping",
                         "trainer.algorithms.teacher_mix"),
    "trainer.launch": ("trainer.run.launch",),
    "trainer.logprobs": ("trainer.policy.logprobs",),
    "trainer.loop": ("trainer.run.loop",),
    "trainer.lora": ("trainer.policy.lora",),
    "trainer.loss": ("trainer.algorithms.loss",),
    "trainer.metrics": ("trainer.algorithms.metrics",),
    "trainer.model_cache": ("trainer.models.cache",),
    "trainer.policy_state": ("trainer.policy.state",),
    "trainer.prompts": ("trainer.rollouts.prompts",),
    "trainer.reporting": ("trainer.run.reporting",),
    "trainer.rollout_engine": ("trainer.rollouts.engine",),
    "trainer.run_setup": ("trainer.run.setup", "trainer.models.paths"),
    "trainer.sampling": ("trainer.rollouts.program", "trainer.rollouts.sampling",
                         "trainer.algorithms.propagation"),
    "trainer.scoring": ("trainer.algorithms.scoring",),
    "trainer.sharding": ("trainer.policy.sharding",),
    "trainer.telemetry": ("trainer.run.telemetry",),
    "trainer.trajectory": ("trainer.rollouts.trajectory",),
    "trainer.update_config": ("trainer.policy.update_config",),
}

# (module, name) -> the module that now holds the name.
MOVED_NAMES: dict[tuple[str, str], str] = {
    ("trainer.plugins", "unavailable_plugins"): "trainer.catalog",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old path will be removed in a later release",
                  DeprecationWarning, stacklevel=3)


class _MovedModule(types.ModuleType):
    """The old module: each name is found in its new homes on first use (then kept)."""

    def __init__(self, name: str, homes: tuple[str, ...]):
        super().__init__(name, f"Moved: see {', '.join(homes)}.")
        self.__homes = homes

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        for home in self.__homes:
            module = importlib.import_module(home)
            if hasattr(module, attr):
                value = getattr(module, attr)
                setattr(self, attr, value)
                return value
        raise AttributeError(f"module {self.__name__!r} (moved to {', '.join(self.__homes)}) has no attribute {attr!r}")

    def __dir__(self) -> list[str]:
        names: set[str] = set()
        for home in self.__homes:
            names.update(n for n in dir(importlib.import_module(home)) if not n.startswith("_"))
        return sorted(names)


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        homes = MOVED_MODULES[spec.name]
        _warn(spec.name, " and ".join(homes))
        return _MovedModule(spec.name, homes)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


_FINDER = _MovedFinder()


def install() -> None:
    """Answers the old import paths from now on (idempotent)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)  # last: a real module of that name, if one comes back, wins


def moved_name(module: str, attr: str) -> Any:
    """A module's ``__getattr__`` for the names that left it (AttributeError for any other)."""
    home = MOVED_NAMES.get((module, attr))
    if home is None:
        raise AttributeError(f"module {module!r} has no attribute {attr!r}")
    _warn(f"{module}.{attr}", f"{home}.{attr}")
    return getattr(importlib.import_module(home), attr)
