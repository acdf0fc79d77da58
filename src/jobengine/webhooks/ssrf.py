"""Which addresses a webhook may reach (server-side request forgery protection).

A URL is checked at registration and again before every send: its host is parsed as an IP literal in any
form a resolver would accept (``[::1]``, ``2130706433``, ``0177.0.0.1``, ``0x7f000001``, ``127.1``) or
resolved, and **every** address must be public: loopback, private, link-local (the cloud metadata address
169.254.169.254 among them), shared, multicast, unspecified and reserved addresses are refused, and so are
IPv6 forms that carry an IPv4 address (IPv4-mapped, 6to4, Teredo) whose IPv4 address is refused. The send
then connects to the address that was checked (so a second DNS answer cannot redirect it) with the
original Host header and TLS server name, and never follows a redirect.

``allow`` entries (setting ``webhook_allow_hosts``) open exceptions for development and tests: a host name
(exact, case-insensitive) or a network in CIDR form (``127.0.0.1/32``, ``10.0.0.0/8``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from jobengine.core.webhooks.addresses import IP, AddressPolicy, literal_ip, refused
from jobengine.core.webhooks.model import InvalidWebhook, check_url_syntax

#: ``(host, port) -> addresses`` (text); the default asks the system resolver.
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))


@dataclass(frozen=True, slots=True)
class Target:
    """Where a send goes: ``address`` (checked) and what the request says (Host header, TLS name)."""

    url: str
    scheme: str
    host: str  # as written, lower case, without brackets
    port: int
    address: str
    host_header: str
    path: str  # path and query

    @property
    def connect_url(self) -> str:
        addr = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{addr}:{self.port}{self.path}"


async def check_url(url: object, policy: AddressPolicy, resolver: Resolver = system_resolver) -> Target:
    """Parse, resolve and check ``url``; returns the first checked address to connect to. Raises
    InvalidWebhook (field ``url``) saying which address is refused and why."""
    text = check_url_syntax(url)
    parts = urlsplit(text)
    host = (parts.hostname or "").lower().rstrip(".")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    netloc = parts.netloc.rsplit("@", 1)[-1]
    literal = literal_ip(host)
    if literal is not None:
        addresses: list[IP] = [literal]
    else:
        try:
            found = await resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise InvalidWebhook("url", f"host {host!r} does not resolve ({exc})") from None
        if not found:
            raise InvalidWebhook("url", f"host {host!r} does not resolve")
        addresses = [ipaddress.ip_address(a) for a in found]
    named_ok = literal is None and host in policy.hosts
    for ip in addresses:
        if named_ok or policy.address_allowed(ip):
            continue
        reason = refused(ip) or "not allowed"
        shown = host if literal is None else str(url).split("//", 1)[-1].split("/", 1)[0]
        raise InvalidWebhook("url", f"{shown} is or resolves to {ip}, a {reason} address: refused (SSRF; a "
                                    "receiver of your own: list its host in webhook_allow_hosts)")  # fmt: skip
    return Target(text, parts.scheme, host, port, str(addresses[0]), netloc, path)
