"""The rows of the worker registry (table ``workers``, migration ``0010_workers``), shared by both SQL
backends' registries; how a worker is known to be alive stays with each backend (a file lock on SQLite, a
session's advisory lock on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from jobengine.backends.worker_rows import WORKER_COLUMNS, worker_from_row
from jobengine.core import codec
from jobengine.core.ids import WorkerId
from jobengine.ports.workers import WorkerInfo

from .base import Db, Tx, marks

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
