"""`cohort sync [folder...]`: uploads run folders an offline run, or a run whose upload did not end
before its program did, left behind. Without a folder, those under `runs_home()` (where `cohort.init`
makes them unless told otherwise) that hold something not uploaded yet.

For each folder: create the run (or find it: the server knows its client id), send the steps from
the acknowledged watermark on (the server skips any it already has, so a watermark that lags behind
costs a few repeated steps, never a duplicate), then the finish if the program recorded one. A
folder synced to another server than the one it recorded starts from its first step. Failures worth
retrying are retried a few times with backoff, then reported; the command exits nonzero when any
step could not be uploaded, so a script can try again later.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cohort.http import CohortAPIError, base_url
from cohort.sdk.spool import Spool, run_folders, runs_home, unsent_folders
from cohort.sdk.upload import Uploader, batches, retrying

ATTEMPTS = 6  # about 6 s of backoff (0.2 + 0.4 + ... + 3.2) before a request is given up


@dataclass
class Outcome:
    folder: Path
    ok: bool
    line: str  # what `cohort sync` prints for the folder


def sync_folder(folder: Path, *, url: str | None = None, token: str | None = None,
                warn: Callable[[str], None] = print) -> Outcome:
    """Uploads what `folder` holds that the server has not answered; says how it went."""
    try:
        spool = Spool.open(folder)
    except ValueError as exc:
        return Outcome(folder, False, f"{folder}: {exc}")
    url = url or spool.state.get("url") or os.environ.get("COHORT_URL")
    token = token or os.environ.get("COHORT_TOKEN")
    if not url or not token:
        return Outcome(folder, False, f"{folder}: no {'server' if not url else 'token'}: pass "
                                      f"{'--url' if not url else '--token'} or set "
                                      f"{'COHORT_URL' if not url else 'COHORT_TOKEN'}")
    try:
        url = base_url(url)
    except ValueError as exc:
        return Outcome(folder, False, f"{folder}: {exc}")
    if url != spool.state.get("url"):  # another server: it has seen none of this run
        spool.update(url=url, run_id=None, run_url=None, acked=0, finished=False)
    uploader = Uploader(spool, url, token, warn=warn)
    lines = spool.lines()
    try:
        retrying(uploader.create, attempts=ATTEMPTS)
        start = spool.state["acked"]
        for batch in batches(list(enumerate(lines))[start:]):
            retrying(lambda batch=batch: _send_unanswered(uploader, batch), attempts=ATTEMPTS)
        if spool.state["finish"] and not spool.state["finished"]:
            retrying(uploader.finish, attempts=ATTEMPTS)
    except CohortAPIError as exc:
        left = len(lines) - spool.state["acked"]
        return Outcome(folder, False, f"{folder}: {left} of {len(lines)} steps not uploaded: {exc}")
    finish = spool.state["finish"]
    ending = f"finished as {finish['state']}" if finish else "not finished (its program has not finished it)"
    counts = (f"{uploader.stored} steps uploaded, {uploader.skipped} already there"
              + (f", {uploader.partly} posts stored without per-token arrays the server refused" if uploader.partly
                 else "")
              + (f", {uploader.rejected} refused (see {spool.folder / 'rejected.jsonl'})" if uploader.rejected else ""))
    return Outcome(folder, uploader.rejected == 0,
                   f"{folder}: {len(lines)} steps: {counts}; {ending}: {spool.state['run_url']}")


def _send_unanswered(uploader: Uploader, batch: list[tuple[int, str]]) -> None:
    """The lines of `batch` past the watermark (a retry after a half-answered batch sends the rest)."""
    rest = [item for item in batch if item[0] >= uploader.spool.state["acked"]]
    if rest:
        uploader.send(rest)


def sync_main(folders: list[str], *, url: str | None, token: str | None) -> int:
    """The command: one line per run folder; 0 when every step of every folder is uploaded. No
    folder: the run folders under `runs_home()` with something left to upload."""
    if folders:
        chosen = run_folders([Path(f) for f in folders])
    else:
        home = runs_home()
        chosen = unsent_folders(home)
        if not chosen:
            print(f"Nothing to upload: no run folder in {home} holds a step, a run or a finish the server has "
                  "not answered.", flush=True)
            return 0
    status = 0
    for folder in chosen:
        outcome = sync_folder(folder, url=url, token=token, warn=lambda m: print(f"  {m}", file=sys.stderr))
        print(outcome.line, flush=True)
        status = status if outcome.ok else 1
    return status
