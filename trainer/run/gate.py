"""A step gate: whoever writes a file decides when each training step may start.

Fault drills must inject a fault while a run is provably mid-training and check its progress
afterwards, on a machine of any speed. Timing guesses ("60 steps will outlast a 30 s outage") fail
on a fast idle machine and pass on a loaded one, so the drills hold the trainer instead:

    COHORT_STEP_GATE=/tmp/gate python -m trainer train ...   # the variable reaches the trainer
    echo 3 > /tmp/gate      # steps 1-3 may run; the loop then waits before step 4
    echo 10 > /tmp/gate     # ... and now up to step 10

A missing file (or no variable) means no limit. A cancel (the STOP file) ends the wait, so a held
run can still be cancelled. The file is read, never written, by the trainer; write it atomically
(`StepGate.allow`) so a half-written number is never read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

GATE_ENV = "COHORT_STEP_GATE"
POLL_S = 0.02


class StepGate:
    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    @classmethod
    def from_env(cls) -> StepGate:
        return cls(os.environ.get(GATE_ENV) or None)

    def limit(self) -> int | None:
        """The last step allowed to start, or None for no limit."""
        if self.path is None:
            return None
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return None
        return int(text) if text else None

    def allow(self, last_step: int) -> None:
        """Let steps up to `last_step` start (written by rename, so a reader sees all or nothing)."""
        assert self.path is not None, "a gate without a file cannot be opened"
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(f"{last_step}\n")
        os.replace(temporary, self.path)

    def wait_for(self, step: int, should_stop: Callable[[], bool]) -> None:
        """Returns once `step` may start, or as soon as the run is asked to stop."""
        while (limit := self.limit()) is not None and step > limit and not should_stop():
            time.sleep(POLL_S)
