"""Redis URLs that name a Sentinel-managed master instead of one server.

The form (as redis-sentinel-url and RedisVL spell it)::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]

lists the Sentinels to ask (port 26379 unless given), the name they monitor the master under (``sentinel
monitor <service> ...``) and the database number (0 unless given). The user and password are the Redis
servers' (master and replicas), not the Sentinels'. Any other ``redis://`` / ``rediss://`` / ``unix://`` URL
is a single server and is left to redis-py. Usage::

    parse_sentinel_url("redis+sentinel://s1,s2:26380/jobs/2", "queue.redis.url")
    # SentinelUrl(sentinels=(('s1', 26379), ('s2', 26380)), service='jobs', db=2, username=None, password=None)

A malformed one raises :class:`ConfigError` naming the setting it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

from jobengine.errors import ConfigError

SCHEME: Final = "redis+sentinel://"
DEFAULT_PORT: Final = 26379
FORM: Final = "redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]"

_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>\d{1,5}))?$")
_SERVICE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None


def is_sentinel_url(url: str) -> bool:
    return url[: len(SCHEME)].lower() == SCHEME


def parse_sentinel_url(url: str, setting: str) -> SentinelUrl:
    """The Sentinels, service and db of ``url``; ConfigError (starting with ``setting``) when it is not of
    the form above."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{setting}: {why} (expected {FORM})")

    if not is_sentinel_url(url):
        raise bad(f"not a {SCHEME} URL")
    rest = url[len(SCHEME) :]
    if "?" in rest or "#" in rest:
        raise bad("a Sentinel URL takes no query or fragment")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels: list[tuple[str, int]] = []
    for part in hosts.split(","):
        match = _HOST.match(part.strip())
        if match is None:
            raise bad(f"{part.strip()!r} is not a host[:port]")
        port = int(match["port"]) if match["port"] else DEFAULT_PORT
        if not 1 <= port <= 65535:
            raise bad(f"port {port} is out of range")
        sentinels.append((match["v6"] or match["name"], port))
    service, _, db_text = path.partition("/")
    if not _SERVICE.match(service):
        raise bad("the master's service name (as in `sentinel monitor <service> ...`) is missing or malformed")
    db_text = db_text.rstrip("/")
    if db_text and not db_text.isdigit():
        raise bad(f"the database {db_text!r} is not a number")
    return SentinelUrl(tuple(sentinels), service, int(db_text or 0), username, password)
