"""verl's own files as an `ImportedRun`: its file logger and its rollout dumps.

- The file logger (`trainer.logger=[file]`, verl/utils/tracking.py `FileLogger`) appends one JSON line
  per logged step, `{"step": N, "data": {"actor/entropy": ..., "critic/score/mean": ...}}`, to
  `$VERL_FILE_LOGGER_PATH` (else `<project>/<experiment>.jsonl`): each number is kept at its step
  under its name.
- The rollout dumps (`trainer.rollout_data_dir`): one file per step, `<step>.jsonl`, one line per
  sample: `input`, `output`, `gts`, `score`, `step`, and every reward-extra key the reward function
  returned. The samples of one `input` in a step are one group (verl's `rollout.n` responses to a
  prompt); `score` is the reward, each numeric extra key a reward component. `gts` (the ground truth)
  has no place on a rollout: listed as skipped.

`VerlSource` reads incrementally, for `cohort follow`: complete lines only (a line the writer is still
appending waits for its newline), each dump file once it is whole (verl writes it in one go from a
background thread, so it is taken once it ends with a newline and has not changed since the last look).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.importers.records import ImportedRun, Problems, Skip, grouped_by_prompt
from trainer.run import events

DUMP_NAME = re.compile(r"(\d+)\.jsonl")
SAMPLE_FIELDS = ("input", "output", "gts", "score", "step")


def is_metrics_log(path: Path) -> bool:
    """Whether `path` is verl's file log: a .jsonl whose first line is `{"step": ..., "data": {...}}`."""
    if path.suffix != ".jsonl" or DUMP_NAME.fullmatch(path.name):
        return False
    try:
        with path.open("rb") as handle:
            first = json.loads(handle.readline() or b"null")
    except (OSError, ValueError):
        return False
    return isinstance(first, dict) and "step" in first and isinstance(first.get("data"), dict)


def dump_dirs(root: Path) -> list[Path]:
    """Folders under `root` (itself included) holding `<step>.jsonl` dumps."""
    candidates = [root, *(p for p in root.rglob("*") if p.is_dir())] if root.is_dir() else []
    return [d for d in candidates if any(DUMP_NAME.fullmatch(p.name) for p in d.iterdir() if p.is_file())]


@dataclass
class VerlSource:
    """One verl run's files, read from where the last read stopped."""

    log: Path | None
    dumps: Path | None
    offset: int = 0  # bytes of the log read
    head: bytes = b""  # its first line when read from the start: a log written anew has another
    line: int = 0  # lines of the log read
    taken: set[int] = field(default_factory=set)  # dump steps read
    sizes: dict[int, int] = field(default_factory=dict)  # a dump's size at the last look

    def read(self, run: ImportedRun, problems: Problems, *, whole: bool) -> set[int]:
        """Adds what is new to `run`; the steps it added to. `whole`: take every dump file as it is
        (an import of finished files), else only those that look finished (following)."""
        touched = self._read_log(run, problems) if self.log is not None else set()
        if self.dumps is not None and self.dumps.is_dir():
            touched |= self._read_dumps(run, problems, whole=whole)
        return touched

    def _read_log(self, run: ImportedRun, problems: Problems) -> set[int]:
        touched: set[int] = set()
        try:
            with self.log.open("rb") as handle:
                head = handle.readline()
                if self.offset and (handle.seek(0, 2) < self.offset or head != self.head):
                    # verl opens its log with "wb" at every start: a resumed trainer wrote it anew, so it is
                    # read from its start again (the server skips the steps it already has)
                    self.offset = self.line = 0
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return touched
        if self.offset == 0:
            self.head = data[:data.find(b"\n") + 1] if b"\n" in data else b""
        end = data.rfind(b"\n") + 1  # a line still being written waits for its newline
        for raw in data[:end].splitlines():
            self.line += 1
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except ValueError as exc:
                problems.bad(self.log, f"line {self.line}", f"not JSON ({exc})")
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("data"), dict):
                problems.bad(self.log, f"line {self.line}", 'not verl\'s {"step": N, "data": {...}}')
                continue
            step = entry.get("step")
            if isinstance(step, bool) or not isinstance(step, int) or not events.step_in_bounds(step):
                problems.bad(self.log, f"line {self.line}", f"step {step!r} is not a whole number 0-{events.MAX_STEP:,}")
                continue
            metrics = run.step(step)["metrics"]
            for key, value in entry["data"].items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    metrics[str(key)] = float(value) if math.isfinite(value) else None
                elif f"log:{key}" not in {s.what for s in run.skipped}:
                    run.skipped.append(Skip(f"log:{key}", f"{type(value).__name__} values, not numbers"))
            touched.add(step)
        self.offset += end
        return touched

    def _read_dumps(self, run: ImportedRun, problems: Problems, *, whole: bool) -> set[int]:
        touched: set[int] = set()
        files = sorted(((int(m.group(1)), p) for p in self.dumps.iterdir()
                        if (m := DUMP_NAME.fullmatch(p.name))), key=lambda item: item[0])
        for step, path in files:
            if step in self.taken:
                continue
            size = path.stat().st_size
            if not whole and (self.sizes.get(step) != size or not _ends_with_newline(path, size)):
                self.sizes[step] = size  # still being written, perhaps: looked at again next time
                continue
            self.taken.add(step)
            rows = _samples(path, step, run, problems)
            if rows:
                rollouts, _ = grouped_by_prompt(rows)
                run.step(step)["rollouts"] = rollouts
                touched.add(step)
        return touched


def _ends_with_newline(path: Path, size: int) -> bool:
    if size == 0:
        return False
    with path.open("rb") as handle:
        handle.seek(size - 1)
        return handle.read(1) == b"\n"


def _samples(path: Path, step: int, run: ImportedRun, problems: Problems) -> list[dict[str, Any]]:
    rows = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            sample = json.loads(raw)
        except ValueError as exc:
            problems.bad(path, f"line {number}", f"not JSON ({exc})")
            continue
        if not isinstance(sample, dict) or not isinstance(sample.get("input"), str):
            problems.bad(path, f"line {number}", "no 'input' (the prompt): a verl rollout dump line has input, "
                                                 "output, gts, score and step")
            continue
        if not isinstance(sample.get("output"), str):
            problems.bad(path, f"line {number}", "no 'output' (the response)")
            continue
        extras = {str(k): _finite(v) for k, v in sample.items()
                  if k not in SAMPLE_FIELDS and isinstance(v, int | float) and not isinstance(v, bool)}
        score = _finite(sample.get("score"))
        rows.append({"prompt": sample["input"], "completion": sample["output"],
                     "rewards": extras or {"score": score}, "reward": score, "advantage": None})
        if "gts" in sample and not any(s.what == "dump:gts" for s in run.skipped):
            run.skipped.append(Skip("dump:gts", "the ground truth has no place on a rollout"))
    return rows


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def verl_source(root: Path, rollouts: Path | None = None) -> VerlSource:
    """The verl run at `root`: a file log (or a folder holding one) and its dump folder (`rollouts`,
    else the one folder of `<step>.jsonl` files under `root`)."""
    logs = [root] if root.is_file() else sorted(p for p in root.rglob("*.jsonl") if is_metrics_log(p))
    dumps = [rollouts] if rollouts is not None else dump_dirs(root)
    return VerlSource(log=logs[0] if logs else None, dumps=dumps[0] if dumps else None)


def read_verl_run(root: Path, problems: Problems, *, rollouts: Path | None = None) -> ImportedRun:
    source = verl_source(root, rollouts)
    run = ImportedRun(origin="verl", source=root, key=str(root.resolve()),
                      name=(source.log.stem if source.log else root.name))
    source.read(run, problems, whole=True)
    return run
