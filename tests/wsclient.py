"""A small blocking websocket client (RFC 6455) for tests against a real ASGI server.

The project has no websocket client library (daphne serves, it does not connect), and a test that
watches a run like the browser does needs one that sends the browser's headers: the session cookie
and the Origin. Text frames only (the run socket sends JSON); pings are answered.

    with WebSocket(f"{base_url}/ws/runs/7/", cookie="sessionid=...") as ws:
        notice = ws.receive_json(timeout_s=10)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import time
from urllib.parse import urlsplit

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class HandshakeRefused(Exception):
    """The server answered the upgrade with something other than 101 (e.g. 403: refused at connect)."""

    def __init__(self, status: int, response: str):
        super().__init__(f"websocket handshake refused with HTTP {status}")
        self.status = status
        self.response = response


class ConnectionClosed(Exception):
    """The server closed the websocket (`code` from its close frame, 1006 if it just went away)."""

    def __init__(self, code: int):
        super().__init__(f"websocket closed with code {code}")
        self.code = code


class WebSocket:
    def __init__(self, url: str, *, cookie: str = "", origin: str | None = None, timeout_s: float = 10.0):
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 80
        origin = origin or f"http://{parts.netloc}"
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {parts.path}{'?' + parts.query if parts.query else ''} HTTP/1.1", f"Host: {parts.netloc}",
                 "Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                 "Sec-WebSocket-Version: 13", f"Origin: {origin}"]
        if cookie:
            lines.append(f"Cookie: {cookie}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self._buffer = b""
        while b"\r\n\r\n" not in self._buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                self.sock.close()
                raise HandshakeRefused(0, self._buffer.decode(errors="replace"))
            self._buffer += chunk
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        response = head.decode(errors="replace")
        status = int(response.split(" ", 2)[1])
        if status != 101:
            self.sock.close()
            raise HandshakeRefused(status, response)
        expected = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        headers = dict(line.split(":", 1) for line in response.split("\r\n")[1:] if ":" in line)
        accept = {k.strip().lower(): v.strip() for k, v in headers.items()}.get("sec-websocket-accept")
        if accept != expected:
            self.sock.close()
            raise HandshakeRefused(status, response)
        self.closed = False

    def __enter__(self) -> WebSocket:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def receive_json(self, timeout_s: float = 10.0) -> dict:
        """The next text message, decoded; TimeoutError if none comes in time."""
        return json.loads(self.receive_text(timeout_s))

    def receive_text(self, timeout_s: float = 10.0) -> str:
        deadline = time.monotonic() + timeout_s
        parts: list[bytes] = []
        while True:
            opcode, fin, payload = self._read_frame(deadline)
            if opcode == OP_PING:
                self._send_frame(OP_PONG, payload)
            elif opcode == OP_CLOSE:
                self.closed = True
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                raise ConnectionClosed(code)
            elif opcode in (OP_TEXT, OP_BINARY, OP_CONTINUATION):
                parts.append(payload)
                if fin:
                    return b"".join(parts).decode()

    def close(self, code: int = 1000) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._send_frame(OP_CLOSE, struct.pack("!H", code))
            except OSError:
                pass
        self.sock.close()

    def _read_frame(self, deadline: float) -> tuple[int, bool, bytes]:
        """(opcode, fin, payload) of the next frame; a frame leaves the buffer only once it is whole,
        so a timeout never loses half of one."""
        while True:
            frame = self._parse_frame()
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no websocket message in time")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise TimeoutError("no websocket message in time") from None
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                raise ConnectionClosed(1006)
            self._buffer += chunk

    def _parse_frame(self) -> tuple[int, bool, bytes] | None:
        buf = self._buffer
        if len(buf) < 2:
            return None
        length, offset = buf[1] & 0x7F, 2
        if length == 126:
            if len(buf) < 4:
                return None
            length, offset = struct.unpack("!H", buf[2:4])[0], 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length, offset = struct.unpack("!Q", buf[2:10])[0], 10
        mask = b""
        if buf[1] & 0x80:
            mask, offset = buf[offset:offset + 4], offset + 4
        if len(buf) < offset + length:
            return None
        payload, self._buffer = buf[offset:offset + length], buf[offset + length:]
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return buf[0] & 0x0F, bool(buf[0] & 0x80), payload

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        # A client masks every frame (RFC 6455 5.3).
        mask = os.urandom(4)
        header = bytes([0x80 | opcode])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
