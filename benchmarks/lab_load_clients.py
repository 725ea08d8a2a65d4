"""The observers of benchmarks/lab_load.py, each on a thread of its own in the benchmark's process:

- `Viewer`: a run page's websocket (benchmarks/stream_latency.py's `NoticeClient`, with the session
  cookie and the page's Origin), noting each step notice's seq, step and wall-clock arrival;
- `PageClient`: a logged-in browser reloading run pages and the runs table, timing each answer;
- `EventWatcher`: the Cohort runs' event logs (`<runs dir>/run-<id>/events.jsonl`), noting when each
  step line was written, for the worker's ingest lag.

Wall-clock times (`time.time()`), not perf_counter: they are compared with `StepMetric.created_at`,
which the server stamps with its own wall clock (the same clock when the server runs on this machine).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchmarks.stream_latency import NoticeClient

POLL_S = 0.02  # the event logs' polling period: one toy step takes longer, so a poll sees one new line


def path_kind(path: str) -> str:
    """A request's path with its ids folded, to count answers per endpoint.

    >>> path_kind("/api/runs/12/steps/")
    '/api/runs/<id>/steps/'
    """
    return re.sub(r"/\d+(?=/|$)", "/<id>", path)


class Viewer(NoticeClient):
    """One open run page: `arrived` is seq -> (step, wall-clock arrival)."""

    def __init__(self, run_id: int):
        super().__init__()
        self.run_id = run_id

    def open(self, url: str, cookie: str) -> None:
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self.connect(host, int(port), f"/ws/runs/{self.run_id}/", origin=url, cookie=cookie)
        self.connected_at = time.time()  # the consumer joined the run's group before it accepted

    def _record(self, notice: dict, at: float) -> None:
        if notice.get("type") == "step":
            with self.changed:
                self.arrived[notice["seq"]] = (notice["step"], time.time())
                self.changed.notify_all()

    def wait_for_all(self, seqs: set[int], deadline: float) -> set[int]:
        """Waits until every seq in `seqs` arrived (or the socket closed, or `deadline`, a monotonic
        time); returns the seqs still missing."""
        with self.changed:
            self.changed.wait_for(lambda: seqs <= self.arrived.keys() or self.close_code is not None,
                                  max(0.0, deadline - time.monotonic()))
            return seqs - self.arrived.keys()


class PageClient:
    """Reloads `/runs/<id>/` (each run in turn) and `/runs/` alternately, one request at a time, until
    stopped; `samples` is (path kind, status, seconds) per request, status 0 for no answer."""

    def __init__(self, url: str, cookie: str, run_ids: list[int]):
        self.url, self.cookie, self.run_ids = url.rstrip("/"), cookie, run_ids
        self.samples: list[tuple[str, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="page-client", daemon=True)

    def start(self) -> PageClient:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        i = 0
        while not self._stop.is_set():
            paths = ["/runs/"] + ([f"/runs/{self.run_ids[i % len(self.run_ids)]}/"] if self.run_ids else [])
            for path in paths:
                self.samples.append((path_kind(path), *self._get(path)))
            i += 1

    def _get(self, path: str) -> tuple[int, float]:
        request = urllib.request.Request(self.url + path, headers={"Cookie": self.cookie})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()  # the whole page: what a browser waits for before it draws
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            status = 0
        return status, time.perf_counter() - started


class EventWatcher:
    """Polls the event logs of some runs; `written` is run -> step -> when its line was written.

    That moment is the file's mtime at the poll that first saw the line: exact when the poll saw one
    new line since the previous poll (POLL_S is shorter than a step), and otherwise the time of the
    newest of them, so the lag of an older line in the same read is counted short, never long."""

    def __init__(self, runs_dir: Path, run_ids: list[int]):
        self.paths = {run_id: runs_dir / f"run-{run_id}" / "events.jsonl" for run_id in run_ids}
        self.offsets = dict.fromkeys(run_ids, 0)
        self.written: dict[int, dict[int, float]] = {run_id: {} for run_id in run_ids}
        self.running: set[int] = set()  # runs whose trainer said "running": its model is loaded
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="event-watcher", daemon=True)

    def start(self) -> EventWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._poll()  # what was written since the last poll: its time is known only to this poll

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self._poll()

    def _poll(self) -> None:
        for run_id, path in self.paths.items():
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue
            if stat.st_size <= self.offsets[run_id]:
                continue
            with open(path, "rb") as handle:
                handle.seek(self.offsets[run_id])
                data = handle.read(stat.st_size - self.offsets[run_id])
            complete = data[:data.rfind(b"\n") + 1]  # a torn last line waits for the next poll
            self.offsets[run_id] += len(complete)
            for line in complete.splitlines():
                if line.startswith(b'{"type": "step"'):
                    event = json.loads(line)
                    self.written[run_id].setdefault(int(event["step"]), stat.st_mtime_ns / 1e9)
                elif line.startswith(b'{"type": "status", "state": "running"'):
                    self.running.add(run_id)
