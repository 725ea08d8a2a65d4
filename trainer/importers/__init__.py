"""Runs of other trainers, read from their own files: W&B offline runs, TensorBoard event files, and
verl's file log and rollout dumps (`cohort import`, `cohort follow`, the runs page's upload form).

Each reader gives an `ImportedRun` in the logging API's form of a step (trainer/importers/records.py),
so what is imported goes in through the same door as a run streamed live. This package is the
readers only: it writes nothing and talks to no server. Standard library, plus the formats' own
readers where a format needs one (the `wandb` package's protobufs, tbparse and TensorBoard), imported
when a file of theirs is read (`pip install cohort[import]`).
"""

from __future__ import annotations

from pathlib import Path

from trainer.importers.mapping import MetricMapping
from trainer.importers.plan import fitted, import_plan
from trainer.importers.records import IMPORTER_VERSION, BadSource, ImportedRun, Problems, Skip
from trainer.importers.tensorboard import event_files, read_tensorboard_run
from trainer.importers.verl import VerlSource, dump_dirs, is_metrics_log, read_verl_run, verl_source
from trainer.importers.wandb_offline import read_wandb_run, wandb_run_files

FORMATS = ("wandb", "tensorboard", "verl")

__all__ = ["FORMATS", "IMPORTER_VERSION", "BadSource", "ImportedRun", "MetricMapping", "Problems", "Skip",
           "VerlSource", "detect_format", "fitted", "import_plan", "read_runs", "verl_source"]


def detect_format(path: Path) -> str:
    """Which trainer wrote `path`: a `.wandb` file or a folder of W&B runs, TensorBoard event files, or
    verl's file log and dumps. ValueError naming what was looked for when it is none of them."""
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix == ".wandb":
            return "wandb"
        if "tfevents" in path.name:
            return "tensorboard"
        if is_metrics_log(path):
            return "verl"
    elif wandb_run_files(path):
        return "wandb"
    elif event_files(path):
        return "tensorboard"
    elif dump_dirs(path) or any(is_metrics_log(p) for p in path.rglob("*.jsonl")):
        return "verl"
    raise ValueError(f"{path}: found no W&B run (run-*.wandb), TensorBoard event file (*tfevents*) or verl file "
                     'log ({"step", "data"} lines) or rollout dump (<step>.jsonl)')


def read_runs(path: Path, *, kind: str | None = None, skip_bad: bool = False,
              rollouts: Path | None = None) -> list[ImportedRun]:
    """Every run at `path` (a W&B folder may hold many; a TensorBoard or verl folder is one run), read
    whole. A bad record raises BadSource unless `skip_bad`, then it is listed among the run's skips."""
    kind = kind or detect_format(path)
    if kind not in FORMATS:
        raise ValueError(f"unknown format {kind!r}: one of {', '.join(FORMATS)}")
    try:
        return _read_runs(path, kind, skip_bad=skip_bad, rollouts=rollouts)
    except ImportError as missing:  # the format's own reader is not installed
        raise ValueError(f"reading {kind} files needs the import extra: pip install 'cohort[import]' "
                         f"({missing})") from None


def _read_runs(path: Path, kind: str, *, skip_bad: bool, rollouts: Path | None) -> list[ImportedRun]:
    runs = []
    if kind == "wandb":
        for file in wandb_run_files(path):
            problems = Problems(skip_bad)
            run = read_wandb_run(file, problems)
            run.skipped[:0] = problems.skipped
            runs.append(run)
    else:
        problems = Problems(skip_bad)
        run = (read_tensorboard_run(path, problems) if kind == "tensorboard"
               else read_verl_run(path, problems, rollouts=rollouts))
        run.skipped[:0] = problems.skipped
        runs.append(run)
    return runs
