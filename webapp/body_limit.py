"""An ASGI guard that refuses an HTTP request whose declared body is larger than any upload Cohort
accepts, before Django reads (and spools to disk) a byte of it.

The limit is the dataset upload limit plus room for the form's other fields. The upload view still
counts bytes while streaming, for clients that send no Content-Length (chunked encoding).
"""

from __future__ import annotations

import json

FORM_OVERHEAD_BYTES = 1024 * 1024


class BodySizeLimit:
    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes + FORM_OVERHEAD_BYTES

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self._declared_size(scope) > self.max_bytes:
            body = json.dumps({"error": f"Request body over the {self.max_bytes // (1024 * 1024)} MB limit "
                                        "(COHORT_DATASET_MAX_BYTES)."}).encode()
            await send({"type": "http.response.start", "status": 413,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                    (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _declared_size(scope) -> int:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0  # Django answers a malformed header itself
        return 0
