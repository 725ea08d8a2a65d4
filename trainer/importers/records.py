"""What an importer reads out of another trainer's files: a run, its steps, and what it left out.

Every reader (W&B offline runs, TensorBoard event files, verl's file log and rollout dumps) gives the
same `ImportedRun`, in the logging API's own form of a step (`{"step", "metrics", "rollouts"}`, each
rollout `prompt`, `completion`, `rewards`, `reward`, `advantage`, `group`, `example_id`), so the SDK's
upload and the server's ingest take an imported run exactly as they take one streamed live.

A bad record is never guessed at. `Problems` is how a reader reports one: it raises `BadSource` (the
file, the record or line, what is wrong) unless the import was asked to keep what is sound
(`skip_bad`), in which case the record is left out and listed among the run's skips with the same words.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IMPORTER_VERSION = "1"  # recorded on every imported run: a change to what a reader keeps bumps it


class BadSource(ValueError):
    """A file an importer cannot read, naming the file and where in it (record, line, event)."""

    def __init__(self, file: Path | str, where: str, problem: str):
        self.file, self.where, self.problem = str(file), where, problem
        super().__init__(f"{file}: {where}: {problem}" if where else f"{file}: {problem}")


@dataclass(frozen=True)
class Skip:
    """Something found and not imported, with the reason (what `--dry-run` lists)."""

    what: str
    reason: str


class Problems:
    """A reader's bad records: raised at once, or (skip_bad) kept as skips and read past."""

    def __init__(self, skip_bad: bool):
        self.skip_bad = skip_bad
        self.skipped: list[Skip] = []

    def bad(self, file: Path | str, where: str, problem: str) -> None:
        error = BadSource(file, where, problem)
        if not self.skip_bad:
            raise error
        self.skipped.append(Skip(str(error), "unreadable (--skip-bad: left out)"))


@dataclass
class TableMapping:
    """A table found in the source and how it became rollouts (or why not)."""

    name: str
    rows: int
    steps: int
    groups: int
    into: str  # "rollouts" or the reason it was left out


@dataclass
class ImportedRun:
    """One run of another trainer, read whole: what `cohort import` uploads and `--dry-run` prints."""

    origin: str  # "wandb", "tensorboard", "verl": the run's origin in Cohort
    source: Path  # the file or folder it was read from
    key: str  # what identifies the source across imports (its run id, or its path)
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    texts: list[dict[str, Any]] = field(default_factory=list)  # TensorBoard text summaries: step, tag, text
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)  # step -> {"metrics": {}, "rollouts": []}
    tables: list[TableMapping] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    ended: str | None = None  # "succeeded" or "failed" where the source says it ended; None: unknown
    error: str = ""

    def step(self, number: int) -> dict[str, Any]:
        return self.steps.setdefault(number, {"metrics": {}, "rollouts": []})

    @property
    def client_id(self) -> str:
        """The run's client id on the server: the same source always answers the same run, so an
        import repeated (or resumed) updates it and stores no step twice."""
        digest = hashlib.sha1(f"{self.origin}\0{self.key}".encode()).hexdigest()[:16]
        return f"import-{self.origin}-{digest}"

    def ordered_steps(self) -> list[dict[str, Any]]:
        """The steps as the logging API takes them, oldest first."""
        return [{"step": number, "metrics": step["metrics"], "rollouts": step["rollouts"]}
                for number, step in sorted(self.steps.items())]

    def metric_counts(self) -> dict[str, tuple[int, int, int]]:
        """Each metric's (count, first step, last step)."""
        counts: dict[str, list[int]] = {}
        for number, step in sorted(self.steps.items()):
            for name in step["metrics"]:
                seen = counts.get(name)
                if seen is None:
                    counts[name] = [1, number, number]
                else:
                    seen[0] += 1
                    seen[2] = number
        return {name: (c[0], c[1], c[2]) for name, c in counts.items()}


def example_id(prompt: Any) -> str:
    """The same prompt at another step is the same example (as cohort/trl.py names TRL's)."""
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:12]


def grouped_by_prompt(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Rollouts (dicts with a prompt) with a `group` per distinct prompt, in the order prompts first
    appear, and an example id per prompt: GRPO's group is one prompt's completions in one step.
    Returns (rollouts, number of groups)."""
    groups: dict[str, int] = {}
    out = []
    for row in rows:
        example = example_id(row["prompt"])
        group = groups.setdefault(example, len(groups))
        out.append({**row, "group": group, "example_id": example})
    return out, len(groups)
