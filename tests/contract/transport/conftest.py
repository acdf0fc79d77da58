"""The transport contract suite runs every test once per transport: ``database-sqlite``,
``database-postgres``, ``redis`` and ``nats`` (run one alone with ``-k redis``).

Tests ask for ``make_env``: an async factory of :class:`Env` (a transport on a queue of this test's own, with
the options the test needs). Behaviour that differs by design is written against the transport's declared
capabilities, never against its name. Every queue, stream, key prefix and schema is this test's alone and
is removed afterwards. A service that is down skips its runs locally and fails them under CI.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from jobengine.core.ids import new_job_id
from jobengine.core.models import NewJob
from jobengine.core.queue_config import NatsQueue, RedisQueue
from jobengine.delivery.database import DatabaseTransport
from jobengine.ports.store import Store
from jobengine.ports.transport import Message, Transport, TransportOptions
from support.services import drop_nats_streams, unique_name

KINDS = ("database-sqlite", "database-postgres", "redis", "nats")
JOB_QUEUE = "contract"


class Recorder:
    """Counters that remember (the transport counts into it)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] += n


@dataclass
class Env:
    kind: str
    transport: Transport
    options: TransportOptions
    counters: Recorder
    #: Make messages deliverable: the database inserts jobs (their rows are the messages), brokers publish.
    put: Callable[..., Awaitable[list[Message]]]
    #: Another transport on the same queue (another consumer, e.g. another worker process).
    other: Callable[[], Awaitable[Transport]]
    #: What a subprocess needs to open the same queue (see support/transport_publisher.py).
    spec: dict[str, Any] = field(default_factory=dict)
    store: Store | None = None

    @property
    def caps(self) -> Any:
        return self.transport.capabilities


EnvFactory = Callable[..., Awaitable[Env]]


def _options(counters: Recorder, **overrides: Any) -> TransportOptions:
    base = TransportOptions(lease_seconds=5.0, max_deliveries=5, idempotency_window=60.0, consumer="c1")
    return replace(base, counters=counters, **overrides)


@pytest.fixture(params=KINDS)
async def make_env(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EnvFactory]:
    kind: str = request.param
    closers: list[Callable[[], Awaitable[object]]] = []
    name = unique_name("tq")
    if kind == "database-postgres":
        dsn = request.getfixturevalue("postgres_contract_dsn")
    elif kind == "redis":
        redis_url = request.getfixturevalue("redis_url")
    elif kind == "nats":
        nats_url = request.getfixturevalue("nats_url")

    async def make(**overrides: Any) -> Env:
        counters = Recorder()
        options = _options(counters, **overrides)
        if kind.startswith("database"):
            return await _database(
                kind, options, counters, closers, tmp_path, name, dsn if kind.endswith("postgres") else None
            )
        if kind == "redis":
            return await _redis(redis_url, name, options, counters, closers)
        return await _nats(nats_url, name, options, counters, closers)

    try:
        yield make
    finally:
        for close in reversed(closers):
            await close()


async def _database(
    kind: str, options: TransportOptions, counters: Recorder, closers: list[Any], tmp_path: Path, name: str,
    dsn: str | None,
) -> Env:  # fmt: skip
    store: Any
    if dsn is None:
        from jobengine.backends.sqlite import SqliteStore

        path = str(tmp_path / f"{name}.db")
        store = SqliteStore(path)
        spec: dict[str, Any] = {"kind": "database", "database": path}
    else:
        from jobengine.backends.postgres import PostgresStore

        store = PostgresStore(dsn, schema=name, pool_max=4)
        spec = {"kind": "database", "database": dsn, "schema": name}
        closers.append(store.drop_schema)
    await store.migrate()
    closers.append(store.close)
    transport = DatabaseTransport(store, "runner", [JOB_QUEUE], options)

    async def put(n: int = 1, *, key: str | None = None, run_id: str | None = None, data: Any = None) -> list[Message]:
        jobs = [NewJob(task="contract.task", queue=JOB_QUEUE, payload=data, max_attempts=options.max_deliveries,
                       idempotency_key=key) for _ in range(n)]  # fmt: skip
        inserted = await store.insert_jobs(jobs, time.time(), [()] * n)
        return [Message(j.id, j.queue) for j in inserted.jobs]

    async def other() -> Transport:
        return DatabaseTransport(store, "runner", [JOB_QUEUE], replace(options, consumer="c2"))

    return Env(kind, transport, options, counters, put, other, spec, store)


def _broker_put(transport: Transport) -> Callable[..., Awaitable[list[Message]]]:
    async def put(
        n: int = 1,
        *,
        key: str | None = None,
        run_id: str | None = None,
        schedule_id: str | None = None,
        data: Any = None,
    ) -> list[Message]:
        messages = [Message(new_job_id(), JOB_QUEUE, key=key, run_id=run_id, schedule_id=schedule_id, data=data)
                    for _ in range(n)]  # fmt: skip
        await transport.publish(messages)
        return messages

    return put


async def _redis(url: str, name: str, options: TransportOptions, counters: Recorder, closers: list[Any]) -> Env:
    from jobengine.backends.redis import RedisTransport

    config = RedisQueue(f"{name}:s", f"{name}-g", f"{name}:dead", f"{name}:idem:")
    transport = RedisTransport(url, "runner", config, options)
    closers.append(transport.close)

    async def other() -> Transport:
        t = RedisTransport(url, "runner", config, replace(options, consumer="c2"))
        closers.append(t.close)
        return t

    spec = {"kind": "redis", "url": url, "config": [config.stream, config.consumer_group, config.dead_letter_stream,
                                                    config.idempotency_key_prefix]}  # fmt: skip
    return Env("redis", transport, options, counters, _broker_put(transport), other, spec)


async def _nats(url: str, name: str, options: TransportOptions, counters: Recorder, closers: list[Any]) -> Env:
    from jobengine.backends.nats import NatsTransport

    config = NatsQueue(name, f"{name}.jobs", f"{name}-c", f"{name}_DEAD", f"{name}.dead")
    transport = NatsTransport(url, "runner", config, options)

    closers.append(functools.partial(drop_nats_streams, url, (config.stream, config.dead_letter_stream)))
    closers.append(transport.close)

    async def other() -> Transport:
        t = NatsTransport(url, "runner", config, replace(options, consumer="c2"))
        closers.append(t.close)
        return t

    spec = {"kind": "nats", "url": url, "config": [config.stream, config.subject, config.durable_consumer,
                                                   config.dead_letter_stream, config.dead_letter_subject]}  # fmt: skip
    return Env("nats", transport, options, counters, _broker_put(transport), other, spec)


async def receive_all(transport: Transport, want: int, timeout: float = 5.0) -> list[Any]:
    """Receive until ``want`` deliveries arrived or ``timeout`` passed."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += await transport.receive(want - len(got), wait=min(0.5, max(0.01, deadline - time.monotonic())))
    return got


def ids(deliveries: Sequence[Any]) -> list[str]:
    return sorted(d.message.id for d in deliveries)


async def depth_settles_at(transport: Transport, n: int, timeout: float = 3.0) -> int:
    """The transport's depth once it reads ``n`` (or whatever it reads at ``timeout``). A depth is allowed to
    lag a settle by a moment: JetStream applies acks asynchronously, after the publish that carried them."""
    depth = await transport.depth()
    for _ in range(int(timeout / 0.02)):
        if depth == n:
            break
        await asyncio.sleep(0.02)
        depth = await transport.depth()
    return depth
