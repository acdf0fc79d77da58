"""Which addresses a webhook may reach: IP literals in every form a resolver accepts, the address classes
refused (loopback, private, link-local, cloud metadata, ...) and the ``webhook_allow_hosts`` exceptions.
Pure: resolving a host and checking a URL is :mod:`jobengine.webhooks.ssrf`."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from jobengine.core.webhooks.model import InvalidWebhook

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_IPV4_FORMS: Final = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}$", re.IGNORECASE)
_OCTAL: Final = frozenset("01234567")
_LAST_PART_MAX: Final = (0xFFFFFFFF, 0xFFFFFF, 0xFFFF, 0xFF)  # by the count of numbers before the last
METADATA: Final = ipaddress.ip_address("169.254.169.254")


def literal_ip(host: str) -> IP | None:
    """The address ``host`` names literally in any accepted form, else None (a name to resolve).
    Raises InvalidWebhook for a numeric host that is no address (``999999999999``)."""
    text = host.strip("[]")
    try:
        return ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        pass
    if _IPV4_FORMS.match(text):
        address = _numeric_ipv4(text)
        if address is None:
            raise InvalidWebhook("url", f"host {host!r} looks numeric but is not an IPv4 address")
        return address
    return None


def _numeric_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """``text`` (one to four dot-separated decimal, octal ``0..`` or hex ``0x..`` numbers) read as the C
    library's ``inet_aton`` reads it, so the check sees the address a resolver would connect to: the last
    number fills the bytes the others leave. None where ``inet_aton`` refuses it."""
    values: list[int] = []
    for part in text.split("."):
        if part[:2].lower() == "0x":
            if len(part) == 2:
                return None
            values.append(int(part[2:], 16))
        elif len(part) > 1 and part[0] == "0":
            if not set(part) <= _OCTAL:
                return None
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 0xFF for v in head) or last > _LAST_PART_MAX[len(head)]:
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (24 - 8 * i)
    return ipaddress.IPv4Address(number)


def refused(ip: IP) -> str | None:
    """Why ``ip`` may not be reached, or None for a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in (ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None):
            if inner is not None:
                reason = refused(inner)
                if reason:
                    return f"{reason} (inside IPv6 {ip})"
    if ip == METADATA:
        return "the cloud metadata address"
    for name in ("loopback", "private", "link_local", "multicast", "unspecified", "reserved"):
        if getattr(ip, f"is_{name}"):
            return name.replace("_", "-")
    if not ip.is_global:
        return "not a public address"
    return None


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def from_entries(cls, entries: Sequence[str]) -> AddressPolicy:
        """Raises ValueError naming a bad entry (Settings turns it into a ConfigError)."""
        hosts: set[str] = set()
        nets: list[Network] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            if "/" in entry or literal_ip(entry) is not None:
                try:
                    nets.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                except ValueError:
                    raise ValueError(f"{entry!r} is neither a host name nor a network (CIDR)") from None
            else:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(nets))

    def address_allowed(self, ip: IP) -> bool:
        for net in self.networks:
            if ip.version == net.version and ip in net:
                return True
        return refused(ip) is None
