"""The SignatureStore port on SQLite (one row per tenant and fingerprint, upserted per failed attempt)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from jobengine.core import signatures as sg
from jobengine.core.models import Event, NewEvent
from jobengine.core.signatures import Signature, SignatureFilter, SignatureHit, SignatureStatus
from jobengine.errors import NotFound

from . import schedule_rows as sr
from .rows import append_events

if TYPE_CHECKING:
    from .store import SqliteStore


def _record(conn: sqlite3.Connection, hits: Sequence[SignatureHit]) -> None:
    known: dict[tuple[str, str], Signature | None] = {}
    for hit in hits:
        key = (hit.tenant, hit.fingerprint.key)
        if key not in known:
            found = sr.select_signatures(conn, "tenant = ? AND key = ?", key)
            known[key] = found[0] if found else None
        known[key] = sg.record(known[key], hit)
    for signature in known.values():
        assert signature is not None
        sr.upsert_signature(conn, signature)


def _list(conn: sqlite3.Connection, f: SignatureFilter) -> list[Signature]:
    where: list[str] = ["1"]
    params: list[Any] = []
    for term, value in (("tenant = ?", f.tenant), ("task = ?", f.task)):
        if value is not None:
            where.append(term)
            params.append(value)
    if f.statuses:
        where.append(f"status IN ({', '.join('?' * len(f.statuses))})")
        params.extend(s.value for s in f.statuses)
    return sr.select_signatures(conn, f"{' AND '.join(where)} ORDER BY last_seen DESC, key LIMIT ?", [*params, f.limit])


def _update(
    conn: sqlite3.Connection,
    tenant: str,
    key: str,
    status: SignatureStatus | None,
    non_retryable: bool | None,
    now: float,
    event: NewEvent,
) -> tuple[Signature, list[Event]]:
    found = sr.select_signatures(conn, "tenant = ? AND key = ?", (tenant, key))
    if not found:
        raise NotFound("signature", key)
    current = found[0]
    updated = replace(
        current,
        status=status if status is not None else current.status,
        non_retryable=non_retryable if non_retryable is not None else current.non_retryable,
        updated_at=now,
    )
    sr.upsert_signature(conn, updated)
    return updated, append_events(conn, [event], now)


class SqliteSignatures:
    """The SignatureStore half of :class:`~jobengine.backends.sqlite.scheduling.SqliteScheduling`."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    async def record_signatures(self, hits: Sequence[SignatureHit], now: float) -> None:
        if hits:
            await self._store._write(lambda c: _record(c, hits))

    async def non_retryable_signatures(self) -> set[tuple[str, str]]:
        def read(c: sqlite3.Connection) -> set[tuple[str, str]]:
            rows = c.execute("SELECT tenant, key FROM failure_signatures WHERE non_retryable = 1")
            return {(r[0], r[1]) for r in rows}

        return await self._store._read(read)

    async def get_signature(self, tenant: str, key: str) -> Signature | None:
        found = await self._store._read(lambda c: sr.select_signatures(c, "tenant = ? AND key = ?", (tenant, key)))
        return found[0] if found else None

    async def list_signatures(self, filter: SignatureFilter) -> list[Signature]:
        return await self._store._read(lambda c: _list(c, filter))

    async def update_signature(
        self,
        tenant: str,
        key: str,
        status: SignatureStatus | None,
        non_retryable: bool | None,
        now: float,
        event: NewEvent,
    ) -> tuple[Signature, list[Event]]:
        return await self._store._write(lambda c: _update(c, tenant, key, status, non_retryable, now, event))
