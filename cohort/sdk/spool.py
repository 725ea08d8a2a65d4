"""A run's folder, the write-ahead log every logged step goes through before it is sent.

    <dir>/<client_id>/      <dir>: init's `dir`, else `runs_home()` (outside the working folder)
        run.json        the server's URL, the create request, the run's id once the server gave one,
                        how many lines of steps.jsonl the server has answered, the finish request
        steps.jsonl     one sealed step a line: {"step": 3, "metrics": {...}, "rollouts": [...]}
        rejected.jsonl  a step the server refused for good, with its answer (one line each)

Why a file first: the training loop must never wait for the network, and a step must survive the
network being down for longer than the process lives. Appending a line is microseconds; the sender
thread, or `cohort sync` after the process is gone, reads the same lines. The server stores a step
once whatever the retries (by step number), so "answered" only has to be a lower bound: lines past
the watermark may be sent again, never lost. The token is never written here.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

RUN_FILE, STEPS_FILE, REJECTED_FILE = "run.json", "steps.jsonl", "rejected.jsonl"
FORMAT = 1


def runs_home() -> Path:
    """Where `cohort.init()` makes run folders unless told (`dir=`), and where `cohort sync` without a
    folder looks: `$COHORT_DIR`, else `$XDG_CACHE_HOME/cohort/runs`, else `~/.cache/cohort/runs` (beside
    the model cache, ~/.cache/cohort). Never the working folder: a script run from a checkout or a
    notebook's folder must not leave a folder behind in it."""
    chosen = os.environ.get("COHORT_DIR")
    if chosen:
        return Path(chosen).expanduser().absolute()
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache).expanduser() if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / "cohort" / "runs"


class Spool:
    """One run folder: its record (`state`, the fields of run.json) and its step lines. Safe to share
    between the training thread (appends steps, records the finish) and the sender (records answers)."""

    def __init__(self, folder: Path, state: dict[str, Any]):
        self.folder = Path(folder)
        self.state = state
        self._lock = threading.Lock()
        self._out = None  # steps.jsonl, open for appending while the run logs

    @classmethod
    def create(cls, folder: Path, *, url: str | None, create: dict[str, Any]) -> Spool:
        """A new run folder (FileExistsError when `folder` already holds a run)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if (folder / RUN_FILE).exists():
            raise FileExistsError(f"{folder} already holds a run")
        spool = cls(folder, {"format": FORMAT, "client_id": create["client_id"], "url": url, "create": create,
                             "run_id": None, "run_url": None, "acked": 0, "finish": None, "finished": False})
        (folder / STEPS_FILE).touch()
        spool.save()
        return spool

    @classmethod
    def open(cls, folder: Path) -> Spool:
        """The run recorded in `folder`; ValueError when it holds none."""
        path = Path(folder) / RUN_FILE
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"{folder} is not a Cohort run folder (no {RUN_FILE})") from None
        except ValueError as exc:
            raise ValueError(f"{path} is not readable JSON: {exc}") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT or "create" not in state:
            raise ValueError(f"{path} is not a run record this version of cohort reads")
        return cls(Path(folder), state)

    # --- the record -----------------------------------------------------------------------------

    def update(self, **fields: Any) -> None:
        """Changes fields of the record and writes it (whole, then renamed: never half-written)."""
        with self._lock:
            self.state.update(fields)
            self._write()

    def save(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        temporary = self.folder / f".{RUN_FILE}.{os.getpid()}.{threading.get_ident()}"
        temporary.write_text(json.dumps(self.state, indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, self.folder / RUN_FILE)

    # --- the steps ------------------------------------------------------------------------------

    def append(self, line: str) -> None:
        """Appends one step's JSON (no newline) and hands it to the operating system at once, so a
        process that dies the next moment has still written it."""
        if self._out is None:
            self._out = open(self.folder / STEPS_FILE, "a", encoding="utf-8")  # held open while the run logs
        self._out.write(line + "\n")
        self._out.flush()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def lines(self, start: int = 0) -> list[str]:
        """The step lines from line `start` on; a last line without its newline (a process that died
        while writing it) is left out."""
        path = self.folder / STEPS_FILE
        if not path.exists():
            return []
        text = path.read_text(encoding="utf-8")
        complete = text[: text.rfind("\n") + 1]
        return complete.splitlines()[start:]

    def reject(self, line: str, status: int, message: str, errors: dict | None = None) -> None:
        """Keeps a step the server refused for good, with the server's answer."""
        record = {"status": status, "message": message, "errors": errors or {}, "step": json.loads(line)}
        with self._lock, open(self.folder / REJECTED_FILE, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def run_folders(paths: list[Path]) -> list[Path]:
    """The run folders named, a folder of run folders (`runs_home()`) standing for each run in it."""
    found = []
    for path in map(Path, paths):
        if (path / RUN_FILE).exists() or not path.is_dir():
            found.append(path)
        else:
            inside = sorted(child for child in path.iterdir() if (child / RUN_FILE).exists())
            found.extend(inside or [path])
    return found


def has_unsent(spool: Spool) -> bool:
    """Whether the folder holds something its server has not answered: the run's creation, a step, or
    the finish its program recorded. (A run whose program is still logging counts too: `cohort sync`
    sending its steps alongside is harmless, the server stores each step once.)"""
    state = spool.state
    return (state.get("run_id") is None or state.get("acked", 0) < len(spool.lines())
            or bool(state.get("finish")) and not state.get("finished"))


def unsent_folders(home: Path) -> list[Path]:
    """The run folders under `home` that hold something not uploaded, oldest first (their names start
    with the time they were made)."""
    if not home.is_dir():
        return []
    found = []
    for child in sorted(home.iterdir()):
        try:
            spool = Spool.open(child)
        except (ValueError, OSError):
            continue  # not a run folder (or one this version does not read): `cohort sync DIR` says why
        if has_unsent(spool):
            found.append(child)
    return found
