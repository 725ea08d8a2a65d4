"""Latency from "step committed" to "notice received by a websocket client on loopback".

Set-up, all of it throwaway: the database `cohort_bench_stream` on DATABASE_URL's server (default
postgres://postgres@127.0.0.1:5432/postgres), migrated; Redis from REDIS_URL (default
redis://127.0.0.1:6379/9, a database number the tests do not use) under a channel-layer prefix of its
own; daphne serving `webapp.asgi:application` on a free loopback port; a user with a session and a
run. A websocket client (the `websockets` library's synchronous client, see `NoticeClient`) connects to
`/ws/runs/<id>/` with the session cookie and an allowed Origin, and reads on its own thread, as a
browser reads apart from the worker.

Per step, as the supervisor does it: `step_events_ingest(run, [a small step event])` commits (2
questions x 4 rollouts x 3 calls): t0; on that commit the ingest sends the step notice (channel layer
group_send to `run-<id>`, daphne's consumer forwards it); the latency is the moment
the client reads the notice with that seq, minus t0. One step at a time: the next is stored once the
previous notice arrived (or after --timeout, counted as lost). The first --warmup steps (new
connections, first-call imports) are not counted. Target: p95 < 100 ms.

Everything started is stopped at the end: the client, daphne, the database, the Redis keys under
the benchmark's prefix.

Run: ``.venv/bin/python benchmarks/stream_latency.py [--steps 200] [--warmup 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import make_run, mhgpo_step_event  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    close_django_connections,
    daphne,
    django_setup,
    session_cookie,
    throwaway_database,
)

BENCH_DATABASE = "cohort_bench_stream"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
CHANNELS_PREFIX = "cohort-bench-stream"
TARGET_P95_MS = 100.0


# --- The websocket client -----------------------------------------------------------------------


class NoticeClient:
    """Reads a run's notices on a `websockets` synchronous connection, in a thread of its own, and
    notes when each step notice was read.

    The synchronous client needs no event loop in this process, which runs Django's ORM on its main
    thread (and autobahn's asyncio client could not share a process with daphne's Twisted app either:
    txaio picks one framework per process). `arrived` is stamped when this thread gets the message
    from the connection, i.e. after websockets' own I/O thread has read and queued the frame.
    """

    def __init__(self):
        self.changed = threading.Condition()
        self.arrived: dict[int, float] = {}  # seq -> time.perf_counter() when its message was read
        self.close_code: int | None = None

    def connect(self, host: str, port: int, path: str, *, origin: str, cookie: str, timeout_s: float = 10.0) -> None:
        """The opening handshake; raises SystemExit when the server refuses (403: origin or login)."""
        try:
            # No client pings (a browser sends none), no proxy (loopback); legacy=True: connect now.
            self.websocket = connect(f"ws://{host}:{port}{path}", origin=origin, additional_headers={"Cookie": cookie},
                                     open_timeout=timeout_s, close_timeout=timeout_s, ping_interval=None,
                                     proxy=None, legacy=True)
        except InvalidHandshake as exc:
            raise SystemExit(f"the websocket was refused: {exc}") from exc
        self.reader = threading.Thread(target=self._read_messages, name="notice-client", daemon=True)
        self.reader.start()

    def _read_messages(self) -> None:
        code = 1006
        try:
            while True:
                message = self.websocket.recv()
                at = time.perf_counter()
                self._record(json.loads(message), at)
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else 1006  # the server's close frame, if any
        except ValueError:  # not a JSON notice: give up on the stream
            self.websocket.close()
        finally:
            self._closed(code)

    def _record(self, notice: dict, at: float) -> None:
        if notice.get("type") == "step":
            with self.changed:
                self.arrived[notice["seq"]] = at
                self.changed.notify_all()

    def _closed(self, code: int) -> None:
        with self.changed:
            self.close_code = code
            self.changed.notify_all()

    def wait_for(self, seq: int, timeout_s: float) -> float | None:
        """When the notice with `seq` arrived (perf_counter), None if it did not within `timeout_s`."""
        with self.changed:
            self.changed.wait_for(lambda: seq in self.arrived or self.close_code is not None, timeout_s)
            return self.arrived.get(seq)

    def close(self, timeout_s: float = 5.0) -> None:
        """The closing handshake (1000, normal), then the reading thread."""
        self.websocket.close()
        self.reader.join(timeout_s)


# --- Measuring ----------------------------------------------------------------------------------


def store_and_notify(run, event) -> tuple[int, float, float]:
    """The supervisor's ship(): the ingest stores the step and, on its commit, sends the step notice.
    Returns (seq, t0 = the commit, the moment the ingest returned, its notice sent)."""
    from django.db import transaction

    from webapp.runs.ingest.store import step_events_ingest

    committed = []
    with transaction.atomic():  # the first commit callback: the ingest's notices are sent after it
        transaction.on_commit(lambda: committed.append(time.perf_counter()))
        (metric,) = step_events_ingest(run, [event])
    return metric.seq, committed[0], time.perf_counter()


def measure(run, client: NoticeClient, steps: int, warmup: int, timeout_s: float) -> tuple[list[float], list[float], int]:
    """Latencies in ms of the counted steps, how long sending the notice took after the commit (ms), and how many
    notices never arrived."""
    events = [mhgpo_step_event(step, questions=2, seed=step) for step in range(1, warmup + steps + 1)]
    latencies, sending, lost = [], [], 0
    for i, event in enumerate(events):
        seq, t0, sent = store_and_notify(run, event)
        arrived = client.wait_for(seq, timeout_s)
        if client.close_code is not None:
            raise SystemExit(f"the websocket closed (code {client.close_code}) after {i} steps")
        if i < warmup:
            continue
        sending.append((sent - t0) * 1e3)
        if arrived is None:
            lost += 1
        else:
            latencies.append((arrived - t0) * 1e3)
    return latencies, sending, lost


def delete_redis_keys(redis_url: str, prefix: str) -> None:
    """The channel layer's keys under the benchmark's own prefix (group memberships live a day)."""
    import redis

    with redis.Redis.from_url(redis_url) as connection:
        keys = list(connection.scan_iter(match=f"{prefix}*"))
        if keys:
            connection.delete(*keys)


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps measured")
    parser.add_argument("--warmup", type=int, default=5, help="steps sent first and not counted")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds before a notice counts as lost")
    args = parser.parse_args()

    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    os.environ.update(REDIS_URL=redis_url, CHANNELS_PREFIX=CHANNELS_PREFIX)
    with throwaway_database(BENCH_DATABASE) as database_url:
        try:
            django_setup(database_url)
            run = make_run()
            cookie = session_cookie(run.owner)
            env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings", PYTHONUNBUFFERED="1")
            with daphne(env) as port:
                client = NoticeClient()
                client.connect("127.0.0.1", port, f"/ws/runs/{run.pk}/", origin=f"http://127.0.0.1:{port}",
                               cookie=cookie)
                try:
                    latencies, sending, lost = measure(run, client, args.steps, args.warmup, args.timeout)
                finally:
                    client.close()
        finally:
            close_django_connections()
            delete_redis_keys(redis_url, CHANNELS_PREFIX)

    if len(latencies) < 2:
        raise SystemExit(f"only {len(latencies)} notices arrived ({lost} lost)")
    p50, p95 = statistics.median(latencies), percentile(latencies, 95)
    print(f"{len(latencies)} steps ({args.warmup} warm-up steps not counted), notices lost: {lost}")
    print(f"commit -> websocket notice: p50 {p50:.1f} ms  p95 {p95:.1f} ms  max {max(latencies):.1f} ms")
    print(f"  of which the commit until the ingest returned, its notice sent (the supervisor's side): p50 {statistics.median(sending):.1f} ms  "
          f"p95 {percentile(sending, 95):.1f} ms")
    verdict = "met" if p95 < TARGET_P95_MS and not lost else "NOT met"
    print(f"target p95 < {TARGET_P95_MS:.0f} ms (and no notice lost): {verdict}")


if __name__ == "__main__":
    main()
