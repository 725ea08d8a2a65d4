"""Django's SQLite backend with one writer at a time, in turn, and Cohort's worker first.

SQLite has one write lock for the whole file. Django takes it at the start of each transaction
(`BEGIN IMMEDIATE`, settings.py). A connection that finds it taken retries in SQLite's busy handler,
which sleeps in growing steps and favours whoever asks at the right moment. With 32 request threads
each writing a step of 64 rollouts, some waited past the 30 s busy timeout, and their client got a
500, "database is locked" (issue 43: 20 of them at 32 runs at once).

Here a writer takes two locks before SQLite's:
- **The process's lock** (a threading lock). A process's threads queue on it, so only one thread of
  the web server is ever waiting for the file.
- **The file's lock** (`flock` on `<database>.writer`), shared by every process that writes the file:
  the server and the worker.
  - A worker process waits for it blocked in the kernel, and is woken the moment it frees.
  - The server polls it every few milliseconds.
  - So a worker storing its run's steps gets the next turn after the server's current transaction,
    ahead of any number of queued uploads: the training side first.

With both locks held, SQLite's own lock is free when asked for, and its busy handler never picks a
winner. A server thread that cannot get its turn within `COHORT_SQLITE_WRITE_WAIT_S` raises
`DatabaseBusy`, which the server answers with a 503 and `Retry-After` (webapp/overload.py), not a 500.

A write statement outside a transaction (autocommit: a session saved, a counter bumped) queues the
same way for its one statement.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager

from django.conf import settings
from django.db.backends.sqlite3 import base
from django.db.utils import OperationalError

_WRITER = threading.Lock()  # the process's one writer: every connection of every thread shares it
_LOCK_FILES: dict[tuple[int, str], int] = {}  # (pid, lock file) -> descriptor: a forked child opens its own
_LOCK_FILES_GUARD = threading.Lock()
POLL_S = 0.002  # how often the server asks for the file's lock while a worker may be waiting for it
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class DatabaseBusy(OperationalError):
    """No write turn within COHORT_SQLITE_WRITE_WAIT_S: too much load, ask again later."""


def _lock_file(database: str) -> int | None:
    """The descriptor of `<database>.writer` in this process; None for an in-memory database."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    key = (os.getpid(), f"{database}.writer")
    with _LOCK_FILES_GUARD:
        if key not in _LOCK_FILES:
            _LOCK_FILES[key] = os.open(key[1], os.O_RDWR | os.O_CREAT, 0o600)
        return _LOCK_FILES[key]


class QueuedWriteCursor(base.SQLiteCursorWrapper):
    """Django's cursor, whose write statements outside a transaction wait for their turn."""

    wrapper: DatabaseWrapper

    def execute(self, query, params=None):
        with self.wrapper.autocommit_write(query):
            return super().execute(query, params)

    def executemany(self, query, param_list):
        with self.wrapper.autocommit_write(query):
            return super().executemany(query, param_list)


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_writer = False
    _file_lock: int | None = None

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=QueuedWriteCursor)
        cursor.wrapper = self
        return cursor

    @contextmanager
    def autocommit_write(self, query: str):
        if self._holds_writer or self.in_atomic_block or not query.lstrip()[:7].upper().startswith(WRITES):
            yield
            return
        self._take_turn()
        try:
            yield
        finally:
            self._end_turn()

    def _start_transaction_under_autocommit(self):
        self._take_turn()
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._end_turn()
            raise

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._end_turn()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._end_turn()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._end_turn()

    # --- the turn -------------------------------------------------------------------------------

    def _take_turn(self) -> None:
        wait_s = float(settings.COHORT_SQLITE_WRITE_WAIT_S)
        deadline = time.monotonic() + wait_s
        if not _WRITER.acquire(timeout=wait_s):
            raise DatabaseBusy(f"the database is busy: no write turn within {wait_s:g} s")
        try:
            self._file_lock = _lock_file(str(self.settings_dict["NAME"]))
            if self._file_lock is not None and not self._lock(self._file_lock, deadline):
                raise DatabaseBusy(f"the database is busy: no write turn within {wait_s:g} s")
        except BaseException:
            self._file_lock = None
            _WRITER.release()
            raise
        self._holds_writer = True

    @staticmethod
    def _lock(descriptor: int, deadline: float) -> bool:
        if not settings.COHORT_SQLITE_WRITER_YIELDS:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # a worker: woken as soon as the file is free
            return True
        while True:  # the server: polls, so a worker blocked on the lock is woken first
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(POLL_S)

    def _end_turn(self) -> None:
        if not self._holds_writer:
            return
        self._holds_writer = False
        if self._file_lock is not None:
            fcntl.flock(self._file_lock, fcntl.LOCK_UN)
            self._file_lock = None
        _WRITER.release()
