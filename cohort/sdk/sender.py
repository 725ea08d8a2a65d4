"""The background thread that uploads a live run while it trains.

The training thread appends each sealed step to the run folder's steps.jsonl and tells this thread
how many lines there are now (`put`, `finish`: a lock held for a few microseconds); this thread does
every request, reading the lines back from the file as it sends them, so a long outage costs disk,
never memory (it holds one batch). It creates the run, then sends what is queued in
batches, then the finish. A failure worth retrying (no answer, 5xx) is retried with capped
exponential backoff for as long as the process lives, so a server that restarts, or a laptop that
loses its network for an hour, costs nothing but a delay; `wake` (what `finish` calls) cuts a wait
short. A failure no retry can fix (a token or a task the server refuses) stops the upload with one
warning; the steps stay in the run folder for `cohort sync`.

A daemon thread: it never keeps a finished program alive. `Run.finish` (or the exit hook) is what
waits, for as long as its timeout says. Once the server has created the run, `announce` gets its
page's URL (what `cohort.init` prints); `wait_answered` lets init wait a moment for that first answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cohort.http import CohortAPIError
from cohort.sdk.spool import STEPS_FILE, Spool
from cohort.sdk.upload import MAX_BATCH_BYTES, MAX_BATCH_STEPS, Backoff, Item, Uploader, batches


class Sender:
    """Uploads the run folder's step lines as `put` announces them, in order, then the finish."""

    def __init__(self, spool: Spool, url: str, token: str, *, warn: Callable[[str], None],
                 announce: Callable[[str], None] | None = None):
        self.spool = spool
        self.announce = announce  # called once with the run page's URL when the server created the run
        self._answered = threading.Event()  # the first creation attempt is over: created, refused or failed
        self.uploader = Uploader(spool, url, token, warn=warn)
        self.warn = warn
        self._cond = threading.Condition()
        self._queued = spool.state["acked"]  # the number of lines steps.jsonl holds for sending
        self._window: list[Item] = []  # lines read back from the file, not answered yet (one batch at most)
        self._read = spool.state["acked"]  # the line number after the newest read
        self._reader = None
        self._finish_queued = False
        self._stopped: str | None = None  # why the upload stopped for good
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cohort-sender-{spool.folder.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- the training thread's side ------------------------------------------------------------

    def put(self, lines: int) -> None:
        """steps.jsonl now holds `lines` complete lines."""
        with self._cond:
            self._queued = lines
            self._cond.notify_all()

    def finish(self) -> None:
        """Queues the finish the run folder records."""
        with self._cond:
            self._finish_queued = True
            self._cond.notify_all()
        self.wake()

    def wake(self) -> None:
        """Retries now if the thread is waiting out a failure."""
        self._wake.set()

    def wait_answered(self, timeout: float) -> bool:
        """Waits up to `timeout` s for the server's first answer to the run's creation (or for it to
        fail); True when the server created the run."""
        self._answered.wait(timeout)
        return self.spool.state["run_id"] is not None

    def wait(self, timeout: float | None) -> bool:
        """True once everything queued so far is acknowledged; False after `timeout` s or if the
        upload stopped."""
        with self._cond:
            return self._cond.wait_for(lambda: self._done() or self._stopped is not None, timeout) and self._done()

    @property
    def unsent(self) -> int:
        """How many queued steps the server has not answered yet."""
        with self._cond:
            return self._queued - self.spool.state["acked"]

    @property
    def stopped(self) -> str | None:
        return self._stopped

    def _done(self) -> bool:
        state = self.spool.state
        return (state["run_id"] is not None and state["acked"] >= self._queued
                and (not self._finish_queued or state["finished"]))

    # --- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._answered.set()
            if self._reader is not None:
                self._reader.close()

    def _loop(self) -> None:
        backoff = Backoff()
        failing = False
        while True:
            try:
                if not self._step():
                    return
                if failing:
                    self.warn(f"reached {self.uploader.url} again; uploading")
                failing = False
                backoff.reset()
            except CohortAPIError as exc:
                if not exc.retryable:
                    self._stop(f"Cohort refused the upload ({exc}); the steps are kept in {self.spool.folder}")
                    return
                if not failing:
                    self.warn(f"cannot upload to Cohort ({exc}); the steps are kept in {self.spool.folder} "
                              "and retried in the background")
                failing = True
                self._answered.set()  # init waits no longer: the run's page is announced once created
                if self._wake.wait(exc.wait_s(backoff.next())):
                    backoff.reset()
                self._wake.clear()
            except Exception as exc:  # a bug must not pass silently, nor take the training down
                self._stop(f"the upload stopped on an unexpected error ({exc!r}); the steps are kept in "
                           f"{self.spool.folder}")
                return

    def _step(self) -> bool:
        """One request of what is left (False when all is done for good); waits for work if none."""
        state = self.spool.state
        if state["run_id"] is None:
            self.uploader.create()
            if self.announce is not None:
                self.announce(state["run_url"])
            self._answered.set()
            self._notify()
            return True
        with self._cond:
            while self._read >= self._queued and not self._window:
                if self._finish_queued:
                    if state["finished"]:
                        return False
                    break
                self._cond.wait()
            queued = self._queued
        self._window = [item for item in self._window if item[0] >= state["acked"]]  # answered before a failure
        self._fill(queued)
        batch = next(batches(self._window), None)
        if batch:
            self.uploader.send(batch)
            self._window = self._window[len(batch):]
        else:
            self.uploader.finish()
        self._notify()
        return True

    def _fill(self, queued: int) -> None:
        """Reads the next lines, up to a batch, back from steps.jsonl (complete lines only: a line is
        announced after it is written)."""
        if self._reader is None:
            self._reader = open(self.spool.folder / STEPS_FILE, "rb")  # read as the run goes
            for _ in range(self._read):
                self._reader.readline()
        while (len(self._window) < MAX_BATCH_STEPS and self._read < queued
               and sum(len(line) for _, line in self._window) < MAX_BATCH_BYTES):
            line = self._reader.readline().decode("utf-8").rstrip("\n")
            self._window.append((self._read, line))
            self._read += 1

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _stop(self, why: str) -> None:
        self.warn(why)
        with self._cond:
            self._stopped = why
            self._cond.notify_all()
