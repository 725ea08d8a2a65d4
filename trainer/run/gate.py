"""A step gate: whoever writes a file decides when each training step may start.

Fault drills must inject a fault while a run is provably mid-training and check its progress
afterwards, on a machine of any speed. Timing guesses ("60 steps will outlast a 30 s outage") fail
on a fast idle machine and pass on a loaded one, so the drills hold the trainer instead:

    COHORT_STEP_GATE=/tmp/gate python -m trainer train ...   # the variable reaches the trainer
    echo 3 > /tmp/gate      # steps 1-3 may run; the loop then waits before step 4
    echo 10 > /tmp/gate     # ... and now up to step 10

A line `run-12 5` holds one run on its own (the run whose folder is named run-12), whatever the
first line says: a test that drives many runs of one worker (a sweep) lets each go its own way.

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
    def __init__(self, path: str | Path | None, name: str = ""):
        self.path = Path(path) if path else None
        self.name = name  # the run's folder name: its own line of the file, if any, wins

    @classmethod
    def from_env(cls) -> StepGate:
        return cls(os.environ.get(GATE_ENV) or None)

    def named(self, name: str) -> StepGate:
        """This gate as the run in folder `name` reads it."""
        return StepGate(self.path, name)

    def _lines(self) -> dict[str, int]:
        """"" -> the limit for every run; a run's folder name -> its own."""
        try:
            text = self.path.read_text() if self.path is not None else ""
        except FileNotFoundError:
            return {}
        found = {}
        for line in text.splitlines():
            words = line.split()
            if len(words) == 1:
                found[""] = int(words[0])
            elif len(words) == 2:
                found[words[0]] = int(words[1])
        return found

    def limit(self) -> int | None:
        """The last step allowed to start, or None for no limit."""
        lines = self._lines()
        return lines.get(self.name, lines.get("")) if self.name else lines.get("")

    def allow(self, last_step: int, *, run: str = "") -> None:
        """Let steps up to `last_step` start, for every run or only for the run in folder `run`
        (written by rename, so a reader sees all or nothing)."""
        assert self.path is not None, "a gate without a file cannot be opened"
        lines = {**self._lines(), run: last_step}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text("".join(f"{name} {n}\n" if name else f"{n}\n" for name, n in lines.items()))
        os.replace(temporary, self.path)

    def wait_for(self, step: int, should_stop: Callable[[], bool]) -> None:
        """Returns once `step` may start, or as soon as the run is asked to stop."""
        while (limit := self.limit()) is not None and step > limit and not should_stop():
            time.sleep(POLL_S)
