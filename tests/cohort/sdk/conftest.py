"""The SDK's unit-test helpers: a stand-in for the server's three external-run endpoints, small
enough to make it answer what a protocol case needs (413, a refused step, an outage)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cohort.sdk import exit_hook

TOKEN = "good-token"
RUN_ID = 7


class StubCohort:
    """What the stub was asked and what it stored; set `max_body`, `refuse` or `down` to misbehave."""

    def __init__(self):
        self.url = ""
        self.created: list[dict] = []  # every create request's body
        self.steps: dict[int, dict] = {}  # stored steps
        self.posts: list[tuple[int, list[int], int]] = []  # (status, step numbers, body bytes) per steps post
        self.finishes: list[dict] = []
        self.max_body: int | None = None  # a bigger steps post is answered 413
        self.refuse: set[int] = set()  # a post holding one of these steps is answered 400
        # A post holding one of these steps is stored without its rollouts' token arrays and answered 400
        # with what was stored (the server's answer to bad per-token arrays).
        self.partly: set[int] = set()
        self.down = False  # every request is answered 503
        self.down_answers = 0
        self.down_times: list[float] = []  # time.monotonic() of each 503
        self.retry_after: str | None = None  # the 503's Retry-After header, if any
        self.lock = threading.Lock()

    def answer(self, path: str, token: str, body: bytes) -> tuple[int, dict]:
        if token != f"Bearer {TOKEN}":
            return 401, {"detail": "Invalid token."}
        if self.down:
            self.down_answers += 1
            self.down_times.append(time.monotonic())
            return 503, {"detail": "down for maintenance"}
        payload = json.loads(body)
        if path == "/api/external/runs/":
            self.created.append(payload)
            return (201 if len(self.created) == 1 else 200), {"id": RUN_ID, "url": f"/runs/{RUN_ID}/",
                                                              "state": "running", "origin": payload["origin"]}
        if path == f"/api/runs/{RUN_ID}/steps/":
            numbers = [s["step"] for s in payload["steps"]]
            if self.max_body is not None and len(body) > self.max_body:
                self.posts.append((413, numbers, len(body)))
                return 413, {"detail": "Request body too large."}
            refused = sorted(self.refuse & set(numbers))
            if refused:
                self.posts.append((400, numbers, len(body)))
                return 400, {"detail": f"step {refused[0]}: a reward is not a number", "errors": {"steps": ["bad"]}}
            partly = sorted(self.partly & set(numbers))
            self.posts.append((400 if partly else 200, numbers, len(body)))
            stored = [s["step"] for s in payload["steps"] if s["step"] not in self.steps]
            self.steps.update({s["step"]: s for s in payload["steps"] if s["step"] in stored})
            answer = {"run": RUN_ID, "stored": stored, "skipped": sorted(set(numbers) - set(stored))}
            if partly:
                path = f"steps[{numbers.index(partly[0])}].rollouts[0].entropies"
                return 400, {"detail": f"1 per-token array refused: {path}: 3 values for 2 tokens. They were left "
                                       "out; the rest of the post was stored (see stored and skipped).",
                             "errors": {path: ["3 values for 2 tokens"]}, **answer}
            return 200, answer
        if path == f"/api/runs/{RUN_ID}/finish/":
            self.finishes.append(payload)
            return 200, {"id": RUN_ID, "state": payload["state"]}
        return 404, {"detail": "No such run."}


@pytest.fixture
def stub():
    cohort = StubCohort()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with cohort.lock:
                status, answer = cohort.answer(self.path, self.headers.get("Authorization", ""), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            if status == 503 and cohort.retry_after is not None:
                self.send_header("Retry-After", cohort.retry_after)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    cohort.url = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield cohort
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def no_run_left_unfinished():
    """A run a test left unfinished would be finished at the end of the whole session, waiting for
    an upload that cannot happen: finish it now, without waiting."""
    yield
    for run in list(exit_hook._unfinished.values()):
        run.finish(timeout=0)
