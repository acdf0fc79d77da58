"""The SignatureStore port on PostgreSQL, and the plumbing both scheduling ports share (a transaction per
call on the store's pool, events appended in it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from jobengine.backends.postgres.sql import prefix
from jobengine.backends.scheduling_rows import SIGNATURE_COLUMNS, signature_from_row
from jobengine.core import codec
from jobengine.core import signatures as sg
from jobengine.core.models import Event, NewEvent
from jobengine.core.signatures import Signature, SignatureFilter, SignatureHit, SignatureStatus
from jobengine.errors import NotFound

if TYPE_CHECKING:
    from jobengine.backends.postgres.store import PostgresStore

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]

_SIGNATURE_SELECT = (
    "SELECT tenant, key, error_type, message, frames::text, task, occurrences, first_seen, last_seen, "
    "sample_job_ids::text, status, non_retryable, updated_at FROM {s}failure_signatures"
)
_EVENTS = """INSERT INTO {s}events (at, type, tenant, job_id, queue, task, data)
SELECT %s, x.type, x.tenant, x.job_id, x.queue, x.task, x.data::jsonb
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[]) WITH ORDINALITY
    AS x(type, tenant, job_id, queue, task, data, ord)
ORDER BY x.ord
RETURNING id"""


class PostgresSignatures:
    """The SignatureStore half of :class:`~jobengine.backends.postgres.scheduling.PostgresScheduling`."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._prefix = prefix(store.schema)

    def _q(self, sql: str) -> bytes:
        return sql.replace("{s}", self._prefix).encode()

    async def _write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        async def op(conn: Conn) -> T:
            async with conn.transaction():
                return await fn(conn)

        return await self._store._run(op, retry=False)

    async def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async def op(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(self._q(sql), params)
            return await cur.fetchall()

        return await self._store._run(op)

    async def _events(self, conn: Conn, events: Sequence[NewEvent], now: float) -> list[Event]:
        if not events:
            return []
        columns: list[list[Any]] = [[], [], [], [], [], []]
        for e in events:
            for i, v in enumerate((e.type, e.tenant, e.job_id, e.queue, e.task, codec.dumps(dict(e.data), "event"))):
                columns[i].append(v)
        cur = await conn.execute(self._q(_EVENTS), (now, *columns))
        ids = sorted(r[0] for r in await cur.fetchall())
        return [
            Event(i, now, e.type, e.tenant, e.job_id, e.queue, e.task, e.data) for i, e in zip(ids, events, strict=True)
        ]

    # -- signatures ---------------------------------------------------------------------------------
    async def _signatures(self, conn: Conn | None, where: str, params: Sequence[Any]) -> list[Signature]:
        sql = f"{_SIGNATURE_SELECT} WHERE {where}"
        if conn is None:
            return [signature_from_row(r) for r in await self._read(sql, params)]
        cur = await conn.execute(self._q(sql), params)
        return [signature_from_row(r) for r in await cur.fetchall()]

    async def _upsert_signature(self, conn: Conn, s: Signature) -> None:
        marks = ", ".join(["%s"] * 4 + ["%s::jsonb", "%s", "%s", "%s", "%s", "%s::jsonb", "%s", "%s", "%s"])
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in SIGNATURE_COLUMNS.split(", ")[2:])
        await conn.execute(
            self._q(
                f"INSERT INTO {{s}}failure_signatures ({SIGNATURE_COLUMNS}) VALUES ({marks}) "
                f"ON CONFLICT (tenant, key) DO UPDATE SET {sets}"
            ),
            _signature_params(s),
        )

    async def record_signatures(self, hits: Sequence[SignatureHit], now: float) -> None:
        if not hits:
            return

        async def fn(conn: Conn) -> None:
            keys = sorted({(h.tenant, h.fingerprint.key) for h in hits})
            # Lock the existing rows in key order (two processes upserting the same signatures cannot
            # deadlock), then insert or update each.
            found = await self._signatures(
                conn,
                "(tenant, key) IN (SELECT * FROM unnest(%s::text[], %s::text[])) ORDER BY tenant, key FOR UPDATE",
                ([t for t, _ in keys], [k for _, k in keys]),
            )
            known: dict[tuple[str, str], Signature | None] = {(s.tenant, s.key): s for s in found}
            for hit in hits:
                key = (hit.tenant, hit.fingerprint.key)
                known[key] = sg.record(known.get(key), hit)
            for signature in known.values():
                assert signature is not None
                await self._upsert_signature(conn, signature)

        await self._write(fn)

    async def non_retryable_signatures(self) -> set[tuple[str, str]]:
        rows = await self._read("SELECT tenant, key FROM {s}failure_signatures WHERE non_retryable", ())
        return {(r[0], r[1]) for r in rows}

    async def get_signature(self, tenant: str, key: str) -> Signature | None:
        found = await self._signatures(None, "tenant = %s AND key = %s", (tenant, key))
        return found[0] if found else None

    async def list_signatures(self, filter: SignatureFilter) -> list[Signature]:
        f = filter
        statuses = [s.value for s in f.statuses]
        where = (
            "(%s::text IS NULL OR tenant = %s) AND (%s::text IS NULL OR task = %s) "
            "AND (cardinality(%s::text[]) = 0 OR status = ANY(%s::text[])) ORDER BY last_seen DESC, key LIMIT %s"
        )
        return await self._signatures(None, where, (f.tenant, f.tenant, f.task, f.task, statuses, statuses, f.limit))

    async def update_signature(
        self,
        tenant: str,
        key: str,
        status: SignatureStatus | None,
        non_retryable: bool | None,
        now: float,
        event: NewEvent,
    ) -> tuple[Signature, list[Event]]:
        async def fn(conn: Conn) -> tuple[Signature, list[Event]]:
            found = await self._signatures(conn, "tenant = %s AND key = %s FOR UPDATE", (tenant, key))
            if not found:
                raise NotFound("signature", key)
            current = found[0]
            updated = replace(
                current,
                status=status if status is not None else current.status,
                non_retryable=non_retryable if non_retryable is not None else current.non_retryable,
                updated_at=now,
            )
            await self._upsert_signature(conn, updated)
            return updated, await self._events(conn, [event], now)

        return await self._write(fn)


def _signature_params(s: Signature) -> tuple[Any, ...]:
    return (
        s.tenant, s.key, s.error_type, s.message, codec.dumps(list(s.frames), "frames"), s.task, s.occurrences,
        s.first_seen, s.last_seen, codec.dumps(list(s.sample_job_ids), "sample_job_ids"), s.status.value,
        s.non_retryable, s.updated_at,
    )  # fmt: skip
