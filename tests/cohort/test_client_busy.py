"""`cohort.client.Client` against a busy server: a 503 or 429 with Retry-After is asked again after the
time the server gave, a few times; without Retry-After, or once the retries are spent, it raises."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cohort.client import Client, CohortAPIError


@pytest.fixture
def busy_server():
    """Answers `busy` (a list of (status, Retry-After or None)) in turn, then 200; records when it was asked."""
    state = {"busy": [], "asked": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            state["asked"].append(time.monotonic())
            status, retry_after = state["busy"].pop(0) if state["busy"] else (200, None)
            data = json.dumps({"id": 3, "state": "running"} if status == 200 else {"detail": "Cohort is busy"}).encode()
            self.send_response(status)
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def test_a_busy_answer_is_asked_again_after_its_retry_after(busy_server):
    busy_server["busy"] = [(503, "1"), (429, "0")]
    assert Client(busy_server["url"], "key").get("runs/3/") == {"id": 3, "state": "running"}
    asked = busy_server["asked"]
    assert len(asked) == 3 and asked[1] - asked[0] >= 0.95


def test_without_retry_after_or_past_the_retries_the_error_is_raised(busy_server):
    busy_server["busy"] = [(503, None)]
    with pytest.raises(CohortAPIError, match="503: Cohort is busy"):
        Client(busy_server["url"], "key").get("runs/3/")
    busy_server["busy"] = [(503, "0")] * 3
    with pytest.raises(CohortAPIError) as raised:
        Client(busy_server["url"], "key", busy_retries=2).get("runs/3/")
    assert raised.value.status == 503 and raised.value.retry_after == 0
