"""The outbox relay's side of :mod:`jobengine.ports.outbox` (table: migration ``0004_outbox``): holding due
rows while they are published, deleting them once published, and when the next one is due. Mixed into
both SQL stores; writing rows with their jobs and claiming jobs by id stay with each backend's insert and
claim."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from jobengine.core import codec
from jobengine.core.ids import JobId
from jobengine.core.models import Inserted, Job
from jobengine.ports.outbox import OUTBOXED_STATES, OutboxRow

from .base import HasDb, marks

_CLAIM: Final = """UPDATE {s}outbox SET held_until = ? WHERE id IN (
    SELECT id FROM {s}outbox WHERE available_at <= ? AND held_until <= ? ORDER BY available_at, id LIMIT ?{skip_locked}
) RETURNING id, job_id, queue, available_at, headers{text}"""
_DUE: Final = """SELECT EXISTS (SELECT 1 FROM {s}outbox WHERE available_at <= ? AND held_until <= ?),
    (SELECT min(available_at) FROM {s}outbox WHERE available_at > ?)"""


def owed(inserted: Inserted, headers: Mapping[JobId, Mapping[str, str]]) -> list[tuple[Job, dict[str, str]]]:
    """The jobs an insert created that go out through the outbox, each with its message's headers."""
    made = zip(inserted.jobs, inserted.created, strict=True)
    return [(job, dict(headers.get(job.id, {}))) for job, created in made if created and job.state in OUTBOXED_STATES]


def outbox_row(r: Sequence[Any]) -> OutboxRow:
    """A row of ``id, job_id, queue, available_at, headers`` (as text)."""
    return OutboxRow(int(r[0]), JobId(r[1]), r[2], float(r[3]), codec.loads(r[4]))


class SqlOutboxMixin:
    # Holds and deletes are the relay's own bookkeeping (hot): one lost with the last commits before a power
    # loss only means the rows are published again, which the broker's de-duplication absorbs.
    async def claim_outbox(self: HasDb, now: float, limit: int, lease_seconds: float) -> list[OutboxRow]:
        if limit <= 0:
            return []
        rows = await self.db.write(lambda tx: tx.rows(_CLAIM, (now + lease_seconds, now, now, limit)), hot=True)
        return sorted(map(outbox_row, rows), key=lambda r: (r.available_at, r.id))

    async def delete_outbox(self: HasDb, ids: Sequence[int]) -> None:
        if ids:
            sql = f"DELETE FROM {{s}}outbox WHERE id IN ({marks(len(ids))})"
            await self.db.write(lambda tx: tx.run(sql, ids), hot=True)

    async def outbox_due(self: HasDb, now: float) -> tuple[bool, float | None]:
        rows = await self.db.read(lambda tx: tx.rows(_DUE, (now, now, now)))
        later = rows[0][1]
        return bool(rows[0][0]), (float(later) if later is not None else None)
