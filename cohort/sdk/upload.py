"""The upload protocol of one run folder, shared by the live sender thread and `cohort sync`.

Three requests, each safe to repeat: create the run (the server answers the same run for the same
client id), post steps (a step the server already stored is skipped), finish (the same state twice is
fine). So any failure is handled by asking again, and nothing here needs to know whether an earlier
attempt half-succeeded. What is not worth asking again is told apart from what is:

- no answer, 5xx, 408, 429: raised as a retryable CohortAPIError (the caller backs off and retries);
- 413 for a batch: the batch is split in halves, each sent on its own;
- any other 4xx for a batch: split the same way, down to the one step the server refuses, which goes
  to rejected.jsonl with the server's answer, so one bad step never holds back the others;
- a 400 that says which steps it stored all the same (`stored`, `skipped`: a rollout's per-token
  arrays were refused and left out, the rest kept): answered; one warning names what was left out;
- 401 (token) and 404 (run): every request would fail the same way: raised, for the caller to stop.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from cohort.http import CohortAPIError, base_url, send_json
from cohort.sdk.spool import Spool

MAX_BATCH_STEPS = 50
MAX_BATCH_BYTES = 4 * 1024 * 1024
REQUEST_TIMEOUT_S = 60.0
BACKOFF_FIRST_S = 0.2
BACKOFF_CAP_S = 5.0
FATAL_STATUSES = frozenset({401, 403, 404})  # the token or the run: nothing else will succeed either

Item = tuple[int, str]  # (the step's line number in steps.jsonl, its JSON)


def batches(items: list[Item], *, max_steps: int = MAX_BATCH_STEPS, max_bytes: int = MAX_BATCH_BYTES) -> Iterator[list[Item]]:
    """`items` in order, cut into posts of at most `max_steps` steps and about `max_bytes` (a step
    larger than that goes alone)."""
    batch: list[Item] = []
    size = 0
    for item in items:
        length = len(item[1].encode("utf-8")) + 1
        if batch and (len(batch) >= max_steps or size + length > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += length
    if batch:
        yield batch


def body(items: list[Item]) -> bytes:
    """The steps post, built from the lines as they are (each is one step's JSON already)."""
    return ('{"steps":[' + ",".join(line for _, line in items) + "]}").encode("utf-8")


def step_of(line: str) -> str:
    """The step number of a line, for messages (the line's first field)."""
    head = line[:40]
    return head.split(",", 1)[0].split(":", 1)[-1] if head.startswith('{"step":') else "?"


class Backoff:
    """Capped exponential waits: 0.2 s, 0.4 s, ... 5 s, 5 s, ... until `reset`."""

    def __init__(self, first: float | None = None, cap: float | None = None):
        self.first = BACKOFF_FIRST_S if first is None else first
        self.cap = BACKOFF_CAP_S if cap is None else cap
        self.delay = self.first

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.cap, self.delay * 2)
        return delay

    def reset(self) -> None:
        self.delay = self.first


class Uploader:
    """Sends a folder's run to `url` with `token`, recording every answer in the folder (`spool`)."""

    def __init__(self, spool: Spool, url: str, token: str, *, warn: Callable[[str], None]):
        self.spool = spool
        self.url = base_url(url)
        self.token = token
        self.warn = warn
        self.stored = self.skipped = self.rejected = 0  # this uploader's counts, for `cohort sync`
        self.partly = 0  # posts stored without some per-token arrays the server refused

    def _post(self, path: str, payload: Any) -> Any:
        return send_json(self.url, self.token, "POST", path, payload, timeout=REQUEST_TIMEOUT_S)

    def create(self) -> None:
        """Creates the run (or finds it: the same client id answers the same run); records its id."""
        run = self._post("external/runs/", self.spool.state["create"])
        if not isinstance(run, dict) or not isinstance(run.get("id"), int):
            raise CohortAPIError(0, f"{self.url} answered the run's creation without a run id: {run!r}")
        page = urllib.parse.urljoin(self.url, str(run.get("url") or f"runs/{run['id']}/"))
        self.spool.update(url=self.url, run_id=run["id"], run_url=page)

    def send(self, items: list[Item]) -> None:
        """Posts one batch of consecutive lines; on return every line is answered (stored, skipped
        or rejected) and the watermark is past them. Raises what must be retried or stops the upload."""
        try:
            answer = self._post(f"runs/{self.spool.state['run_id']}/steps/", body(items))
        except CohortAPIError as exc:
            if exc.retryable or exc.status in FATAL_STATUSES:
                raise
            if stored_anyway(exc):
                self._partly_stored(exc)
                self._ack(items[-1][0] + 1)
                return
            if len(items) > 1:  # 413, or a refused step somewhere in the batch: find it by halves
                middle = len(items) // 2
                self.send(items[:middle])
                self.send(items[middle:])
                return
            index, line = items[0]
            self.spool.reject(line, exc.status, exc.message, exc.errors)
            self.rejected += 1
            self.warn(f"Cohort refused step {step_of(line)} ({exc}); it is kept in "
                      f"{self.spool.folder / 'rejected.jsonl'}")
            self._ack(index + 1)
            return
        if isinstance(answer, dict):
            self.stored += len(answer.get("stored") or ())
            self.skipped += len(answer.get("skipped") or ())
        self._ack(items[-1][0] + 1)

    def _partly_stored(self, exc: CohortAPIError) -> None:
        """A post stored without the per-token arrays the server refused: counted, warned once (the
        same mistake is usually in every step; the steps.jsonl lines keep what was sent)."""
        self.stored += len(exc.answer.get("stored") or ())
        self.skipped += len(exc.answer.get("skipped") or ())
        self.partly += 1
        if self.partly == 1:
            self.warn(f"Cohort stored the steps but left out per-token arrays it refused ({exc}); later "
                      "refusals of such arrays are not warned again")

    def _ack(self, watermark: int) -> None:
        if watermark > self.spool.state["acked"]:
            self.spool.update(acked=watermark)

    def finish(self) -> None:
        """Sends the finish the folder records; a refused one is reported, not retried."""
        request = self.spool.state["finish"]
        try:
            self._post(f"runs/{self.spool.state['run_id']}/finish/", request)
        except CohortAPIError as exc:
            if exc.retryable or exc.status in FATAL_STATUSES:
                raise
            self.warn(f"Cohort refused to finish run {self.spool.state['run_id']} as {request['state']}: {exc}")
        self.spool.update(finished=True)


def stored_anyway(exc: CohortAPIError) -> bool:
    """Whether a refused steps post was stored all the same, without what the answer names (a 400
    with the steps it stored and skipped)."""
    return (exc.status == 400 and isinstance(exc.answer.get("stored"), list)
            and isinstance(exc.answer.get("skipped"), list))


def retrying(call: Callable[[], Any], *, attempts: int, sleep: Callable[[float], Any] = time.sleep) -> Any:
    """`call()`, asked again with backoff while it raises a retryable error, `attempts` times in all."""
    backoff = Backoff()
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except CohortAPIError as exc:
            if not exc.retryable or attempt == attempts:
                raise
            sleep(exc.wait_s(backoff.next()))
    raise AssertionError("unreachable")
