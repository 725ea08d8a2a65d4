"""`cohort import`: another trainer's runs (W&B offline runs, TensorBoard logs, verl's file log and
rollout dumps) uploaded to Cohort through the logging API, like `cohort sync` uploads the SDK's.

For each run found: read it whole (trainer/importers), rename its metrics if a mapping says so, fit it
to the step-event contract (what would be refused becomes a named skip) and check every step as the
SDK checks its own; only then is anything sent. A bad record stops the import of that run before
the server hears of it (`--skip-bad`: the sound records go, the bad ones are listed). `--dry-run`
prints what was found and stops there.

The run's client id comes from its source (a W&B run's id, else the source's path): importing the
same source again answers the same run, its steps already stored are skipped by the server (by step
number), new ones are added, and the run ends as the source says (W&B's exit code; TensorBoard and
verl say nothing: succeeded).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cohort.http import CohortAPIError, base_url, send_json
from cohort.sdk import request, values
from cohort.sdk.spool import Spool
from cohort.sdk.upload import Uploader, batches, retrying
from trainer.importers import BadSource, ImportedRun, MetricMapping, fitted, import_plan, read_runs

ATTEMPTS = 6


def checked_steps(run: ImportedRun) -> list[dict[str, Any]]:
    """The run's steps as the SDK would send them; ValueError naming the step for what the server would
    refuse (after `fitted`, only a value of the wrong kind)."""
    steps = []
    for step in run.ordered_steps():
        try:
            metrics, _ = values.metrics_numbers(step["metrics"])
            rollouts = values.rollouts(step["rollouts"]) if step["rollouts"] else []
        except ValueError as exc:
            raise ValueError(f"{run.source}: step {step['step']}: {exc}") from None
        steps.append({"step": step["step"], "metrics": metrics, "rollouts": rollouts})
    return steps


def newest_stored(answer: dict[str, Any]) -> int:
    """The newest step the server has of a run it answered (-1: none). A run's `current_step` is 0 both
    before its first step and after step 0, so step 0 is always sent again: the server skips it if stored."""
    current = (answer.get("summary") or {}).get("current_step")
    return current if isinstance(current, int) and current > 0 else -1


def create_body(run: ImportedRun, *, task: str, project: str | None, tags: list[str],
                total_known: bool = True) -> dict[str, Any]:
    """The run's creation request (`total_known`: False for a run still being written, whose total is unknown)."""
    fields = fitted(run)
    return request.create_request(client_id=run.client_id, task=task, name=fields["name"], config=fields["config"],
                                  tags=tags, notes=fields["notes"], origin=run.origin,
                                  total_steps=fields["total_steps"] if total_known else 0, project=project)


def runs_from(paths: list[Path], *, kind: str | None, skip_bad: bool, rollouts: Path | None,
              mapping: MetricMapping | None) -> list[ImportedRun]:
    runs = []
    for path in paths:
        for run in read_runs(path, kind=kind, skip_bad=skip_bad, rollouts=rollouts):
            if mapping is not None:
                mapping.apply(run)
            runs.append(run)
    return runs


def upload_run(run: ImportedRun, body: dict[str, Any], steps: list[dict[str, Any]], *, url: str, token: str,
               warn: Callable[[str], None]) -> tuple[str, Uploader]:
    """Creates (or finds) the run, posts the steps it lacks and finishes it as the source says; its page."""
    folder = Path(tempfile.mkdtemp(prefix="cohort-import-"))
    try:
        spool = Spool.create(folder / run.client_id, url=url, create=body)
        uploader = Uploader(spool, url, token, warn=warn)
        answer = retrying(lambda: send_json(url, token, "POST", "external/runs/", body), attempts=ATTEMPTS)
        spool.update(run_id=answer["id"], run_url=f"{url}runs/{answer['id']}/")
        newest = newest_stored(answer)
        # Steps go in order, so every step up to the newest the server has is stored: only later ones are sent.
        fresh = [s for s in steps if s["step"] > newest]
        lines = [(i, json.dumps(s, allow_nan=False, separators=(",", ":"))) for i, s in enumerate(fresh)]
        for batch in batches(lines):
            retrying(lambda batch=batch: uploader.send(batch), attempts=ATTEMPTS)
        spool.update(finish={"state": run.ended or "succeeded", "error": run.error})
        retrying(uploader.finish, attempts=ATTEMPTS)
        uploader.skipped += len(steps) - len(fresh)
        return spool.state["run_url"], uploader
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def import_main(paths: list[str], *, url: str | None, token: str | None, task: str, project: str | None,
                tags: list[str], kind: str | None, dry_run: bool, skip_bad: bool, rollouts: str | None,
                mapping: str | None) -> int:
    """The command: 0 when every run found was imported (or, dry, could be)."""
    try:
        rename = MetricMapping.load(Path(mapping)) if mapping else None
        runs = runs_from([Path(p) for p in paths], kind=kind, skip_bad=skip_bad,
                         rollouts=Path(rollouts) if rollouts else None, mapping=rename)
        prepared = [(run, create_body(run, task=task, project=project, tags=tags), checked_steps(run)) for run in runs]
    except BadSource as exc:
        print(f"cohort import: {exc}\nNothing was imported. --skip-bad imports what is sound and lists what is not.",
              file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"cohort import: {exc}\nNothing was imported.", file=sys.stderr)
        return 1
    if not prepared:
        print("cohort import: no run found", file=sys.stderr)
        return 1
    for run, _, _ in prepared:
        print(import_plan(run), flush=True)
    if dry_run:
        print(f"Dry run: {len(prepared)} run(s) found, nothing written.")
        return 0
    if not url or not token:
        print(f"cohort import: no {'server' if not url else 'token'}: pass {'--url' if not url else '--token'} or set "
              f"{'COHORT_URL' if not url else 'COHORT_TOKEN'}", file=sys.stderr)
        return 2
    url = base_url(url)
    status = 0
    for run, body, steps in prepared:
        try:
            page, uploader = upload_run(run, body, steps, url=url, token=token,
                                        warn=lambda m: print(f"  {m}", file=sys.stderr))
        except CohortAPIError as exc:
            print(f"{run.source}: not imported: {exc}. The import can be run again: it stores no step twice.",
                  file=sys.stderr)
            status = 1
            continue
        print(f"{run.source}: {len(steps):,} steps: {uploader.stored:,} stored, {uploader.skipped:,} already there"
              + (f", {uploader.rejected} refused" if uploader.rejected else "")
              + f"; {run.ended or 'succeeded'}: {page}", flush=True)
        status = status if uploader.rejected == 0 else 1
    return status
