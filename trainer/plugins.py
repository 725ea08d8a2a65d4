"""Programs and rewards from other installed packages, found by Python entry points.

A package installed next to Cohort declares, in its ``pyproject.toml``::

    [project.entry-points."cohort.programs"]
    my_program = "my_package.program:MyProgram"      # an AgentProgram class, or a factory

    [project.entry-points."cohort.rewards"]
    my_reward = "my_package.rewards:my_reward"       # a Reward subclass, or a plain callable

The registry name is the entry point's name. ``PluginGroup`` is the one loader both registries
(``trainer.programs.registry``, ``trainer.rewards.registry``) use:

- **Lazy, once per process.** Nothing is imported until a registry is asked about a name it does
  not hold as a built-in, or for its full list; the result is kept for the life of the process
  (a newly installed plugin shows after a restart).
- **Unavailable, never fatal.** An entry whose import or metadata fails (any exception) is recorded
  with ``"<dist> <version>: <ExceptionType>: message"``; asking for it raises ``ValueError`` with
  that text, and every other program and reward keeps working.
- **Clashes are refused.** A plugin name equal to a built-in's is refused (the built-in, from
  distribution ``cohort``, keeps the name); two plugins with the same name are both refused, since
  neither has a better claim. Each refusal names both distributions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

__all__ = ["BUILTIN_DISTRIBUTION", "Loaded", "PluginGroup", "Unavailable"]

BUILTIN_DISTRIBUTION = "cohort"


@dataclass(frozen=True)
class Unavailable:
    """A plugin entry that is not used: its `error` says why (and, for a clash, names both sides)."""

    name: str
    kind: str  # "program" or "reward"
    distribution: str  # "<name> <version>" of the package that declared the entry
    error: str


@dataclass(frozen=True)
class Loaded:
    """A plugin entry that loaded: `value` is what the registry's `build` made of the entry's object."""

    name: str
    distribution: str
    value: Any


def _distribution_of(entry: metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return "unknown distribution"
    if dist.name == BUILTIN_DISTRIBUTION:  # Cohort's own entries (its DSPy programs) are built-ins
        return BUILTIN_DISTRIBUTION
    return f"{dist.name} {dist.version}"


def _error_text(distribution: str, exc: BaseException) -> str:
    message = str(exc).strip() or "(no message)"
    return f"{distribution}: {type(exc).__name__}: {message}"


class PluginGroup:
    """The entries of one entry point group, loaded on first use.

    `builtin_names()` gives the names the built-ins hold (asked when loading, so built-ins registered
    at import time are all there). `build(name, obj)` turns a loaded object into the registry's value
    and raises (any exception) when the object does not fit the contract.
    """

    def __init__(self, group: str, kind: str, *, builtin_names: Callable[[], Iterable[str]],
                 build: Callable[[str, Any], Any]):
        self.group = group
        self.kind = kind
        self._builtin_names = builtin_names
        self._build = build
        self._lock = threading.RLock()
        self._loaded: dict[str, Loaded] | None = None
        self._unavailable: list[Unavailable] = []
        self._loading = False

    # --- queries -------------------------------------------------------------------------------
    def loaded(self) -> dict[str, Loaded]:
        """The usable entries by name (loading the group on the first call)."""
        self._ensure_loaded()
        return self._loaded or {}

    def unavailable(self) -> list[Unavailable]:
        """The refused or broken entries, one per (name, distribution), sorted by name."""
        self._ensure_loaded()
        return list(self._unavailable)

    def error_for(self, name: str) -> str | None:
        """Why `name` is unavailable (None when it is not a refused or broken entry of this group)."""
        errors = [u.error for u in self.unavailable() if u.name == name]
        return errors[0] if errors else None

    # --- loading -------------------------------------------------------------------------------
    def _ensure_loaded(self) -> None:
        if self._loaded is not None:
            return
        with self._lock:
            # A plugin that asks a registry while it is being imported sees what is loaded so far.
            if self._loaded is not None or self._loading:
                return
            self._loading = True
            try:
                loaded, unavailable = self._load()
            finally:
                self._loading = False
            self._unavailable = unavailable
            self._loaded = loaded

    def _entries(self) -> list[metadata.EntryPoint]:
        try:
            return list(metadata.entry_points(group=self.group))
        except Exception:  # a corrupt installed distribution must not take the registry down
            return []

    def _load(self) -> tuple[dict[str, Loaded], list[Unavailable]]:
        builtins = set(self._builtin_names())
        by_name: dict[str, list[metadata.EntryPoint]] = {}
        for entry in self._entries():
            by_name.setdefault(entry.name, []).append(entry)
        loaded: dict[str, Loaded] = {}
        unavailable: list[Unavailable] = []
        for name in sorted(by_name):
            entries = by_name[name]
            distributions = [_distribution_of(e) for e in entries]
            if name in builtins:
                for dist in distributions:
                    unavailable.append(Unavailable(name, self.kind, dist, (
                        f"{self.kind} name {name!r} of {dist} clashes with the built-in {self.kind} of "
                        f"{BUILTIN_DISTRIBUTION}; the built-in keeps the name (rename the entry point in "
                        f"{dist.split()[0]})")))
                continue
            if len(entries) > 1:
                both = " and ".join(distributions)
                for dist in distributions:
                    unavailable.append(Unavailable(name, self.kind, dist, (
                        f"{self.kind} name {name!r} is declared by both {both}; neither is used "
                        "(rename the entry point in one of them)")))
                continue
            entry, dist = entries[0], distributions[0]
            try:
                value = self._build(name, entry.load())
            except (Exception, SystemExit) as exc:  # a plugin's bug is its own, never Cohort's crash
                unavailable.append(Unavailable(name, self.kind, dist, _error_text(dist, exc)))
                continue
            loaded[name] = Loaded(name, dist, value)
        return loaded, unavailable
