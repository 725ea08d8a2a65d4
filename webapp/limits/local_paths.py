"""The rules every path a user types for the trainer to read must pass, whatever it names (a local
model folder, a saved program state): no control character, no `..` segment, absolute; then it is
resolved (symlinks followed) and a refusal shows the real path when it differs from the one typed.

Pure path rules: no database, so both the allow-list (`model_allowlist.py`) and the program-state
check (`user_paths.py`) build on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class PathRefused(ValueError):
    """A typed path fails a rule before it is resolved; the message says which, in the field's words."""


@dataclass(frozen=True)
class PathWords:
    """A field's refusals: `relative` is formatted with `path` (the path as typed)."""

    control: str
    parent: str
    relative: str


@dataclass(frozen=True)
class UserPath:
    """A path as typed (`given`) and as the trainer would open it (`real`: absolute, symlinks followed)."""

    given: str
    real: str

    @property
    def shown(self) -> str:
        """How a refusal names it: as typed, with the real path beside it when that is elsewhere."""
        return self.given if self.real == os.path.normpath(self.given) else f"{self.given} (really {self.real})"


def path_segments(path: str) -> list[str]:
    return path.replace("\\", "/").split("/")


def inside(path: str, folder: str) -> bool:
    """`path` is `folder` or below it; both already real paths."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def resolve_user_path(path: str, words: PathWords) -> UserPath:
    """`path` resolved, once it has no control character (a NUL makes realpath raise), no `..` (refused
    before resolving: a path that happens to resolve somewhere allowed is still a typo or a probe) and
    is absolute (a relative or `~` path depends on where the worker runs); else PathRefused."""
    if any(ord(char) < 32 for char in path):
        raise PathRefused(words.control)
    if ".." in path_segments(path):
        raise PathRefused(words.parent)
    if not os.path.isabs(path):
        raise PathRefused(words.relative.format(path=path))
    return UserPath(path, os.path.realpath(path))
