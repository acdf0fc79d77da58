"""The rows of the worker registry (table ``workers``, migration ``0010_workers``), shared by both SQL
backends' registries; how a worker is known to be alive stays with each backend (a file lock on SQLite, a
session's advisory lock on PostgreSQL). The list columns (queues, tasks, packs) arrive decoded from
PostgreSQL's jsonb and as JSON text from SQLite: ``worker_from_row``'s ``lists`` reads one such value."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

from jobengine.core import codec
from jobengine.core.ids import WorkerId
from jobengine.core.models import Job
from jobengine.ports.workers import WorkerInfo

from .base import Db, Tx, marks

H = TypeVar("H")

WORKER_COLUMNS: Final = (
    "id, kind, tenant, host, pid, version, queues, tasks, packs, concurrency, lock_key, started_at, last_seen, "
    "expires_at"
)


def worker_from_row(r: Sequence[Any], lists: Callable[[Any], Sequence[str]] = tuple) -> WorkerInfo:
    """A row of WORKER_COLUMNS, optionally followed by the count of jobs the worker holds."""
    return WorkerInfo(
        id=WorkerId(r[0]), kind=r[1], tenant=r[2], host=r[3], pid=int(r[4]), version=r[5], queues=tuple(lists(r[6])),
        tasks=tuple(lists(r[7])), packs=tuple(lists(r[8])), concurrency=int(r[9]),
        lock_key=None if r[10] is None else int(r[10]), started_at=float(r[11]), last_seen=float(r[12]),
        expires_at=float(r[13]), in_flight=int(r[14]) if len(r) > 14 else 0,
    )  # fmt: skip


_NAMES: Final = WORKER_COLUMNS.split(", ")
_JSON: Final = ("queues", "tasks", "packs")
#: WORKER_COLUMNS of ``w``, with the JSON lists as text on both backends.
SELECT: Final = ", ".join(f"w.{c}{{text}}" if c in _JSON else f"w.{c}" for c in _NAMES)
# A row registered again keeps its started_at.
_REGISTER: Final = (
    f"INSERT INTO {{s}}workers ({WORKER_COLUMNS}) VALUES "
    f"({', '.join('{json}' if c in _JSON else '?' for c in _NAMES)}) ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in _NAMES if c not in ("id", "started_at"))
)
_LIVE: Final = (
    f"SELECT {SELECT}, (SELECT count(*) FROM {{s}}jobs j WHERE j.state = 'running' AND j.lease_worker = w.id) "
    "FROM {s}workers w WHERE w.expires_at > ? ORDER BY w.started_at, w.id"
)


def info_of(row: Sequence[object]) -> WorkerInfo:
    """A row of :data:`SELECT` (optionally followed by the count of jobs the worker holds)."""
    return worker_from_row(row, codec.loads)


async def register(db: Db, info: WorkerInfo) -> None:
    row = (
        info.id, info.kind, info.tenant, info.host, info.pid, info.version, codec.dumps(list(info.queues), "queues"),
        codec.dumps(list(info.tasks), "tasks"), codec.dumps(list(info.packs), "packs"), info.concurrency,
        info.lock_key, info.started_at, info.last_seen, info.expires_at,
    )  # fmt: skip
    await db.write(lambda tx: tx.run(_REGISTER, row))


async def beat(db: Db, worker: WorkerId, now: float, expires_at: float) -> bool:
    sql = "UPDATE {s}workers SET last_seen = ?, expires_at = ? WHERE id = ?"
    return bool(await db.write(lambda tx: tx.run(sql, (now, expires_at, worker))))


async def live(db: Db, now: float) -> list[WorkerInfo]:
    return [info_of(r) for r in await db.read(lambda tx: tx.rows(_LIVE, (now,)))]


async def remove(db: Db, workers: Sequence[WorkerId]) -> list[int | None]:
    """Delete the workers' rows; their lock keys."""
    if not workers:
        return []
    where = f"id IN ({marks(len(workers))})"

    async def op(tx: Tx) -> list[int | None]:
        keys = [r[0] for r in await tx.rows(f"SELECT lock_key FROM {{s}}workers WHERE {where}", workers)]
        await tx.run(f"DELETE FROM {{s}}workers WHERE {where}", workers)
        return keys

    return await db.write(op)


class SqlWorkers(ABC, Generic[H]):
    """The part of a :class:`~jobengine.ports.workers.WorkerRegistry` both backends share: the rows. How a
    local worker's process is known to live is each backend's: ``_hold`` takes its liveness (``H``) when it
    registers, ``_let_go`` gives it back (``unregister``: the worker leaves; ``close``: the store does)."""

    def __init__(self, db: Db) -> None:
        self._db = db
        self._held: dict[WorkerId, H] = {}  # our own workers' liveness
        self._held_keys: dict[WorkerId, int] = {}  # the key each of those holds

    @abstractmethod
    async def _hold(self, key: int) -> H: ...

    @abstractmethod
    async def _let_go(self, held: H, *, leaving: bool) -> None: ...

    def _removed(self, workers: Sequence[WorkerId], keys: Sequence[int | None]) -> None:
        """After the rows of ``workers`` (with lock ``keys``) are deleted."""

    async def register(self, info: WorkerInfo) -> None:
        """Write the worker's row; hold its liveness key first. A worker registering again (declared dead
        while its process lived, or after a failed register) may bring another key: the new one is held
        before the old one is let go, so its row never names a key nobody holds."""
        key = info.lock_key
        if key is not None and self._held_keys.get(info.id) != key:
            old = self._held.get(info.id)
            self._held[info.id] = await self._hold(key)
            self._held_keys[info.id] = key
            if old is not None:
                await self._let_go(old, leaving=True)
        await register(self._db, info)

    async def beat(self, worker: WorkerId, now: float, expires_at: float) -> bool:
        return await beat(self._db, worker, now, expires_at)

    async def unregister(self, worker: WorkerId) -> None:
        try:
            await remove(self._db, [worker])
        finally:
            held = self._held.pop(worker, None)
            self._held_keys.pop(worker, None)
            if held is not None:
                await self._let_go(held, leaving=True)

    async def live(self, now: float) -> list[WorkerInfo]:
        return await live(self._db, now)

    async def held_jobs(self, workers: Sequence[WorkerId], limit: int) -> list[Job]:
        if not workers:
            return []
        where = "jobs.state = 'running' AND jobs.lease_worker {in_array} ORDER BY jobs.id LIMIT ?"
        return await self._db.read(lambda tx: tx.jobs(where, (tx.d.array(workers), limit)))

    async def remove(self, workers: Sequence[WorkerId]) -> None:
        if workers:
            self._removed(workers, await remove(self._db, workers))

    async def close(self) -> None:
        held, self._held = self._held, {}
        self._held_keys.clear()
        for h in held.values():
            await self._let_go(h, leaving=False)
