"""The `cohort` command (also `python -m cohort`).

    cohort sync                                            # every run folder left with something to upload
    cohort sync ~/.cache/cohort/runs/20261127-023712-9f3c1a2b     # one run folder
    cohort sync ./offline-runs                             # every run folder in it
    cohort import wandb/ --task toy_format --dry-run       # what an import of W&B offline runs would write
    cohort import runs/tb --project lab                    # a TensorBoard log folder, one run
    cohort follow checkpoints/verl-run --task gsm8k        # a verl run being written now, live
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cohort", description="Cohort's command line.")
    commands = parser.add_subparsers(dest="command", required=True)
    sync = commands.add_parser(
        "sync", help="upload run folders written offline, or not fully uploaded",
        description="Uploads each run folder (or each run folder inside a folder) to Cohort: creates the "
                    "run if needed, sends the steps the server has not acknowledged, then the finish. Without "
                    "a folder: the run folders in $COHORT_DIR (default: $XDG_CACHE_HOME/cohort/runs, else "
                    "~/.cache/cohort/runs, where cohort.init makes them) that hold something not uploaded. "
                    "Exits 1 when something could not be uploaded.")
    sync.add_argument("folders", nargs="*", metavar="FOLDER",
                      help="a run folder, or a folder of run folders (default: those left with something to upload)")
    sync.add_argument("--url", default=None, help="the server (default: the one the folder recorded, else $COHORT_URL)")
    sync.add_argument("--token", default=None, help="a personal API token (default: $COHORT_TOKEN; never stored)")
    _import_parsers(commands)
    args = parser.parse_args(argv)
    if args.command in ("import", "follow"):
        return _import_command(args)
    if args.command == "sync":
        from cohort.sdk.sync import sync_main

        return sync_main(args.folders, url=args.url, token=args.token or os.environ.get("COHORT_TOKEN"))
    parser.error(f"unknown command {args.command!r}")
    return 2


def _source_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--url", default=os.environ.get("COHORT_URL"), help="the server (default: $COHORT_URL)")
    command.add_argument("--token", default=None, help="a personal API token (default: $COHORT_TOKEN; never stored)")
    command.add_argument("--task", default="imported", help="the Cohort task the run belongs to (a new name makes a "
                         "new task; runs of one task sit side by side on the compare page; default: imported)")
    command.add_argument("--project", default=os.environ.get("COHORT_PROJECT"), help="the Cohort project to import "
                         "into (default: $COHORT_PROJECT, else the token's project, else your personal project)")
    command.add_argument("--tag", action="append", default=[], dest="tags", help="a tag for the run (repeatable)")
    command.add_argument("--format", choices=("wandb", "tensorboard", "verl"), default=None, dest="kind",
                         help="the source's format (default: found from its files)")
    command.add_argument("--rollouts", default=None, metavar="DIR",
                         help="verl: its rollout dump folder (trainer.rollout_data_dir), when it is not under the path")
    command.add_argument("--map", default=None, metavar="FILE", dest="mapping",
                         help="a TOML file renaming metrics onto Cohort's ([metrics] \"train/reward\" = \"reward/mean\")")


def _import_parsers(commands) -> None:
    command = commands.add_parser(
        "import", help="import W&B offline runs, TensorBoard logs or verl's file log and rollout dumps",
        description="Reads each source whole (a W&B offline-run folder or run-*.wandb file, a TensorBoard log folder, "
                    "verl's file-logger JSONL and rollout dump folder), prints what it found, and uploads each run "
                    "through the logging API. A bad record stops the import of its run before anything is written. "
                    "Importing the same source again updates its run and stores no step twice.")
    command.add_argument("paths", nargs="+", metavar="PATH", help="a file or folder to import")
    _source_arguments(command)
    command.add_argument("--dry-run", action="store_true", help="print what would be imported; write nothing")
    command.add_argument("--skip-bad", action="store_true",
                         help="import what is sound and list each bad record (default: a bad record imports nothing)")
    command = commands.add_parser(
        "follow", help="watch a verl run or a TensorBoard log folder being written, live",
        description="Reads the source every --poll seconds and sends each complete step; ends, finishing the run, "
                    "when the source is quiet for --quiet seconds or on Ctrl-C. Restart it at will: it resumes from "
                    "the newest step the server has.")
    command.add_argument("path", metavar="PATH", help="a verl run's folder (or file log), or a TensorBoard log folder")
    _source_arguments(command)
    command.add_argument("--poll", type=float, default=2.0, help="seconds between reads (default: 2)")
    command.add_argument("--quiet", type=float, default=1800.0,
                         help="end after this many seconds with nothing new (default: 1800)")


def _import_command(args) -> int:
    token = args.token or os.environ.get("COHORT_TOKEN")
    if args.command == "import":
        from cohort.imports import import_main

        return import_main(args.paths, url=args.url, token=token, task=args.task, project=args.project,
                           tags=args.tags, kind=args.kind, dry_run=args.dry_run, skip_bad=args.skip_bad,
                           rollouts=args.rollouts, mapping=args.mapping)
    from cohort.follow import follow_main

    return follow_main(args.path, url=args.url, token=token, task=args.task, project=args.project, tags=args.tags,
                       kind=args.kind, rollouts=args.rollouts, mapping=args.mapping, poll=args.poll, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(main())
