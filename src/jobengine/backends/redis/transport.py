"""The Redis (and Valkey) transport: a Stream with a consumer group per logical queue.

Usage::

    transport = RedisTransport("redis://127.0.0.1:6379/0", "runner", RedisQueue(...), TransportOptions())
    await transport.publish([Message(job.id, job.queue)])
    for d in await transport.receive(100, wait=1.0):
        ...
        await transport.ack([d])

- **publish**: ``SET NX PX`` of ``<idempotencyKeyPrefix><key>`` and ``XADD`` in one script, so a key
  repeated within the idempotency window adds nothing (and a crash between the two cannot happen).
- **receive**: ``XREADGROUP >`` (blocking up to ``wait``) for new entries; about four times a second a
  script also moves due delayed retries back into the stream and takes over, with ``XAUTOCLAIM``, entries
  whose lease (their idle time in the group's pending list) expired: those are delivered again.
- **extend**: ``XCLAIM ... JUSTID`` resets an entry's idle time without counting a delivery.
- **ack**: ``XACK`` and ``XDEL``, so the stream holds only what is not settled (``XLEN`` is the depth).
- **retry**: settle the entry and add it again (now, or into a sorted set of delayed retries), carrying the
  number of deliveries so far in its ``d`` field, so a retried message keeps counting towards
  ``maxDeliveryAttempts``.
- **dead_letter**: one script appends the entry to the dead-letter stream, with the run id, schedule id and
  reason as fields named like the NATS headers, and settles it.

Durability is Redis's: acknowledged writes survive a crash with ``appendonly yes`` and ``appendfsync
always``; with less, a crash can lose recent messages (never jobs: the store has them, and the relay's sweep
publishes overdue ones again). A single Redis (or one with all these keys in one hash slot) is assumed:
the scripts touch two keys at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from redis import exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from jobengine.backends.broker import deliverable, settle_exhausted
from jobengine.core.locations import redact_url
from jobengine.core.queue_config import RedisQueue
from jobengine.errors import TransportError, TransportUnavailable
from jobengine.ports.transport import (
    DeadLetter,
    Delivery,
    Health,
    Message,
    TransportCapabilities,
    TransportOptions,
)

from . import scripts
from .client import open_client

log = logging.getLogger("jobengine.transport.redis")

_MAINTAIN_EVERY = 0.25  # seconds between promotions of due retries and take-overs of expired leases
_ORPHANS_EVERY = 0.5  # seconds between looks for consumers whose process is gone
_ORPHAN_GRACE = 1.0  # a consumer absent this long (at two looks) is gone, not reconnecting
_HISTORY_EVERY = 1.0  # seconds between looks at which server (and which history of it) answers
_PUBLISH_CHUNK = 500  # messages per publish script call: one call holds Redis for its whole length


class RedisTransport:
    capabilities = TransportCapabilities(
        name="redis",
        broker=True,
        dedupe=True,
        dead_letter_stream=True,
        message_headers=True,
        blocking_receive=True,
        consumer_presence=True,
        history_checks=True,
    )

    def __init__(
        self,
        url: str,
        queue: str,
        config: RedisQueue,
        options: TransportOptions | None = None,
        *,
        client: Redis | None = None,
    ) -> None:
        self.url = url
        self._shown = redact_url(url)  # for messages and logs: a URL may carry the servers' password
        self.queue = queue
        self.config = config
        self.options = options or TransportOptions()
        # Our own client carries the consumer's name on every connection: a consumer with pending entries and
        # no connection of that name is a process that is gone (see _orphans).
        self._redis = client if client is not None else connect(url, self.options.consumer)
        self._own_client = client is None
        self._look_for_orphans = client is None
        self._next_orphans = 0.0
        self._check_history = True
        self._next_history = 0.0
        self._history: str | None = None  # "<run id>:<replication id>" of the server last looked at
        self._absent: dict[str, float] = {}  # consumer -> first seen without a connection (monotonic)
        self._stream = config.stream
        self._delayed = f"{config.stream}:delayed"
        self._group = config.consumer_group
        self._publish = self._redis.register_script(scripts.PUBLISH)
        self._maintain = self._redis.register_script(scripts.MAINTAIN)
        self._retry = self._redis.register_script(scripts.RETRY)
        self._dead = self._redis.register_script(scripts.DEAD_LETTER)
        self._ready = False
        self._cursor: bytes = b"0-0"
        self._next_maintenance = 0.0

    # -- plumbing -----------------------------------------------------------------------------------
    @asynccontextmanager
    async def _errors(self, doing: str) -> AsyncIterator[None]:
        try:
            yield
        except (rx.ConnectionError, rx.TimeoutError, OSError) as exc:
            raise TransportUnavailable(f"redis {self._shown}: {doing}: {exc}") from exc
        except rx.ReadOnlyError as exc:
            # A replica, or a master demoted by a failover: the master is elsewhere, so this is the broker
            # being away (the caller retries; a Sentinel client finds the new master), not a refusal.
            raise TransportUnavailable(f"redis {self._shown}: {doing}: {exc}") from exc
        except rx.ResponseError as exc:
            if "NOGROUP" in str(exc):
                self._ready = False  # the stream or group is gone (a Redis without persistence restarted)
            raise TransportError(f"redis {self._shown}: {doing}: {exc}") from exc
        except rx.RedisError as exc:
            raise TransportError(f"redis {self._shown}: {doing}: {exc}") from exc

    async def _ensure(self) -> None:
        if self._ready:
            return
        async with self._errors("creating the consumer group"):
            try:
                await self._redis.xgroup_create(self._stream, self._group, id="0", mkstream=True)
            except rx.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._ready = True

    def _lease_ms(self) -> int:
        return max(1, int(self.options.lease_seconds * 1000))

    def _delivery(self, entry_id: bytes, fields: Any, times: int, now: float, invalid: list[str]) -> Delivery | None:
        """The delivery of a stream entry; None (its id added to ``invalid``) when it holds no message."""
        if isinstance(fields, list):  # from the script: a flat field / value list
            fields = dict(zip(fields[::2], fields[1::2], strict=True))
        body = fields.get(b"m", b"")
        before = int(fields.get(b"d", b"0") or 0)
        try:
            message = Message.from_body(body)
        except ValueError:
            log.error("redis %s: entry %s is not a jobengine message; dropping it", self._stream, entry_id)
            invalid.append(entry_id.decode())
            return None
        return Delivery(message, entry_id.decode(), before + int(times), now + self.options.lease_seconds, body)

    # -- the port -----------------------------------------------------------------------------------
    async def publish(self, messages: Sequence[Message]) -> list[bool]:
        if not messages:
            return []
        await self._ensure()
        window = max(1, int(self.options.idempotency_window * 1000))
        prefix = self.config.idempotency_key_prefix
        added: list[bool] = []
        async with self._errors("publishing"):
            # One script call per chunk: a script in a pipeline would cost redis-py a SCRIPT EXISTS round
            # trip on every execute.
            for at in range(0, len(messages), _PUBLISH_CHUNK):
                chunk = messages[at : at + _PUBLISH_CHUNK]
                keys = [self._stream, *(prefix + m.dedupe_key for m in chunk)]
                added += [bool(x) for x in await self._publish(keys=keys, args=[window, *(m.body() for m in chunk)])]
        n = sum(added)
        self.options.counters.count("enqueued", n)
        if n < len(added):
            self.options.counters.count("deduplicated", len(added) - n)
        return added

    async def receive(self, limit: int, wait: float = 0.0) -> list[Delivery]:
        if limit <= 0:
            return []
        await self._ensure()
        deadline = time.monotonic() + wait
        while True:
            live = await self._receive_once(limit, max(0.0, deadline - time.monotonic()))
            if live or time.monotonic() >= deadline:
                return live

    async def _receive_once(self, limit: int, wait: float) -> list[Delivery]:
        got: list[Delivery] = []
        invalid: list[str] = []
        now = time.time()
        if now >= self._next_maintenance:
            got += await self._maintenance(limit, now, invalid)
        if len(got) < limit:
            block = None
            if not got and wait > 0:
                # Never past the next maintenance: a due retry or an expired lease must not wait on us.
                block = max(1, int(1000 * min(wait, max(0.0, self._next_maintenance - now))))
            async with self._errors("reading"):
                resp: Any = await self._redis.xreadgroup(
                    self._group, self.options.consumer, {self._stream: ">"}, count=limit - len(got), block=block
                )
            now = time.time()
            for _stream, entries in resp or []:
                for entry_id, fields in entries:
                    if fields and (d := self._delivery(entry_id, fields, 1, now, invalid)) is not None:
                        got.append(d)  # (an entry deleted while pending reads back without fields)
        if invalid:
            await self._settle(invalid)
        return await deliverable(self.options, got, dead_letter=self._dead_letter, ack=self.ack)

    async def _maintenance(self, limit: int, now: float, invalid: list[str]) -> list[Delivery]:
        self._next_maintenance = now + _MAINTAIN_EVERY
        args: list[Any] = [self._group, self.options.consumer, self._lease_ms(), limit, int(now * 1000), self._cursor]
        async with self._errors("maintenance"):
            result: Any = await self._maintain(keys=[self._stream, self._delayed], args=args)
        _moved, cursor, claimed, next_due = result
        self._cursor = cursor
        if next_due:
            self._next_maintenance = min(self._next_maintenance, float(next_due) / 1000)
        out = [d for e in claimed if (d := self._delivery(e[0], e[1], int(e[2]), now, invalid)) is not None]
        if out:
            self.options.counters.count("lease_expired", len(out))
        if self._check_history and time.monotonic() >= self._next_history:
            await self._look_at_history()
        if self._look_for_orphans and len(out) < limit and time.monotonic() >= self._next_orphans:
            self._next_orphans = time.monotonic() + _ORPHANS_EVERY
            out += await self._orphans(limit - len(out), now, invalid)
        return out

    async def _look_at_history(self) -> None:
        """Tell ``options.new_history`` when the server answering is another process (a restart: a new run id)
        or has another history (a promoted replica: a new replication id) than at the last look. Replication
        is asynchronous and a restart keeps only what was synced to disk, so what the old one took in its last
        moments (messages, acknowledgements) may be gone. A Redis that refuses ``INFO`` is not looked at."""
        self._next_history = time.monotonic() + _HISTORY_EVERY
        async with self._errors("reading the server's identity"):
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.info("server")
                    pipe.info("replication")
                    server, replication = await pipe.execute()
            except rx.ResponseError as exc:
                log.warning("redis %s: INFO refused (%s); a failover or restart goes unnoticed", self._shown, exc)
                self._check_history = False
                return
        history = f"{server.get('run_id', '')}:{replication.get('master_replid', '')}"
        if self._history is not None and history != self._history:
            log.warning("redis %s: the server failed over or restarted; what it took in its last moments may be "
                        "lost, so runnable jobs are published again", self._shown)  # fmt: skip
            self.options.counters.count("history_changed")
            if self.options.new_history is not None:
                self.options.new_history(history)
        self._history = history

    async def _orphans(self, limit: int, now: float, invalid: list[str]) -> list[Delivery]:
        """Entries pending on consumers whose process is gone, taken over now rather than after their
        lease: a consumer with pending entries and no connection under its name, at two looks at least
        ``_ORPHAN_GRACE`` apart (a connection that drops and comes back is a consumer reconnecting). A
        Redis that refuses ``CLIENT LIST`` (an ACL) leaves them to their lease."""
        ours = self.options.consumer
        async with self._errors("looking for gone consumers"):
            consumers: Any = await self._redis.xinfo_consumers(self._stream, self._group)
            pending = [_text(c["name"]) for c in consumers if int(c["pending"]) > 0 and _text(c["name"]) != ours]
            if not pending:
                self._absent = {}
                return []
            try:
                clients: Any = await self._redis.client_list()
            except rx.ResponseError as exc:
                log.warning("redis %s: CLIENT LIST refused (%s); a gone consumer's entries wait for their "
                            "lease", self._shown, exc)  # fmt: skip
                self._look_for_orphans = False
                return []
        present = {_text(c.get("name", "")) for c in clients}
        seen = time.monotonic()
        absent = {name: self._absent.get(name, seen) for name in pending if name not in present}
        self._absent = absent
        gone = [name for name, first in absent.items() if seen - first >= _ORPHAN_GRACE]
        out: list[Delivery] = []
        for name in gone:
            if len(out) >= limit:
                break
            async with self._errors("taking over a gone consumer's entries"):
                rows: Any = await self._redis.xpending_range(
                    self._stream, self._group, "-", "+", limit - len(out), consumername=name
                )
                times = {_text(r["message_id"]): int(r["times_delivered"]) for r in rows}
                entries: Any = (
                    await self._redis.xclaim(self._stream, self._group, ours, 0, list(times)) if times else []
                )
                if len(rows) < limit - len(out):
                    await self._redis.xgroup_delconsumer(self._stream, self._group, name)
                    self._absent.pop(name, None)
            for entry_id, fields in entries:
                d = (
                    self._delivery(entry_id, fields, times.get(_text(entry_id), 0) + 1, now, invalid)
                    if fields
                    else None
                )
                if d is not None:
                    out.append(d)
        if out:
            log.info("redis %s: took over %d entries of consumers that are gone", self._stream, len(out))
            self.options.counters.count("orphans_taken", len(out))
        return out

    async def extend(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        async with self._errors("extending leases"):
            await self._redis.xclaim(
                self._stream, self._group, self.options.consumer, 0, [d.receipt for d in deliveries], justid=True
            )

    async def _settle(self, receipts: Sequence[str]) -> None:
        async with self._errors("acknowledging"), self._redis.pipeline(transaction=False) as pipe:
            pipe.xack(self._stream, self._group, *receipts)
            pipe.xdel(self._stream, *receipts)
            await pipe.execute()

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        await self._settle([d.receipt for d in deliveries])
        self.options.counters.count("acked", len(deliveries))

    async def _requeue(self, deliveries: Sequence[Delivery], made: Callable[[Delivery], int], delay: float) -> None:
        due = 0 if delay <= 0 else int((time.time() + delay) * 1000)
        args: list[Any] = [self._group]
        for d in deliveries:
            args += [d.receipt, made(d), d.body, due]
        async with self._errors("retrying"):
            await self._retry(keys=[self._stream, self._delayed], args=args)
        if due:
            # A due time sooner than our next maintenance pulls it in.
            self._next_maintenance = min(self._next_maintenance, due / 1000)

    async def retry(self, deliveries: Sequence[Delivery], delay: float) -> None:
        last = [d for d in deliveries if d.attempt >= self.options.max_deliveries]
        again = [d for d in deliveries if d.attempt < self.options.max_deliveries]
        if again:
            await self._requeue(again, lambda d: d.attempt, delay)
            self.options.counters.count("retried", len(again))
        await settle_exhausted(
            self.options, last, made=lambda d: d.attempt, dead_letter=self._dead_letter, ack=self.ack
        )

    async def release(self, deliveries: Sequence[Delivery], delay: float = 0.0) -> None:
        if deliveries:
            await self._requeue(deliveries, lambda d: d.attempt - 1, delay)

    async def dead_letter(self, deliveries: Sequence[Delivery], reason: str) -> None:
        await self._dead_letter(deliveries, reason, lambda d: d.attempt)

    async def _dead_letter(self, deliveries: Sequence[Delivery], reason: str, made: Callable[[Delivery], int]) -> None:
        if not deliveries:
            return
        if not self.options.dead_letter:
            await self._settle([d.receipt for d in deliveries])
            self.options.counters.count("dropped", len(deliveries))
            return
        args: list[Any] = [self._group]
        for d in deliveries:
            fields: list[Any] = ["m", d.body]
            for name, value in d.message.dead_letter_headers(reason, made(d)).items():
                fields += [name, value]
            args += [d.receipt, len(fields) // 2, *fields]
        async with self._errors("dead-lettering"):
            await self._dead(keys=[self._stream, self.config.dead_letter_stream], args=args)
        self.options.counters.count("dead_lettered", len(deliveries))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        async with self._errors("reading the dead-letter stream"):
            entries: Any = await self._redis.xrange(self.config.dead_letter_stream, count=limit)
        out = []
        for _id, fields in entries:
            body = fields.get(b"m", b"")
            headers = {k.decode(): v.decode() for k, v in fields.items() if k != b"m"}
            out.append(DeadLetter(Message.from_body(body), headers, body))
        return out

    async def depth(self) -> int:
        await self._ensure()
        async with self._errors("measuring depth"), self._redis.pipeline(transaction=False) as pipe:
            pipe.xlen(self._stream)
            pipe.zcard(self._delayed)
            waiting, delayed = await pipe.execute()
        return int(waiting) + int(delayed)

    async def health(self) -> Health:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(5):
                await self._ensure()
                async with self._errors("ping"):
                    await self._redis.ping()
        except (TransportError, TimeoutError) as exc:
            return Health("redis", self.queue, False, 1000 * (time.perf_counter() - started), str(exc) or "timeout")
        detail = f"stream {self._stream}, group {self._group}"
        return Health("redis", self.queue, True, 1000 * (time.perf_counter() - started), detail)

    async def close(self) -> None:
        if self._own_client:
            await self._redis.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def connect(url: str, name: str | None = None) -> Redis:
    """A client that fails fast while Redis is down (a couple of quick retries, then TransportUnavailable to the
    caller, whose loop retries with its own backoff) instead of blocking its caller for seconds. ``name``
    names each of its connections (``CLIENT SETNAME``). ``url`` is one server or a ``redis+sentinel://``
    master (:mod:`jobengine.backends.redis.client`)."""
    return open_client(
        url,
        "queue.redis.url",
        client_name=name,
        decode_responses=False,
        socket_connect_timeout=2.0,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        retry_on_error=[rx.ConnectionError],
        health_check_interval=15,
    )
