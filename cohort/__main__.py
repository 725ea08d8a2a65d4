"""The `cohort` command (also `python -m cohort`).

    cohort sync                                            # every run folder left with something to upload
    cohort sync ~/.cache/cohort/runs/20261127-023712-9f3c1a2b     # one run folder
    cohort sync ./offline-runs                             # every run folder in it
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
    args = parser.parse_args(argv)
    if args.command == "sync":
        from cohort.sdk.sync import sync_main

        return sync_main(args.folders, url=args.url, token=args.token or os.environ.get("COHORT_TOKEN"))
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
