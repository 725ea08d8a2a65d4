"""Whether the manual is being built beside the running server (no Django imports: the stack uses it).

`make run` builds the manual after the stack is ready (`webapp.stack up --build-manual`), so a fresh clone
serves sooner; the stack writes the builder's process id here for the build's lifetime, and /docs/ answers
"being built" instead of "not built" meanwhile. A file left by a stack that was killed names a process that
is gone, which reads as not building.
"""

from __future__ import annotations

import os

from webapp.paths import VAR_DIR

MANUAL_BUILD_FILE = VAR_DIR / "manual-build.pid"


def mark_building(pid: int) -> None:
    MANUAL_BUILD_FILE.parent.mkdir(parents=True, exist_ok=True)
    MANUAL_BUILD_FILE.write_text(f"{pid}\n")


def clear_building() -> None:
    MANUAL_BUILD_FILE.unlink(missing_ok=True)


def manual_being_built() -> bool:
    try:
        pid = int(MANUAL_BUILD_FILE.read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's process
        return True
    return True
