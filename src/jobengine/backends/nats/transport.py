"""The NATS JetStream transport: a work-queue stream and a durable pull consumer per logical queue.

Usage::

    transport = NatsTransport("nats://127.0.0.1:4222", "runner", NatsQueue(...), TransportOptions())
    await transport.publish([Message(job.id, job.queue)])
    for d in await transport.receive(100, wait=1.0):
        ...
        await transport.ack([d])

- **streams** (created if missing, file storage, ``replicas`` copies on a cluster's servers): the queue's
  stream holds its subject with work-queue retention (a message is removed once acknowledged) and a
  ``duplicate_window`` of the idempotency window;
  the dead-letter stream holds the dead-letter subject with limits retention. JetStream has no dead-letter
  stream of its own: the engine publishes to this one.
- **consumer**: durable, pull, explicit acks, ``AckWait`` = the lease, ``MaxDeliver`` = maxDeliveryAttempts
  + 3. The engine itself dead-letters at delivery maxDeliveryAttempts + 1 (see ``backends/broker.py``);
  the spare deliveries let a process that died while dead-lettering be replaced, and beyond them JetStream
  stops (the message stays in the stream, counted in the depth, and JetStream sends its MAX_DELIVERIES
  advisory).
- **publish**: ``Nats-Msg-Id`` = the message key, so a key repeated within the duplicate window is stored
  once (the PubAck says ``duplicate``); a batch is published asynchronously and its acks awaited together.
- **extend**: an in-progress ack (``+WPI``) restarts AckWait. **retry**: ``-NAK`` with a delay (counts a
  delivery, as JetStream counts every one). **ack**: ``+ACK``. **dead_letter**: publish to the dead-letter
  subject with the headers (``Nats-Msg-Id`` = the stream sequence, so a repeat is stored once), then
  ``+TERM``.

Acks travel as plain publishes to the delivery's reply subject; one lost with a connection is harmless (the
message is delivered again and its job, already finished in the store, is not claimed twice).
The client reconnects on its own, forever, to any server of ``url`` (one, or a cluster's comma-separated);
while it is away, or while a cluster elects the leader of the stream or the consumer, calls raise
TransportUnavailable.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import nats
import nats.errors as nerr
import nats.js.errors as jerr
from nats.aio.client import NO_RESPONDERS_STATUS, Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api

from jobengine.backends.broker import deliverable, settle_exhausted
from jobengine.core.locations import redact_servers
from jobengine.core.queue_config import NatsQueue, nats_servers
from jobengine.errors import TransportError, TransportUnavailable
from jobengine.ports.transport import (
    DeadLetter,
    Delivery,
    Health,
    Message,
    TransportCapabilities,
    TransportOptions,
)

log = logging.getLogger("jobengine.transport.nats")

_MSG_ID = "Nats-Msg-Id"
_SPARE_DELIVERIES = 3
_NOT_CONNECTED = (
    nerr.ConnectionClosedError,
    nerr.NoServersError,
    nerr.OutboundBufferLimitError,
    nerr.StaleConnectionError,
    nerr.UnexpectedEOF,
    ConnectionError,
    OSError,
)
# No server answered for a stream or an API (503): in a cluster, the group that serves it has no leader
# while it elects one, or has lost its quorum. Both pass; the caller retries, as with a broker away.
_NO_LEADER = (nerr.NoRespondersError, jerr.NoStreamResponseError, jerr.ServiceUnavailableError)


def _num_delivered(reply: str) -> int:
    """The delivery count in a JetStream ack subject:
    ``$JS.ACK[.<domain>.<account hash>].<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>``."""
    return int(reply.split(".")[-5])


def _stream_seq(reply: str) -> int:
    return int(reply.split(".")[-4])


class NatsTransport:
    capabilities = TransportCapabilities(
        name="nats", broker=True, dedupe=True, dead_letter_stream=True, message_headers=True, blocking_receive=True
    )

    def __init__(
        self,
        url: str,
        queue: str,
        config: NatsQueue,
        options: TransportOptions | None = None,
        *,
        max_ack_pending: int = 20_000,
        replicas: int = 1,
        connect_timeout: float = 2.0,
    ) -> None:
        self.url = url
        self.servers = nats_servers(url)
        self._shown = redact_servers(url)  # for messages and logs
        self.queue = queue
        self.config = config
        self.options = options or TransportOptions()
        self._max_ack_pending = max_ack_pending
        self._replicas = replicas
        self._connect_timeout = connect_timeout
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._sub: Subscription | None = None  # our inbox, where pulled messages arrive
        self._inbox = ""
        self._ack_inbox = ""  # where JetStream sends the PubAcks of our publishes: <inbox>.<token>
        self._acks: dict[str, asyncio.Future[bool]] = {}  # token -> the publish waiting for its PubAck
        self._next_token = 0
        self._arrivals: collections.deque[Msg] = collections.deque()  # what arrived there, not yet taken
        self._arrived = asyncio.Event()
        self._reconnected = asyncio.Event()  # set (and replaced) at each reconnect
        self._setup = asyncio.Lock()
        self._fetching = asyncio.Lock()
        self._closed = False
        self._retried: dict[int, int] = {}  # stream sequence -> attempt this process retried (oldest first)

    # -- plumbing -----------------------------------------------------------------------------------
    @asynccontextmanager
    async def _errors(self, doing: str) -> AsyncIterator[None]:
        try:
            yield
        except TransportError:
            raise
        except (*_NOT_CONNECTED, *_NO_LEADER, nerr.TimeoutError, TimeoutError) as exc:
            raise TransportUnavailable(f"nats {self._shown}: {doing}: {type(exc).__name__} {exc}") from exc
        except (nerr.Error, jerr.Error) as exc:
            raise TransportError(f"nats {self._shown}: {doing}: {type(exc).__name__} {exc}") from exc

    async def _connect(self) -> tuple[Client, JetStreamContext]:
        if self._nc is not None and self._js is not None and not self._nc.is_closed:
            return self._nc, self._js
        async with self._setup:
            if self._nc is None or self._nc.is_closed or self._js is None:
                if self._closed:
                    raise TransportUnavailable(f"nats {self._shown}: the transport is closed")
                async with self._errors("connecting"):
                    async with asyncio.timeout(self._connect_timeout * 2):
                        nc = await nats.connect(
                            self.servers,
                            name=f"jobengine-{self.queue}",
                            connect_timeout=self._connect_timeout,
                            allow_reconnect=True,
                            max_reconnect_attempts=-1,
                            reconnect_time_wait=0.2,
                            ping_interval=5,
                            max_outstanding_pings=2,
                            error_cb=self._on_error,
                            disconnected_cb=self._on_disconnect,
                            reconnected_cb=self._on_reconnect,
                        )
                self._nc, self._js = nc, nc.jetstream(timeout=5.0)
                try:
                    await self._declare(self._js)
                except BaseException:
                    self._nc, self._js = None, None
                    await nc.close()
                    raise
        assert self._nc is not None and self._js is not None
        return self._nc, self._js

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats %s: %s", self._shown, exc)

    async def _on_disconnect(self) -> None:
        # A connection this transport is closing (at close, or after a failed connect) drops by intent.
        if not self._closed and self._nc is not None:
            log.warning("nats %s: disconnected; reconnecting", self._shown)

    async def _on_reconnect(self) -> None:
        # Wakes the flushes waiting on the lost connection (see _flushed); later ones wait on a new event.
        self._reconnected.set()
        self._reconnected = asyncio.Event()
        log.info("nats %s: reconnected", self._shown)

    async def _declare(self, js: JetStreamContext) -> None:
        """Create the streams and the durable consumer if they are missing (an existing one is left as it is)."""
        c = self.config
        async with self._errors("declaring streams"):
            for name, subject, retention in (
                (c.stream, c.subject, api.RetentionPolicy.WORK_QUEUE),
                (c.dead_letter_stream, c.dead_letter_subject, api.RetentionPolicy.LIMITS),
            ):
                config = api.StreamConfig(
                    name=name, subjects=[subject], retention=retention, storage=api.StorageType.FILE,
                    duplicate_window=self.options.idempotency_window, num_replicas=self._replicas,
                )  # fmt: skip
                await self._ensure_stream(js, config)
            consumer = api.ConsumerConfig(
                durable_name=c.durable_consumer,
                ack_policy=api.AckPolicy.EXPLICIT,
                ack_wait=self.options.lease_seconds,
                max_deliver=self.options.max_deliveries + _SPARE_DELIVERIES,
                max_ack_pending=self._max_ack_pending,
                filter_subject=c.subject,
                deliver_policy=api.DeliverPolicy.ALL,
            )
            try:
                info = await js.consumer_info(c.stream, c.durable_consumer)
            except jerr.NotFoundError:
                await js.add_consumer(c.stream, consumer)
            else:
                have = info.config
                if (have.ack_wait, have.max_deliver) != (consumer.ack_wait, consumer.max_deliver):
                    log.warning(
                        "nats consumer %s has AckWait %ss / MaxDeliver %s; the settings ask %ss / %s (delete the "
                        "consumer to apply them)", c.durable_consumer, have.ack_wait, have.max_deliver,
                        consumer.ack_wait, consumer.max_deliver,
                    )  # fmt: skip
            assert self._nc is not None
            inbox = self._nc.new_inbox()
            # A callback, not next_msg(): next_msg costs a task per message (wait_for), ours a deque append.
            self._sub = await self._nc.subscribe(inbox, cb=self._arrive, pending_msgs_limit=1_000_000)
            self._inbox = inbox
            self._ack_inbox = self._nc.new_inbox() + "."
            await self._nc.subscribe(self._ack_inbox + "*", cb=self._acked, pending_msgs_limit=1_000_000)

    async def _acked(self, msg: Msg) -> None:
        """A PubAck (or JetStream's refusal) of a publish of ours: settles the publish's future."""
        future = self._acks.get(msg.subject[len(self._ack_inbox) :])
        if future is None or future.done():
            return  # its publish gave up (timed out, cancelled)
        if msg.headers and msg.headers.get(api.Header.STATUS) == NO_RESPONDERS_STATUS:
            future.set_exception(jerr.NoStreamResponseError())  # no stream (or no leader of it) holds the subject
            return
        try:
            answer = json.loads(msg.data)
        except ValueError as exc:
            future.set_exception(TransportError(f"nats {self._shown}: publishing: a PubAck that is not JSON ({exc})"))
            return
        if "error" not in answer:
            future.set_result(bool(answer.get("duplicate")))
            return
        try:
            jerr.APIError.from_error(answer["error"])  # raises the error's own class (503: no leader, ...)
        except jerr.Error as exc:
            future.set_exception(exc)

    @staticmethod
    async def _ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
        assert config.name is not None
        try:
            info = await js.stream_info(config.name)
        except jerr.NotFoundError:
            try:
                await js.add_stream(config)
            except jerr.BadRequestError as exc:  # created by another process in between
                if exc.err_code != 10058:
                    raise
        else:
            if (info.config.num_replicas or 1) != config.num_replicas:
                log.warning(
                    "nats stream %s has %s replica(s); the settings ask %s (update the stream to apply them)",
                    config.name, info.config.num_replicas or 1, config.num_replicas,
                )  # fmt: skip

    def _delivery(self, msg: Any, now: float, invalid: list[str]) -> Delivery | None:
        body = bytes(msg.data)
        try:
            message = Message.from_body(body)
        except ValueError:
            log.error("nats %s: a message that is not a jobengine message; dropping it", self.config.stream)
            invalid.append(msg.reply)
            return None
        return Delivery(message, msg.reply, _num_delivered(msg.reply), now + self.options.lease_seconds, body)

    async def _reply(self, deliveries: Sequence[Delivery], payload: bytes, doing: str) -> None:
        """Send an ack of some kind for each delivery, then one PING round trip: the server handles a
        connection's messages in order, so once it answers, the acks are applied (depth reflects them).

        When the connection is lost and replaced before the answer, what it carried may be lost with it:
        the acks are sent once more over the new one (a repeated ack changes nothing)."""
        if not deliveries:
            return
        nc, _ = await self._connect()
        async with self._errors(doing):
            for _ in range(2):
                reconnected = self._reconnected
                for d in deliveries:
                    await nc.publish(d.receipt, payload)
                if await self._flushed(nc, reconnected):
                    return
            raise TransportUnavailable(f"nats {self._shown}: {doing}: the connection was lost twice meanwhile")

    @staticmethod
    async def _flushed(nc: Client, reconnected: asyncio.Event) -> bool:
        """One PING round trip; False when the client reconnected first. (nats-py forgets a PING sent on a
        lost connection: its flush would wait out its whole timeout, then fail.)"""
        flush = asyncio.ensure_future(nc.flush(timeout=5))
        lost = asyncio.ensure_future(reconnected.wait())
        try:
            await asyncio.wait({flush, lost}, return_when=asyncio.FIRST_COMPLETED)
            if flush.done():
                flush.result()  # its error, if it failed
                return True
            return False
        finally:
            for waiting in (flush, lost):  # a cancelled task leaves no error behind to be reported
                waiting.cancel()

    # -- the port -----------------------------------------------------------------------------------
    async def publish(self, messages: Sequence[Message]) -> list[bool]:
        if not messages:
            return []
        nc, _ = await self._connect()
        loop = asyncio.get_running_loop()
        subject, prefix, acks = self.config.subject, self._ack_inbox, self._acks
        tokens: list[str] = []
        try:
            async with self._errors("publishing"):
                # JetStream answers each publish with its PubAck on the reply subject: ours, one token per message
                # (nats-py's publish_async does the same with a semaphore, a wait_for and two ids per message).
                for m in messages:
                    self._next_token += 1
                    token = str(self._next_token)
                    acks[token] = loop.create_future()
                    tokens.append(token)
                    await nc.publish(subject, m.body(), reply=prefix + token, headers={_MSG_ID: m.dedupe_key})
                async with asyncio.timeout(10.0):
                    answers = await asyncio.gather(*(acks[t] for t in tokens))
        finally:
            for token in tokens:
                acks.pop(token, None)
        added = [not duplicate for duplicate in answers]
        n = sum(added)
        self.options.counters.count("enqueued", n)
        if n < len(added):
            self.options.counters.count("deduplicated", len(added) - n)
        return added

    async def receive(self, limit: int, wait: float = 0.0) -> list[Delivery]:
        if limit <= 0:
            return []
        await self._connect()
        async with self._fetching, self._errors("receiving"):
            msgs = await self._pull(limit, wait)
        now = time.time()
        invalid: list[str] = []
        got = [d for m in msgs if (d := self._delivery(m, now, invalid)) is not None]
        if invalid:
            nc, _ = await self._connect()
            for reply in invalid:
                await nc.publish(reply, b"+TERM")
        expired = 0
        for i, d in enumerate(got):
            retried = self._retried.pop(_stream_seq(d.receipt), None)
            if retried is None:
                # A redelivery that none of our own retries asked for: a lease expired (somewhere; naks by
                # other processes are counted too, which is the price of asking no one).
                expired += d.attempt > 1
            elif d.attempt <= retried:
                # JetStream can hand back the delivery we nak'd with its old count instead of a new one: it
                # is the redelivery the nak asked for, and max_deliveries must see it counted.
                got[i] = replace(d, attempt=retried + 1)
        if expired:
            self.options.counters.count("lease_expired", expired)
        return await deliverable(self.options, got, dead_letter=self._dead_letter, ack=self.ack)

    # Pull requests are ours rather than nats-py's fetch(), whose batch pull waits out its whole timeout for
    # a full batch once the first message came: here a receive returns as soon as one message arrived.
    async def _pull(self, n: int, wait: float) -> list[Msg]:
        msgs = await self._buffered(n)  # late arrivals of an earlier request
        if len(msgs) < n:
            msgs += await self._request(n - len(msgs), None)
        if msgs or wait <= 0:
            return msgs
        # Wait for one and hand it over at once: a no_wait request for the rest would cost a round trip before
        # its claim, and the next pull takes what came meanwhile with its first (no_wait) request anyway.
        return await self._request(1, wait)

    async def _arrive(self, msg: Msg) -> None:
        self._arrivals.append(msg)
        self._arrived.set()

    async def _buffered(self, n: int) -> list[Msg]:
        out: list[Msg] = []
        while len(out) < n and self._arrivals:
            msg = self._arrivals.popleft()
            if not JetStreamContext.is_status_msg(msg):
                out.append(msg)
        return out

    async def _request(self, batch: int, expires: float | None) -> list[Msg]:
        """One pull request: no_wait (``expires`` None: what is there now, then a 404 status) or lingering for
        ``expires`` seconds (ends with a 408 status, or when ``batch`` messages came)."""
        nc, _ = await self._connect()
        request: dict[str, Any] = {"batch": batch}
        if expires is None:
            request["no_wait"] = True
        else:
            request["expires"] = max(1_000_000, int(expires * 1e9))
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.config.stream}.{self.config.durable_consumer}"
        await nc.publish(subject, json.dumps(request).encode(), reply=self._inbox)
        out: list[Msg] = []
        deadline = time.monotonic() + (expires if expires is not None else 0.0) + 2.0
        while len(out) < batch:
            if not self._arrivals:
                self._arrived.clear()
                try:
                    async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
                        await self._arrived.wait()
                except TimeoutError:
                    break
                continue
            msg = self._arrivals.popleft()
            status = JetStreamContext.is_status_msg(msg)
            if status is None:
                out.append(msg)
            elif status in ("404", "408", "409"):  # no messages / request expired / request ended
                break
        return out

    async def extend(self, deliveries: Sequence[Delivery]) -> None:
        await self._reply(deliveries, b"+WPI", "extending leases")

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        await self._reply(deliveries, b"+ACK", "acknowledging")
        self.options.counters.count("acked", len(deliveries))

    async def retry(self, deliveries: Sequence[Delivery], delay: float) -> None:
        last = [d for d in deliveries if d.attempt >= self.options.max_deliveries]
        again = [d for d in deliveries if d.attempt < self.options.max_deliveries]
        if again:
            await self._nak(again, delay, "retrying")
            while len(self._retried) > 100_000:
                self._retried.pop(next(iter(self._retried)))
            self.options.counters.count("retried", len(again))
        await settle_exhausted(
            self.options, last, made=lambda d: d.attempt, dead_letter=self._dead_letter, ack=self.ack
        )

    async def _nak(self, deliveries: Sequence[Delivery], delay: float, doing: str) -> None:
        """Redeliver after ``delay``; the deliveries are remembered as ours (not a lease that expired)."""
        nak = b"-NAK" if delay <= 0 else b"-NAK " + json.dumps({"delay": int(delay * 1e9)}).encode()
        await self._reply(deliveries, nak, doing)
        for d in deliveries:
            self._retried[_stream_seq(d.receipt)] = d.attempt

    async def release(self, deliveries: Sequence[Delivery], delay: float = 0.0) -> None:
        """A nak (JetStream counts it as a delivery; redelivered after ``delay``); on the last delivery, an
        ack and the same message published afresh (its count starts again, and it is delivered at once), so
        a shutdown never dead-letters a job."""
        last = [d for d in deliveries if d.attempt >= self.options.max_deliveries]
        again = [d for d in deliveries if d.attempt < self.options.max_deliveries]
        if again:
            await self._nak(again, delay, "releasing")
        if last:
            fresh = [replace(d.message, key=f"{d.message.dedupe_key}:released:{_stream_seq(d.receipt)}") for d in last]
            await self.publish(fresh)
            await self._reply(last, b"+ACK", "releasing")

    async def dead_letter(self, deliveries: Sequence[Delivery], reason: str) -> None:
        await self._dead_letter(deliveries, reason, lambda d: d.attempt)

    async def _dead_letter(self, deliveries: Sequence[Delivery], reason: str, made: Callable[[Delivery], int]) -> None:
        if not deliveries:
            return
        if self.options.dead_letter:
            _, js = await self._connect()
            async with self._errors("dead-lettering"):
                for d in deliveries:
                    headers = d.message.dead_letter_headers(reason, made(d))
                    headers[_MSG_ID] = f"dead.{self.config.stream}.{_stream_seq(d.receipt)}"
                    await js.publish(self.config.dead_letter_subject, d.body, headers=headers)
        await self._reply(deliveries, b"+TERM", "settling dead letters")
        self.options.counters.count("dead_lettered" if self.options.dead_letter else "dropped", len(deliveries))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        _, js = await self._connect()
        out: list[DeadLetter] = []
        seq = 1
        async with self._errors("reading the dead-letter stream"):
            while len(out) < limit:
                try:
                    raw = await js.get_msg(self.config.dead_letter_stream, seq, next=True)
                except jerr.NotFoundError:
                    break
                body = bytes(raw.data or b"")
                headers = {k: v for k, v in (raw.headers or {}).items() if k != _MSG_ID}
                out.append(DeadLetter(Message.from_body(body), headers, body))
                seq = int(raw.seq or 0) + 1
        return out

    async def depth(self) -> int:
        _, js = await self._connect()
        async with self._errors("measuring depth"):
            info = await js.consumer_info(self.config.stream, self.config.durable_consumer)
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    async def health(self) -> Health:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(5):
                _, js = await self._connect()
                async with self._errors("health check"):
                    await js.stream_info(self.config.stream)
        except (TransportError, TimeoutError) as exc:
            return Health("nats", self.queue, False, 1000 * (time.perf_counter() - started), str(exc) or "timeout")
        detail = f"stream {self.config.stream}, consumer {self.config.durable_consumer}"
        return Health("nats", self.queue, True, 1000 * (time.perf_counter() - started), detail)

    async def close(self) -> None:
        self._closed = True
        nc, self._nc, self._js, self._sub = self._nc, None, None, None
        if nc is not None and not nc.is_closed:
            # Messages that arrived for a pull but were never handed out go back now (not after AckWait).
            leftovers = [m.reply for m in self._arrivals if m.reply and not JetStreamContext.is_status_msg(m)]
            self._arrivals.clear()
            with contextlib.suppress(Exception):
                for reply in leftovers:
                    await nc.publish(reply, b"-NAK")
                await nc.flush(timeout=1)
            await nc.close()
