"""`cohort follow`: a run being written now by verl (its file log and rollout dumps) or by anything that
writes TensorBoard event files, watched live in Cohort without a line changed in the trainer.

Every `poll` seconds the source is read from where the last read stopped (trainer/importers), and each
step that can no longer change is sent through the logging API, as the SDK sends its own:
- verl: a step is complete once its file-log line is written and, when there is a dump folder, its
  `<step>.jsonl` dump is whole (or a later step's dump exists: that step had none); before a dump
  folder is seen (verl writes dumps from a thread of its own), once a later step is logged;
- TensorBoard: a step is complete once a later step has been written (as the SDK seals a step).
When the source has been quiet for `quiet` seconds, or on Ctrl-C or SIGTERM, the rest is sent and the
run finished as succeeded.

It survives restarts. Of the trainer: its files only grow, and a new line is a new step. Of the server:
an unanswered post is kept and asked again each poll, nothing is lost. Of itself: the run's client id
comes from the source's path, so a new `cohort follow` finds the same run, the server says the newest
step it has, and only later steps are sent (the server would skip a repeated one anyway).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from cohort.http import CohortAPIError, base_url, send_json
from cohort.imports import checked_steps, create_body, newest_stored
from trainer.importers import ImportedRun, MetricMapping, Problems, detect_format, verl_source
from trainer.importers.tensorboard import read_tensorboard_run

BATCH = 50


class Followed:
    """The source's run as read so far, and which of its steps are complete."""

    def __init__(self, path: Path, kind: str, rollouts: Path | None):
        self.path, self.kind = path, kind
        self.run = ImportedRun(origin=kind, source=path, key=str(path.resolve()), name=path.name)
        self.verl = verl_source(path, rollouts) if kind == "verl" else None
        self.rollouts = rollouts

    def read(self) -> bool:
        """Reads what is new; True if anything was."""
        before = (len(self.run.steps), sum(len(s["metrics"]) + len(s["rollouts"]) for s in self.run.steps.values()))
        if self.verl is not None:
            if self.verl.log is None or self.verl.dumps is None:  # files the trainer has not made yet
                found = verl_source(self.path, self.rollouts)
                self.verl.log = self.verl.log or found.log
                self.verl.dumps = self.verl.dumps or found.dumps
            if self.verl.log is not None:
                self.run.name = self.verl.log.stem
            self.verl.read(self.run, Problems(skip_bad=True), whole=False)
        else:
            fresh = read_tensorboard_run(self.path, Problems(skip_bad=True))
            self.run.steps, self.run.config, self.run.texts = fresh.steps, fresh.config, fresh.texts
        after = (len(self.run.steps), sum(len(s["metrics"]) + len(s["rollouts"]) for s in self.run.steps.values()))
        return after != before

    def complete(self, *, everything: bool) -> list[int]:
        """The steps that can no longer change, oldest first (`everything`: all of them, at the end)."""
        steps = sorted(self.run.steps)
        if everything or not steps:
            return steps
        if self.verl is None:
            return steps[:-1]  # TensorBoard: a later step seals the ones before it
        logged = [s for s in steps if self.run.steps[s]["metrics"]]
        if self.verl.dumps is None:
            # No dump folder seen yet (none, or verl's dump thread has not written its first file): a step is
            # complete once a later one is logged, which gives a first dump a step's time to appear.
            return logged[:-1]
        newest_dump = max(self.verl.taken, default=-1)
        return [s for s in logged if s in self.verl.taken or s < newest_dump]


def follow_main(path: str, *, url: str | None, token: str | None, task: str, project: str | None, tags: list[str],
                kind: str | None, rollouts: str | None, mapping: str | None, poll: float, quiet: float) -> int:
    source = Path(path)
    if not url or not token:
        print(f"cohort follow: no {'server' if not url else 'token'}: pass {'--url' if not url else '--token'} or set "
              f"{'COHORT_URL' if not url else 'COHORT_TOKEN'}", file=sys.stderr)
        return 2
    try:
        kind = kind or (detect_format(source) if source.exists() else None)
        rename = MetricMapping.load(Path(mapping)) if mapping else None
    except ValueError as exc:
        print(f"cohort follow: {exc}", file=sys.stderr)
        return 2
    if kind not in ("verl", "tensorboard"):
        print(f"cohort follow: follows a verl run (its file log and dump folder) or a TensorBoard log folder; "
              f"{source} is {kind or 'not there yet: pass --format verl or tensorboard'}", file=sys.stderr)
        return 2
    followed = Followed(source, kind, Path(rollouts) if rollouts else None)
    sender = _Sender(base_url(url), token, task=task, project=project, tags=tags, rename=rename)
    stop = {"now": False}

    def told(signum, frame):
        if stop["now"]:  # told twice: leave now; what is not sent yet, a new `cohort follow` sends
            print(f"cohort follow: stopped with {sender.pending} complete steps not sent; a new cohort follow "
                  "sends them", file=sys.stderr, flush=True)
            raise SystemExit(1)
        stop["now"] = True
        if sender.warned:
            print("cohort follow: the server does not answer: sending what is left when it does; Ctrl-C again to "
                  "leave now", file=sys.stderr, flush=True)

    signal.signal(signal.SIGTERM, told)
    signal.signal(signal.SIGINT, told)
    last_news = time.monotonic()
    print(f"cohort follow: following {source} ({kind}); Ctrl-C to stop", file=sys.stderr, flush=True)
    while True:
        if followed.read():
            last_news = time.monotonic()
        ending = stop["now"] or time.monotonic() - last_news >= quiet
        try:
            sender.send(followed, everything=ending)
        except CohortAPIError as refused:  # a token, a project or a run the server refuses: asking again won't help
            print(f"cohort follow: {refused}", file=sys.stderr, flush=True)
            return 1
        if ending and sender.pending == 0:
            sender.finish(followed)
            print(f"cohort follow: {sender.sent:,} steps sent; {'stopped' if stop['now'] else f'quiet for {quiet:g} s'}: "
                  f"{sender.page}", flush=True)
            return 0
        time.sleep(poll)


class _Sender:
    """Sends complete steps past the server's newest; keeps what could not be sent for the next poll."""

    def __init__(self, url: str, token: str, *, task: str, project: str | None, tags: list[str],
                 rename: MetricMapping | None):
        self.url, self.token, self.task, self.project, self.tags, self.rename = url, token, task, project, tags, rename
        self.run_id: int | None = None
        self.page = ""
        self.newest = -1  # the newest step the server has
        self.sent = 0
        self.pending = 0
        self.warned = False
        self.config: Any = None

    def _ask(self, method: str, path: str, body: Any) -> Any:
        try:
            answer = send_json(self.url, self.token, method, path, body)
        except CohortAPIError as exc:
            if not exc.retryable:
                raise
            if not self.warned:
                print(f"cohort follow: {self.url} did not answer ({exc}); asking again each poll", file=sys.stderr, flush=True)
                self.warned = True
            return None
        if self.warned:
            print("cohort follow: the server answers again", file=sys.stderr, flush=True)
            self.warned = False
        return answer

    def _run(self, followed: Followed, steps: list[int]) -> ImportedRun:
        """The followed run cut to `steps`, renamed and fitted (a copy: the source's reading goes on)."""
        run = ImportedRun(origin=followed.run.origin, source=followed.run.source, key=followed.run.key,
                          name=followed.run.name, config=dict(followed.run.config), texts=list(followed.run.texts),
                          steps={s: json.loads(json.dumps(followed.run.steps[s])) for s in steps})
        if self.rename is not None:
            self.rename.apply(run)
        return run

    def send(self, followed: Followed, *, everything: bool) -> None:
        ready = [s for s in followed.complete(everything=everything) if s > self.newest]
        self.pending = len(ready)
        if not ready and self.run_id is not None and followed.run.config == self.config:
            return
        run = self._run(followed, ready)
        body = create_body(run, task=self.task, project=self.project, tags=self.tags, total_known=False)
        if self.run_id is None or followed.run.config != self.config:
            answer = self._ask("POST", "external/runs/", body)
            if answer is None:
                return
            self.run_id, self.config = answer["id"], dict(followed.run.config)
            self.page = f"{self.url}runs/{answer['id']}/"
            self.newest = max(self.newest, newest_stored(answer))
            if self.sent == 0:
                print(f"cohort: following into {self.page}", file=sys.stderr, flush=True)
        steps = [s for s in checked_steps(run) if s["step"] > self.newest]
        for start in range(0, len(steps), BATCH):
            batch = steps[start:start + BATCH]
            answer = self._ask("POST", f"runs/{self.run_id}/steps/", {"steps": batch})
            if answer is None:
                return
            self.newest = batch[-1]["step"]
            self.sent += len(answer.get("stored") or ())
        self.pending = 0

    def finish(self, followed: Followed) -> None:
        if self.run_id is not None:
            self._ask("POST", f"runs/{self.run_id}/finish/", {"state": "succeeded", "error": ""})
