"""Time-ordered identifiers (UUIDv7, RFC 9562).

Ids sort by creation time, so the claim order ``priority, run_at, id`` is FIFO among equals, and an index
on ``id`` grows at its right edge.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Final, NewType, cast

JobId = NewType("JobId", str)
WorkerId = NewType("WorkerId", str)
LeaseToken = NewType("LeaseToken", str)
ScheduleId = NewType("ScheduleId", str)
RunId = NewType("RunId", str)
GraphId = NewType("GraphId", str)


#: The 12-bit counter as three hex digits, by value.
_SEQ_HEX = tuple(f"{n:03x}" for n in range(4096))


class _Uuid7:
    """Monotonic within a process: a counter in rand_a breaks ties inside one millisecond.

    The text of an id is made of three parts: the millisecond with the version digit (``xxxxxxxx-xxxx-7``),
    the counter (three hex digits) and the variant with 62 random bits (``-yxxx-xxxxxxxxxxxx``). The first
    and last change once per millisecond and are kept as strings, so an id costs a lookup and one f-string
    instead of formatting a 128-bit integer each time (docs/decisions/0021-enqueue-client-instructions.md).
    The random bits are drawn afresh every millisecond (RFC 9562 allows any rand_b for uniqueness; within
    one millisecond of one process the counter already tells ids apart)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = 0
        self._seq = 0
        self._head = self._tail = ""
        self._rng = random.Random(os.urandom(16))
        # A forked child must not repeat its parent's sequence (getpid() per id would cost a syscall).
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._rng = random.Random(os.urandom(16))
        self._last_ms = 0  # draw new random bits before the next id

    def _block(self, ms: int) -> None:
        """The parts of the ids of millisecond ``ms`` (the lock held)."""
        h = "%012x" % ms  # noqa: UP031 - measurably faster than an f-string format spec here
        # Ids need uniqueness, not secrecy: a PRNG seeded from the OS is far cheaper than a urandom
        # syscall, and the millisecond + counter prefix already orders them.
        r = "%016x" % ((0b10 << 62) | self._rng.getrandbits(62))
        self._head = f"{h[:8]}-{h[8:]}-7"
        self._tail = f"-{r[:4]}-{r[4:]}"

    def __call__(self) -> str:
        # acquire / release rather than ``with``, and one f-string rather than two concatenations: fewer
        # instructions, and every NewJob draws an id (docs/decisions/0021-enqueue-client-instructions.md).
        lock = self._lock
        lock.acquire()
        try:
            ms = time.time_ns() // 1_000_000
            if ms > self._last_ms:
                self._last_ms = ms
                self._seq = seq = 0
                self._block(ms)
            else:
                seq = self._seq + 1
                if seq > 0xFFF:  # counter exhausted: borrow the next millisecond
                    self._last_ms += 1
                    seq = 0
                    self._block(self._last_ms)
                self._seq = seq
            return f"{self._head}{_SEQ_HEX[seq]}{self._tail}"
        finally:
            lock.release()


uuid7 = _Uuid7()


#: A new job id: uuid7 itself, typed (a NewType is the identity at run time), so that NewJob's default
#: costs no wrapper call (docs/decisions/0021-enqueue-client-instructions.md).
new_job_id = cast("Callable[[], JobId]", uuid7)


def new_schedule_id() -> ScheduleId:
    return ScheduleId(uuid7())


def new_run_id() -> RunId:
    return RunId(uuid7())


#: Characters of a short id: the id without its last group (``mmmmmmmm-mmmm-7ccc-rrrr``).
SHORT_ID_LENGTH = 23


def short_id(ident: str | None) -> str:
    """The form of an id shown to people (the dashboard, the CLI, logs): its first 23 characters.

    A UUIDv7 from :data:`uuid7` reads ``mmmmmmmm-mmmm-7ccc-rrrr-rrrrrrrrrrrr``: the millisecond, a counter
    that tells apart the ids one process makes in a millisecond, then random bits drawn once per millisecond
    and process. Jobs enqueued together differ in the millisecond or the counter, both inside the short form;
    ids of two processes in the same millisecond and count differ in the 14 random bits it keeps. Being a
    prefix, a short id pasted back is a prefix that every id lookup accepts. Any id of 23 characters or
    fewer (one a caller chose) is shown whole; ``-`` stands for none. A webhook endpoint's or delivery's id
    keeps its mark (``we_``, ``wd_``) before those 23 characters."""
    if not ident:
        return "-"
    mark = 3 if ident[:3] in TYPED_PREFIXES else 0
    return ident[: mark + SHORT_ID_LENGTH]


#: The marks before the UUIDv7 of some ids (webhook endpoints, deliveries): kept whole in a short id.
TYPED_PREFIXES = ("we_", "wd_")


class IdKind(StrEnum):
    """The things people name by id, each resolvable from a unique prefix of it (``engine.jobs.resolve_id``).
    The value names the id's field in errors (``run`` → ``run_id``)."""

    JOB = "job"
    RUN = "run"
    SCHEDULE = "schedule"
    ENDPOINT = "endpoint"
    DELIVERY = "delivery"
    KEY = "key"
    SIGNATURE = "signature"
    GRAPH = "graph"

    @property
    def noun(self) -> str:
        """The thing's name in a message (``webhook endpoint 'we_…' not found``)."""
        return _NOUNS.get(self, self.value)


_NOUNS: Final = {IdKind.ENDPOINT: "webhook endpoint", IdKind.DELIVERY: "webhook delivery", IdKind.KEY: "api key"}


def prefix_range(prefix: str) -> tuple[str, str]:
    """The ids that start with ``prefix`` are those ``low <= id < high``, compared by code point (the
    byte order of UTF-8, in which both stores compare ids): a range scan of the primary key."""
    if not prefix:
        raise ValueError("an empty prefix is every id")
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def new_lease_token() -> LeaseToken:
    return LeaseToken(os.urandom(12).hex())
