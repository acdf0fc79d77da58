"""The Transport port: how work reaches workers. The Store stays the system of record; a transport only
delivers.

A transport serves one *logical queue* (the engine has two: ``planner``, where schedules are planned, and
``runner``, where jobs are run). What travels is a small :class:`Message` that names a job (or, on the
planner queue, a run); the job's data stays in the store. A worker receives a :class:`Delivery` under a
lease, extends the lease while it works, and settles it exactly once: ``ack`` (done), ``retry`` (again after
a delay) or ``dead_letter`` (never again; kept in the dead-letter stream with the reason).

Delivery is at least once. A delivery whose lease expires is delivered again (to any worker); one delivered
more than ``max_deliveries`` times is handed to the ``exhausted`` hook and then dead-lettered (or dropped
and counted, when dead-lettering is off) instead of being delivered again. Duplicates are expected and are
made harmless by the store: a worker claims the named job under a fenced lease, and a claim of a job that is
not runnable claims nothing.

Implementations: ``database`` (the store itself: the job rows are the messages), ``redis`` (Streams with a
consumer group) and ``nats`` (JetStream with a durable pull consumer). They differ in what they can do, which
each declares in :class:`TransportCapabilities`; the contract suite (``tests/contract/transport``) holds them
to the same behaviour everywhere else.

Failure policy: a broker that cannot be reached raises :class:`jobengine.errors.TransportUnavailable`; the
caller retries (the relay and the worker do, with backoff). ``ack`` / ``retry`` / ``dead_letter`` of a
delivery that was already settled, or whose lease another receiver took over, change nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from jobengine.core import codec
from jobengine.core.models import Json

#: The headers every dead-lettered message carries (also on Redis, as fields of the dead-letter entry).
RUN_ID_HEADER: Final = "Jobengine-Run-Id"
SCHEDULE_ID_HEADER: Final = "Jobengine-Schedule-Id"
FAILURE_REASON_HEADER: Final = "Jobengine-Failure-Reason"
#: Also on every dead letter: what the message named, its logical queue, and how often it was delivered.
MESSAGE_ID_HEADER: Final = "Jobengine-Message-Id"
QUEUE_HEADER: Final = "Jobengine-Queue"
DELIVERIES_HEADER: Final = "Jobengine-Deliveries"

#: The wire format version, written into every message body.
MESSAGE_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class Message:
    """What a transport carries: ``id`` names a job (runner queue) or a run (planner queue).

    ``queue`` is the job's queue (its lane: ``default``, ``emails``...), not the logical transport queue.
    ``key`` de-duplicates publishes within the transport's idempotency window (default: ``id``, so an
    outbox row published twice gives one message). ``data`` is a small JSON value for messages that are not
    about a stored job (the planner's); runner messages leave it None.

    The body on the wire is the canonical JSON (:mod:`jobengine.core.codec`) of every field, so any process
    re-serialises a message it received to the same bytes.
    """

    id: str
    queue: str = "default"
    key: str | None = None
    run_id: str | None = None
    schedule_id: str | None = None
    data: Json = None

    @property
    def dedupe_key(self) -> str:
        return self.key if self.key is not None else self.id

    def to_json(self) -> dict[str, Json]:
        return {
            "v": MESSAGE_VERSION,
            "id": self.id,
            "queue": self.queue,
            "key": self.key,
            "run_id": self.run_id,
            "schedule_id": self.schedule_id,
            "data": self.data,
        }

    def body(self) -> bytes:
        """The canonical UTF-8 JSON body. Raises InvalidJob (field ``message``) if ``data`` is not JSON."""
        return codec.dumpb(self.to_json(), "message")

    @classmethod
    def from_body(cls, body: bytes | str) -> Message:
        """Parse a body written by :meth:`body`. Raises ValueError for anything else."""
        d = codec.loads(body)
        if not isinstance(d, dict) or not isinstance(d.get("id"), str) or d.get("v") != MESSAGE_VERSION:
            raise ValueError(f"not a jobengine message (version {MESSAGE_VERSION}): {body!r:.200}")
        return cls(
            id=d["id"],
            queue=str(d.get("queue") or "default"),
            key=d.get("key"),
            run_id=d.get("run_id"),
            schedule_id=d.get("schedule_id"),
            data=d.get("data"),
        )

    def dead_letter_headers(self, reason: str, deliveries: int) -> dict[str, str]:
        return {
            RUN_ID_HEADER: self.run_id or "",
            SCHEDULE_ID_HEADER: self.schedule_id or "",
            FAILURE_REASON_HEADER: reason,
            MESSAGE_ID_HEADER: self.id,
            QUEUE_HEADER: self.queue,
            DELIVERIES_HEADER: str(deliveries),
        }


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery of a message, held under a lease until ``lease_until`` (UNIX seconds).

    ``attempt`` counts deliveries of this message, 1 on the first. ``receipt`` is the transport's handle
    (a stream entry id, a JetStream reply subject, a lease token); callers pass the delivery back as it is.
    ``body`` is the bytes that arrived.
    """

    message: Message
    receipt: str
    attempt: int
    lease_until: float
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message in the dead-letter stream, with the headers it was dead-lettered with."""

    message: Message
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Health:
    transport: str  # database | redis | nats
    queue: str  # the logical queue: planner | runner
    ok: bool
    latency_ms: float
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "queue": self.queue,
            "ok": self.ok,
            "latency_ms": round(self.latency_ms, 3),
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class TransportCapabilities:
    #: ``database``, ``redis`` or ``nats``.
    name: str
    #: True: the transport delivers what is published to it (messages naming jobs), so the engine writes an
    #: outbox row with every job and claims jobs by id. False: the store's runnable jobs are the messages.
    broker: bool
    #: True when publishing the same key twice within the window gives one message (Redis SET NX, NATS
    #: Nats-Msg-Id). The database transport de-duplicates with the job's idempotency key instead.
    dedupe: bool
    #: True when exhausted messages go to a separate dead-letter stream (and are dropped, counted, when
    #: dead-lettering is off). The database keeps them as ``dead`` jobs either way: the store never drops.
    dead_letter_stream: bool
    #: True when run and schedule ids travel with a message; the database transport has only the job row.
    message_headers: bool
    #: True when ``receive`` can block until a message arrives (no polling in between).
    blocking_receive: bool
    #: True when what a consumer whose process is gone had received is delivered again within seconds,
    #: from its absence on the broker, not after its lease (Redis: no connection under its name).
    consumer_presence: bool = False
    #: True when the transport notices, while it receives, that the broker failed over or restarted, and
    #: tells ``TransportOptions.new_history`` (Redis: the server's run id and replication id changed).
    history_checks: bool = False


class Counters(Protocol):
    """Where a transport counts what it did (see :mod:`jobengine.delivery.metrics`). ``what`` is one of
    enqueued, deduplicated, acked, retried, dead_lettered, dropped, lease_expired, orphans_taken,
    history_changed."""

    def count(self, what: str, n: int = 1) -> None: ...


class NoCounters:
    def count(self, what: str, n: int = 1) -> None:
        pass


#: Called with deliveries past ``max_deliveries`` before they are dead-lettered; returns the ones to
#: dead-letter. The others are settled silently (they were duplicates of work that is still alive). An
#: exception leaves all of them to be delivered again later.
ExhaustedHook = Callable[[Sequence[Delivery]], Awaitable[Sequence[Delivery]]]


async def dead_letter_all(deliveries: Sequence[Delivery]) -> Sequence[Delivery]:
    return deliveries


#: Called with a token naming the broker's new history when a transport finds that the broker it talks to is
#: not the one it talked to before (a failover promoted a replica, the server restarted): what was published
#: or settled in the moments before may be gone. Must not block; the same token for every process that sees
#: the same change.
HistoryHook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """What every transport of a logical queue is configured with.

    ``lease_seconds``: how long a delivery is held before it is delivered again (NATS: AckWait).
    ``max_deliveries``: deliveries before a message is exhausted (``queue.maxDeliveryAttempts``).
    ``dead_letter``: False drops exhausted messages (counted) instead of dead-lettering them.
    ``idempotency_window``: seconds within which a repeated publish key is de-duplicated.
    ``new_history``: told when the broker's history changed (only transports that declare
    ``history_checks`` look).
    """

    lease_seconds: float = 30.0
    max_deliveries: int = 5
    dead_letter: bool = True
    idempotency_window: float = 120.0
    consumer: str = "jobengine"
    counters: Counters = field(default_factory=NoCounters)
    exhausted: ExhaustedHook = dead_letter_all
    new_history: HistoryHook | None = None

    def __post_init__(self) -> None:
        if self.lease_seconds <= 0:
            raise ValueError("lease_seconds: must be positive")
        if self.max_deliveries < 1:
            raise ValueError("max_deliveries: must be at least 1")
        if self.idempotency_window <= 0:
            raise ValueError("idempotency_window: must be positive")


class Transport(Protocol):
    capabilities: TransportCapabilities
    #: The logical queue this transport serves (``planner`` or ``runner``).
    queue: str
    options: TransportOptions

    async def publish(self, messages: Sequence[Message]) -> list[bool]:
        """Make messages deliverable. Returns, per message, False when its key was already published within
        the idempotency window (nothing new was stored). Durable once it returns (within the broker's
        durability). Raises TransportUnavailable; a publish that raised may still have happened, so publishing
        again with the same keys is the way to retry."""
        ...

    async def receive(self, limit: int, wait: float = 0.0) -> list[Delivery]:
        """Up to ``limit`` deliveries, each leased for ``options.lease_seconds``. Returns at once when some
        are ready; otherwise waits up to ``wait`` seconds for one. Includes deliveries whose lease expired
        elsewhere. Exhausted messages are dead-lettered (or dropped) here and never returned."""
        ...

    async def extend(self, deliveries: Sequence[Delivery]) -> None:
        """Renew the lease of deliveries still being worked on (a heartbeat)."""
        ...

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Done: never deliver these again."""
        ...

    async def retry(self, deliveries: Sequence[Delivery], delay: float) -> None:
        """Deliver again after ``delay`` seconds (0: as soon as possible). Counts as a delivery."""
        ...

    async def release(self, deliveries: Sequence[Delivery], delay: float = 0.0) -> None:
        """Hand deliveries back unfinished (a graceful shutdown; a job this receiver cannot run): delivered
        again after ``delay`` seconds, without counting towards ``max_deliveries`` where the transport can
        give the delivery back (Redis, the database); NATS counts it, except on the last delivery, which is
        published afresh instead."""
        ...

    async def dead_letter(self, deliveries: Sequence[Delivery], reason: str) -> None:
        """Never deliver again; keep each in the dead-letter stream with the run id, schedule id and
        ``reason`` in its headers (dropped and counted instead when ``options.dead_letter`` is False)."""
        ...

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` entries of the dead-letter stream (for operators and tests)."""
        ...

    async def depth(self) -> int:
        """Messages not yet settled: waiting, delayed, or in flight."""
        ...

    async def health(self) -> Health:
        """One round trip to the transport; never raises (``ok`` False with the reason instead)."""
        ...

    async def close(self) -> None: ...
