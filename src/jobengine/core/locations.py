"""Where a store or a transport is, said without its secrets: for a worker's start-up log and anything else that
shows a ``database`` setting or a broker URL to a person.

A URL keeps its user and loses its password (``postgresql://app:***@db/jobs``); a ``password=`` parameter,
in a query string or a key/value DSN (``host=db password=s3cret``), keeps its name only. Usage::

    describe_store("postgresql://app:s3cret@db/jobs", "jobengine")
    # 'postgres postgresql://app:***@db/jobs (schema jobengine)'
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from jobengine.core.queue_config import QueueConfig, nats_servers

_SECRET_PARAM = re.compile(r"(?i)\b(password|passwd|pwd|token|secret)=([^&\s]*)")
HIDDEN = "***"


def redact_url(location: str) -> str:
    """``location`` with any password replaced by ``***``; text that is not a URL only loses ``password=``
    values."""
    text = _SECRET_PARAM.sub(lambda m: f"{m.group(1)}={HIDDEN}", location)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        password = parts.password
    except ValueError:  # an unparsable netloc (a bad port): show none of it
        scheme = text.split("://", 1)[0]
        return f"{scheme}://{HIDDEN}"
    if password is None:
        return text
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{HIDDEN}@{host}"))


def redact_servers(url: str) -> str:
    """A ``nats.url`` of several comma-separated servers, each without its password."""
    return ",".join(redact_url(u) for u in nats_servers(url))


def describe_store(database: str, postgres_schema: str = "jobengine") -> str:
    """The kind of store a ``database`` setting names and where it is: ``sqlite ./jobengine.db``,
    ``postgres postgresql://app:***@db/jobs (schema jobengine)``, ``sqlite memory (a temporary file)``."""
    if database == "memory":
        return "sqlite memory (a temporary file)"
    if database.startswith(("postgres://", "postgresql://")):
        return f"postgres {redact_url(database)} (schema {postgres_schema})"
    return f"sqlite {database.removeprefix('sqlite:///').removeprefix('sqlite://')}"


def describe_transport(queue: QueueConfig) -> str:
    """What delivers jobs to workers: ``database (the store)``, ``redis redis://...``, ``nats nats://...``."""
    if queue.kind == "redis":
        return f"redis {redact_url(queue.redis.url)} (stream {queue.redis.runner.stream})"
    if queue.kind == "nats":
        return f"nats {redact_servers(queue.nats.url)} (stream {queue.nats.runner.stream})"
    return "database (the store)"
