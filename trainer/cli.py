"""`python -m trainer`: train without Django.

    python -m trainer train --config run.toml [--run-dir runs/my-run] [--resume]
    python -m trainer presets
    python -m trainer programs

A run folder holds `events.jsonl` (one JSON line per status change and per step: metrics,
rollouts, groups), `config.json` and `checkpoints/`. `--resume` continues from the newest complete
checkpoint as attempt n+1. Creating the file `STOP` in the run folder stops the run at the next
step boundary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer.config import RunConfig, preset_titles

STOP_FILE = "STOP"


def next_attempt(events_path: Path) -> int:
    """1 for a new run; one more than the highest attempt in an existing event log."""
    from trainer.reporting import read_events

    if not events_path.exists():
        return 1
    attempts = [e.get("attempt", 1) for e in read_events(events_path) if e.get("type") == "status"]
    return max(attempts, default=0) + 1


def train(args: argparse.Namespace) -> int:
    from trainer.loop import Trainer
    from trainer.reporting import JsonlReporter

    try:
        config = RunConfig.from_file(args.config)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_dir = Path(args.run_dir or Path("runs") / Path(args.config).stem)
    if (run_dir / "events.jsonl").exists() and not args.resume:
        print(f"error: {run_dir} already holds a run; pass --resume to continue it or choose --run-dir.",
              file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    (run_dir / STOP_FILE).unlink(missing_ok=True)
    attempt = args.attempt or next_attempt(run_dir / "events.jsonl")
    reporter = JsonlReporter(run_dir / "events.jsonl", stop_file=run_dir / STOP_FILE,
                             progress_total=None if args.quiet else config.steps)
    trainer = Trainer(config, run_dir, reporter, attempt=attempt)
    state = trainer.run(resume=args.resume)
    print(f"{state}: {trainer.step}/{config.steps} steps; events in {run_dir / 'events.jsonl'}")
    return 0 if state in ("succeeded", "cancelled") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description="Cohort's RL trainer (no Django).")
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train a run from a TOML config")
    p_train.add_argument("--config", required=True, help="TOML (optionally preset = '...') or JSON file of RunConfig fields")
    p_train.add_argument("--run-dir", help="folder for events and checkpoints (default: runs/<config name>)")
    p_train.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    p_train.add_argument("--quiet", action="store_true", help="no progress bar")
    p_train.add_argument("--attempt", type=int, help="attempt number (default: one more than the log's last)")
    sub.add_parser("presets", help="list the paper presets")
    sub.add_parser("programs", help="list the registered LM programs")
    args = parser.parse_args(argv)
    if args.command == "train":
        return train(args)
    if args.command == "presets":
        for name, title in preset_titles().items():
            print(f"{name:14s} {title}")
        return 0
    from trainer.programs import list_programs

    for info in list_programs():
        print(f"{info['name']:12s} {' -> '.join(info['agents'])}  ({info['title']})")
    return 0
