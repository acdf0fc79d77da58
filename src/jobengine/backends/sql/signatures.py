"""The SignatureStore port: one row per tenant and fingerprint, upserted per failed attempt (table:
migration ``0002_scheduler``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from jobengine.backends.scheduling_rows import SIGNATURE_COLUMNS, SIGNATURE_WIDTH, signature_from_row
from jobengine.backends.scheduling_rows import signature_values as _values
from jobengine.core import signatures as sg
from jobengine.core.models import Event, NewEvent
from jobengine.core.signatures import Signature, SignatureFilter, SignatureHit, SignatureStatus
from jobengine.errors import NotFound

from .base import Db, Tx, conditions, marks

_SELECT: Final = (
    "SELECT tenant, key, error_type, message, frames{text}, task, occurrences, first_seen, last_seen, "
    "sample_job_ids{text}, status, non_retryable, updated_at FROM {s}failure_signatures"
)
_UPSERT: Final = (
    f"INSERT INTO {{s}}failure_signatures ({SIGNATURE_COLUMNS}) VALUES (?, ?, ?, ?, {{json}}, ?, ?, ?, ?, {{json}}, "
    f"{marks(SIGNATURE_WIDTH - 10)}) ON CONFLICT (tenant, key) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in SIGNATURE_COLUMNS.split(", ")[2:])
)


async def _select(tx: Tx, where: str, params: Sequence[Any]) -> list[Signature]:
    return [signature_from_row(r) for r in await tx.rows(f"{_SELECT} WHERE {where}", params)]


class SqlSignatures:
    """The SignatureStore half of :class:`~jobengine.backends.sql.schedules.SqlScheduling`."""

    def __init__(self, db: Db) -> None:
        self.db = db

    async def record_signatures(self, hits: Sequence[SignatureHit], now: float) -> None:
        if not hits:
            return
        keys = sorted({(h.tenant, h.fingerprint.key) for h in hits})

        async def op(tx: Tx) -> None:
            # Lock the existing rows in key order (two processes upserting the same signatures cannot
            # deadlock), then insert or update each.
            where = " OR ".join(["(tenant = ? AND key = ?)"] * len(keys)) + " ORDER BY tenant, key{lock}"
            found = await _select(tx, where, [v for k in keys for v in k])
            known: dict[tuple[str, str], Signature | None] = {(s.tenant, s.key): s for s in found}
            for hit in hits:
                key = (hit.tenant, hit.fingerprint.key)
                known[key] = sg.record(known.get(key), hit)
            await tx.many(_UPSERT, [_values(s) for s in known.values() if s is not None])

        await self.db.write(op, retry=False)

    async def non_retryable_signatures(self) -> set[tuple[str, str]]:
        rows = await self.db.read(
            lambda tx: tx.rows("SELECT tenant, key FROM {s}failure_signatures WHERE non_retryable = {true}")
        )
        return {(r[0], r[1]) for r in rows}

    async def get_signature(self, tenant: str, key: str) -> Signature | None:
        found = await self.db.read(lambda tx: _select(tx, "tenant = ? AND key = ?", (tenant, key)))
        return found[0] if found else None

    async def list_signatures(self, filter: SignatureFilter) -> list[Signature]:
        f = filter
        clause, params = conditions(("tenant = ?", f.tenant), ("task = ?", f.task))
        if f.statuses:
            clause += f" AND status IN ({marks(len(f.statuses))})"
            params.extend(s.value for s in f.statuses)
        sql = f"{clause} ORDER BY last_seen DESC, key LIMIT ?"
        return await self.db.read(lambda tx: _select(tx, sql, [*params, f.limit]))

    async def update_signature(
        self,
        tenant: str,
        key: str,
        status: SignatureStatus | None,
        non_retryable: bool | None,
        now: float,
        event: NewEvent,
    ) -> tuple[Signature, list[Event]]:
        async def op(tx: Tx) -> tuple[Signature, list[Event]]:
            found = await _select(tx, "tenant = ? AND key = ?{lock}", (tenant, key))
            if not found:
                raise NotFound("signature", key)
            current = found[0]
            updated = replace(
                current,
                status=status if status is not None else current.status,
                non_retryable=non_retryable if non_retryable is not None else current.non_retryable,
                updated_at=now,
            )
            await tx.many(_UPSERT, [_values(updated)])
            return updated, await tx.events([event], now)

        return await self.db.write(op, retry=False)
