"""Finishing the runs a program forgot to finish, when it exits.

A training script that dies of an exception, or simply ends without `run.finish()`, would otherwise
leave its run "running" on the server forever and its last steps unsent. At exit, each unfinished run
is finished: failed with the exception's summary when the program died of an uncaught exception (we
wrap `sys.excepthook` to see it: atexit alone cannot tell), succeeded otherwise. The wait for the
upload is short (`EXIT_TIMEOUT_S`); what is left is in the run folder for `cohort sync`.
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import Any, Protocol

EXIT_TIMEOUT_S = 10.0


class Finishable(Protocol):
    def finish(self, state: str = "succeeded", error: str = "", timeout: float | None = 60.0) -> None: ...


_unfinished: dict[int, Finishable] = {}
_lock = threading.Lock()
_installed = False
_uncaught: str | None = None  # the summary of the exception the program is dying of


def summary(kind: type[BaseException], value: BaseException | None) -> str:
    """`ValueError: bad shape`, as the run's error (the server shows it on the run's page)."""
    text = str(value) if value is not None else ""
    return f"{kind.__name__}: {text}" if text else kind.__name__


def track(run: Finishable) -> None:
    """Finishes `run` at exit unless it finished before (`untrack`)."""
    global _installed
    with _lock:
        _unfinished[id(run)] = run
        if not _installed:
            _installed = True
            atexit.register(_finish_forgotten)
            previous = sys.excepthook

            def excepthook(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
                global _uncaught
                _uncaught = summary(kind, value)
                previous(kind, value, traceback)

            sys.excepthook = excepthook


def untrack(run: Finishable) -> None:
    with _lock:
        _unfinished.pop(id(run), None)


def _finish_forgotten() -> None:
    with _lock:
        runs = list(_unfinished.values())
    for run in runs:
        if _uncaught is not None:
            run.finish("failed", error=_uncaught, timeout=EXIT_TIMEOUT_S)
        else:
            run.finish("succeeded", timeout=EXIT_TIMEOUT_S)
