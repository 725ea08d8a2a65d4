"""A real webhook receiver: an HTTP server on 127.0.0.1 in a thread, answering from a script."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class WebhookServer:
    """Answers the n-th POST with `script[n]` (the last entry repeats): a status code, or
    ("sleep", seconds, status) to answer late. Records each request's arrival time and JSON body."""

    url: str = ""
    script: list = field(default_factory=lambda: [200])
    requests: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_answer(self, body: bytes) -> tuple[float, int]:
        with self.lock:
            n = len(self.requests)
            self.requests.append({"at": time.monotonic(), "json": json.loads(body or b"null")})
        answer = self.script[min(n, len(self.script) - 1)]
        return (answer[1], answer[2]) if isinstance(answer, tuple) else (0.0, answer)


@pytest.fixture
def webhook_server(settings):
    """The receiver, on loopback: allowed for webhooks here (COHORT_WEBHOOK_ALLOWED_NETWORKS), as an
    admin allows an internal server."""
    settings.COHORT_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    server_state = WebhookServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            delay, status = server_state.next_answer(body)
            if delay:
                time.sleep(delay)  # the server is slow on purpose: the client must give up first
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")
            except OSError:
                pass  # the client hung up (timed out) before the answer

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    server_state.url = f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield server_state
    httpd.shutdown()
    httpd.server_close()
