"""POSTing JSON to a webhook: plain HTTP, no Django (the Celery task imports the errors at load time).

A 2xx is a delivery. A connection error, a timeout or a 5xx is temporary (`WebhookTemporaryError`,
worth retrying); any other answer, a 4xx or a redirect (never followed: a redirected POST would turn
into a GET, and a redirect could point inside the network), is a refusal (`WebhookRejected`):
retrying would get the same answer.

Webhooks cannot reach inside the network (server-side request forgery): `check_destination`
resolves the host and refuses it when any of its addresses is loopback, private, link-local,
multicast, reserved, unspecified or otherwise not global, IPv4 or IPv6, an IPv4 address inside IPv6
(mapped, 6to4, Teredo) included; the resolver also reads decimal, octal and hex spellings such as
2130706433 or 0177.0.0.1. The request then connects to the very address that was checked, so a DNS
answer that changes between the check and the connection (rebinding) is never followed. Networks an
admin allows (`allowed_networks`, e.g. an internal chat server) pass.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

USER_AGENT = "Cohort-alerts/1"


class WebhookError(Exception):
    """The webhook did not take the alert."""


class WebhookTemporaryError(WebhookError):
    """Unreachable, too slow, or a 5xx: try again later."""


class WebhookRejected(WebhookError):
    """The server answered and refused (4xx, or a redirect): do not retry."""


class WebhookRefused(WebhookRejected):
    """The URL is not one a webhook may reach (not http(s), or an address inside the network)."""


Resolver = Callable[..., list]  # socket.getaddrinfo's signature


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str
    port: int
    target: str  # path and query
    address: str  # the checked address the request connects to


def parse_networks(values: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """CIDR strings (or single addresses) -> networks; ValueError naming a bad one."""
    return [ipaddress.ip_network(value.strip(), strict=False) for value in values if value.strip()]


def _inside_reason(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why `ip` is inside the network (None: a public address)."""
    for name in ("loopback", "unspecified", "link_local", "multicast", "reserved", "private"):
        if getattr(ip, f"is_{name}"):
            return name.replace("_", "-")
    return None if ip.is_global else "not global"


def _embedded_ipv4(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list:
    if ip.version != 6:
        return []
    found = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
    return [v4 for v4 in found if v4 is not None]


def check_destination(url: str, *, allowed_networks: Sequence[Any] = (),
                      resolve: Resolver = socket.getaddrinfo) -> Destination:
    """The address `url` may be POSTed to; WebhookRefused when it may not, WebhookTemporaryError when
    its host does not resolve now."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookRefused("a webhook is an http:// or https:// URL with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise WebhookRefused("the URL's port is not a number from 0 to 65535") from None
    networks = parse_networks([str(n) for n in allowed_networks])
    try:
        infos = resolve(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookTemporaryError(f"cannot resolve {parts.hostname}: {exc}") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise WebhookTemporaryError(f"cannot resolve {parts.hostname}: no address")
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        candidates = [*_embedded_ipv4(ip), ip]  # an IPv4 address inside IPv6 says most about where it goes
        if any(c in net for c in candidates for net in networks if c.version == net.version):
            continue
        reasons = [r for r in (_inside_reason(c) for c in candidates) if r]
        if reasons:
            named = "" if parts.hostname in (address, str(ip)) else f" is {ip}"
            raise WebhookRefused(
                f"{parts.hostname}{named}, an address inside the network ({reasons[0]}): webhooks only reach "
                "public addresses (an admin can allow a network with COHORT_WEBHOOK_ALLOWED_NETWORKS)")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Destination(parts.scheme, parts.hostname, port, target, addresses[0])


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to the checked address, with the URL's host in the Host header."""

    def __init__(self, destination: Destination, timeout: float):
        super().__init__(destination.host, destination.port, timeout=timeout)
        self._address = destination.address

    def connect(self):
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to the checked address; the certificate is verified against the URL's host (SNI)."""

    def __init__(self, destination: Destination, timeout: float):
        super().__init__(destination.host, destination.port, timeout=timeout, context=ssl.create_default_context())
        self._address = destination.address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post_json(url: str, payload: dict[str, Any], *, timeout_s: float, allowed_networks: Sequence[Any] = (),
              resolve: Resolver = socket.getaddrinfo) -> int:
    """POSTs `payload` as JSON to `url`; returns the 2xx status, raises a WebhookError otherwise.
    `timeout_s` bounds the connect and each read."""
    destination = check_destination(url, allowed_networks=allowed_networks, resolve=resolve)
    body = json.dumps(payload).encode()
    kind = _PinnedHTTPSConnection if destination.scheme == "https" else _PinnedHTTPConnection
    connection = kind(destination, timeout_s)
    try:
        connection.request("POST", destination.target, body=body, headers={
            "Content-Type": "application/json", "User-Agent": USER_AGENT})
        response = connection.getresponse()
        response.read(65536)
    except TimeoutError as exc:
        raise WebhookTemporaryError(f"no answer within {timeout_s:g} s") from exc
    except (ConnectionError, OSError, http.client.HTTPException) as exc:  # refused, reset, TLS, a bad answer
        raise WebhookTemporaryError(f"cannot connect: {exc}") from exc
    finally:
        connection.close()
    reason = f"HTTP {response.status} {response.reason}"
    if 200 <= response.status < 300:
        return response.status
    if response.status >= 500:
        raise WebhookTemporaryError(reason)
    raise WebhookRejected(reason)
