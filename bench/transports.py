"""``--transport redis|nats``: a queue of its own for every phase, on the broker the machine runs.

The store stays what ``--backend`` says (the system of record: every job's state is still written there);
the broker only delivers. Each phase gets streams with fresh names (Redis: keys under one prefix in the
URL's database; NATS: streams ``JEB_<id>_*``), removed when the phase ends, so no phase sees another's
messages. The producer and every worker process get the same ``queue:`` settings as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from jobengine.core.queue_config import nats_servers
from jobengine.engine import Engine

TRANSPORTS = ("database", "redis", "nats")
DEFAULT_URLS = {"redis": "redis://127.0.0.1:6379/0", "nats": "nats://127.0.0.1:4222"}


@dataclass(frozen=True, slots=True)
class FreshQueue:
    #: The ``queue:`` settings as JSON (None: the database transport, as before).
    settings: str | None
    #: Removes the phase's streams and keys.
    cleanup: Callable[[], None]


def fresh_queue(transport: str, url: str | None) -> FreshQueue:
    if transport == "database":
        return FreshQueue(None, lambda: None)
    url = url or DEFAULT_URLS[transport]
    tag = os.urandom(4).hex()
    if transport == "redis":
        prefix = f"jeb:{tag}"
        queues = {
            q: {
                "stream": f"{prefix}:{q}",
                "consumerGroup": f"{prefix}:{q}:workers",
                "deadLetterStream": f"{prefix}:{q}:dead",
                "idempotencyKeyPrefix": f"{prefix}:{q}:idemp:",
            }
            for q in ("planner", "runner")
        }
        settings = {"kind": "redis", "redis": {"url": url, **queues}}
        return FreshQueue(json.dumps(settings), lambda: asyncio.run(_drop_redis(url, prefix)))
    name = f"JEB_{tag}"
    queues = {
        q: {
            "stream": f"{name}_{q}",
            "subject": f"jeb.{tag}.{q}",
            "durableConsumer": f"{name}_{q}_workers",
            "deadLetterStream": f"{name}_{q}_DEAD",
            "deadLetterSubject": f"jeb.{tag}.{q}.dead",
        }
        for q in ("planner", "runner")
    }
    streams = [s for q in queues.values() for s in (q["stream"], q["deadLetterStream"])]
    settings = {"kind": "nats", "nats": {"url": url, **queues}}
    return FreshQueue(json.dumps(settings), lambda: asyncio.run(_drop_nats(url, streams)))


async def _drop_redis(url: str, prefix: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
    finally:
        await client.aclose()


async def _drop_nats(url: str, streams: list[str]) -> None:
    import nats

    nc = await nats.connect(nats_servers(url))  # a cluster's servers, as queue.nats.url takes them
    try:
        for stream in streams:
            with contextlib.suppress(Exception):
                await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


async def published(engine: Engine) -> None:
    """Wait until the outbox relay has published every job (a broker only): the process phase starts, as it
    does for the other systems, with every job's message in the broker."""
    relay = engine.transports.relay if engine.settings.queue.broker else None
    if relay is not None:
        await relay.flush()
