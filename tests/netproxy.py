"""A TCP proxy for outage tests: put it between a process and a server, then take the server "down".

    with TcpProxy("127.0.0.1", 5432) as proxy:      # listens on a free loopback port
        url = f"postgres://postgres@127.0.0.1:{proxy.port}/mydb"
        ...
        proxy.down()   # every proxied connection is cut, new ones are reset at once
        ...
        proxy.up()     # connections pass again
        proxy.cut()    # a blip: open connections are cut, new ones pass
        proxy.down_on(b"COPY ")  # down the moment a client sends these bytes (they never arrive)
        proxy.upstream_ports     # the server sees the proxied clients coming from these ports

The server itself keeps running (the test process may use it directly), so only the clients that
go through the proxy see the outage. Threads in this process: one accepts, two per connection
copy bytes; `down()` and `close()` shut the sockets down, which ends those threads.
"""

from __future__ import annotations

import socket
import struct
import threading

BUFFER = 65536


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a crashed server's host would answer a new connection."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


def _cut(sock: socket.socket) -> None:
    """Shut both directions: the peer reads EOF at once and the pump blocked on `recv` returns (it
    closes the socket; closing it here, under a thread blocked in `recv`, would not wake that)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class TcpProxy:
    """Forwards connections from `127.0.0.1:<self.port>` to `target_host:target_port`."""

    def __init__(self, target_host: str, target_port: int, *, connect_timeout_s: float = 5.0):
        self.target = (target_host, target_port)
        self.connect_timeout_s = connect_timeout_s
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._is_up = True
        self._closing = False
        self._down_on: bytes | None = None
        self._stay_down = True
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"tcp-proxy-{self.port}", daemon=True)
        self.accepted = 0  # connections forwarded
        self.refused = 0  # connections reset because the proxy was down
        self.triggered = 0  # times a `down_on` pattern went by
        self.upstream_ports: set[int] = set()  # local ports of every connection made to the target

    def start(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def is_up(self) -> bool:
        return self._is_up

    def down(self) -> int:
        """The outage: cut every open connection and reset every new one until `up()`; returns how
        many connections were open."""
        with self._lock:
            self._is_up = False
        return self.cut()

    def cut(self) -> int:
        """A blip (a backend terminated, a failover): cut every open connection, let new ones pass;
        returns how many were open."""
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            _cut(sock)
        return len(sockets) // 2

    def up(self) -> None:
        with self._lock:
            self._is_up = True

    def down_on(self, pattern: bytes, *, stay_down: bool = True) -> None:
        """When a client next sends bytes containing `pattern` (e.g. one SQL statement), cut every
        connection before they reach the server, and stay down until `up()` unless `stay_down` is
        False (then it is a blip): a failure in the middle of a chosen step of a transaction."""
        self._stay_down = stay_down
        self._down_on = pattern

    def close(self) -> None:
        self._closing = True
        self.down()
        if self._acceptor.is_alive():
            self._acceptor.join(timeout=5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if not self._is_up:
                self.refused += 1
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=self.connect_timeout_s)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if not self._is_up:  # went down while connecting
                    self.refused += 1
                    _reset(client)
                    _reset(server)
                    continue
                self._open.update((client, server))
                self.upstream_ports.add(server.getsockname()[1])
                self.accepted += 1
            for source, sink, from_client in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, from_client), daemon=True,
                                 name=f"tcp-proxy-{self.port}-pump").start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = source.recv(BUFFER)
                if not data:
                    break
                pattern = self._down_on
                if from_client and pattern is not None and pattern in data:
                    self._down_on = None
                    self.triggered += 1
                    if self._stay_down:
                        self.down()
                    else:
                        self.cut()
                    break
                sink.sendall(data)
        except OSError:
            pass
        # One side ended or failed: end the pair (the other pump then stops too).
        with self._lock:
            self._open.discard(source)
            self._open.discard(sink)
        for sock in (source, sink):
            _cut(sock)
        # Each pump closes only its source: the other pump may still be reading its own.
        source.close()
