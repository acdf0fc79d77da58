"""The optional ports of the HTTP layer on SQLite: API keys, dashboard sessions, idempotency records, queue
settings and the event log's bounds. Mixed into :class:`SqliteStore`, so every statement
runs on the store's one thread and connection, in ``BEGIN IMMEDIATE`` for writes (tables: migrations
``0003_api.sql``, ``0011_sessions_hooks.sql``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

from jobengine.core import codec
from jobengine.core import events as ev
from jobengine.core.ids import JobId
from jobengine.core.models import Event
from jobengine.ports.auth import ApiKey, ClaimState, IdempotencyClaim, IdempotencyRecord, SessionRecord
from jobengine.ports.queues import QueueSettings

from .rows import append_events, json_list, select_jobs

T = TypeVar("T")

_KEY_COLUMNS: Final = "id, tenant, name, scopes, secret_hash, created_at, revoked_at"
_SESSION_COLUMNS: Final = "token_hash, key_id, tenant, created_at, expires_at, ended_at"
_IDEM_COLUMNS: Final = "tenant, key, fingerprint, created_at, expires_at, locked_until, status, content_type, body"


class _Runs(Protocol):
    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


def _key(row: Sequence[Any]) -> ApiKey:
    return ApiKey(row[0], row[1], row[2], tuple(codec.loads(row[3])), row[4], row[5], row[6])


def _idem(row: Sequence[Any]) -> IdempotencyRecord:
    body = bytes(row[8]) if row[8] is not None else None
    return IdempotencyRecord(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], body)


def _claim(
    c: sqlite3.Connection, tenant: str, key: str, fingerprint: str, now: float, lock_seconds: float, ttl: float
) -> IdempotencyClaim:
    row = c.execute(f"SELECT {_IDEM_COLUMNS} FROM http_idempotency WHERE tenant = ? AND key = ?", (tenant, key))
    found = row.fetchone()
    if found is not None:
        rec = _idem(found)
        if rec.expires_at > now:
            if rec.status is not None:
                return IdempotencyClaim(ClaimState.DONE, rec)
            lapsed = rec.locked_until is not None and rec.locked_until <= now
            if not (lapsed and rec.fingerprint == fingerprint):
                return IdempotencyClaim(ClaimState.IN_FLIGHT, rec)
    rec = IdempotencyRecord(tenant, key, fingerprint, now, now + ttl, now + lock_seconds)
    c.execute(
        f"INSERT OR REPLACE INTO http_idempotency ({_IDEM_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
        (tenant, key, fingerprint, rec.created_at, rec.expires_at, rec.locked_until),
    )
    return IdempotencyClaim(ClaimState.CLAIMED, rec)


def _purge_dead(
    c: sqlite3.Connection,
    now: float,
    limit: int,
    tenant: str | None,
    ids: Sequence[JobId] | None,
    queue: str | None,
) -> list[Event]:
    where, args = ["jobs.state = 'dead'"], []
    if tenant is not None:
        where.append("jobs.tenant = ?")
        args.append(tenant)
    if ids is not None:
        where.append("jobs.id IN (SELECT value FROM json_each(?))")
        args.append(json_list(ids))
    if queue is not None:
        where.append("jobs.queue = ?")
        args.append(queue)
    doomed = select_jobs(c, " AND ".join(where) + " ORDER BY jobs.id LIMIT ?", [*args, max(0, limit)])
    if not doomed:
        return []
    # As retention deletes (writes.prune_jobs): the row and its outgoing edges; edges to it stay.
    gone = json_list(j.id for j in doomed)
    c.execute("DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))", (gone,))
    c.execute("DELETE FROM job_deps WHERE job_id IN (SELECT value FROM json_each(?))", (gone,))
    return append_events(c, [ev.job_event(ev.DELETED, j) for j in doomed], now)


class SqliteApiMixin:
    # -- KeyStore -----------------------------------------------------------------------------------
    async def insert_api_key(self: _Runs, key: ApiKey) -> None:
        row = (key.id, key.tenant, key.name, codec.dumps(list(key.scopes), "scopes"), key.secret_hash,
               key.created_at, key.revoked_at)  # fmt: skip
        await self._write(
            lambda c: c.execute(f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", row)
        )

    async def get_api_key(self: _Runs, key_id: str) -> ApiKey | None:
        def read(c: sqlite3.Connection) -> ApiKey | None:
            row = c.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            return _key(row) if row is not None else None

        return await self._read(read)

    async def list_api_keys(self: _Runs, tenant: str | None = None) -> list[ApiKey]:
        where, args = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        sql = f"SELECT {_KEY_COLUMNS} FROM api_keys {where} ORDER BY created_at, id"
        return await self._read(lambda c: [_key(r) for r in c.execute(sql, args)])

    async def revoke_api_key(self: _Runs, key_id: str, now: float) -> ApiKey | None:
        def write(c: sqlite3.Connection) -> ApiKey | None:
            c.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, key_id))
            c.execute("UPDATE dashboard_sessions SET ended_at = ? WHERE key_id = ? AND ended_at IS NULL", (now, key_id))
            row = c.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            return _key(row) if row is not None else None

        return await self._write(write)

    # -- SessionStore -------------------------------------------------------------------------------
    async def insert_session(self: _Runs, session: SessionRecord) -> None:
        row = (session.token_hash, session.key_id, session.tenant, session.created_at, session.expires_at,
               session.ended_at)  # fmt: skip
        await self._write(
            lambda c: c.execute(f"INSERT INTO dashboard_sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)", row)
        )

    async def get_session(self: _Runs, token_hash: str) -> SessionRecord | None:
        def read(c: sqlite3.Connection) -> SessionRecord | None:
            sql = f"SELECT {_SESSION_COLUMNS} FROM dashboard_sessions WHERE token_hash = ?"
            row = c.execute(sql, (token_hash,)).fetchone()
            return SessionRecord(*row) if row is not None else None

        return await self._read(read)

    async def end_session(self: _Runs, token_hash: str, now: float) -> None:
        sql = "UPDATE dashboard_sessions SET ended_at = ? WHERE token_hash = ? AND ended_at IS NULL"
        await self._write(lambda c: c.execute(sql, (now, token_hash)))

    async def prune_sessions(self: _Runs, now: float, limit: int) -> int:
        sql = ("DELETE FROM dashboard_sessions WHERE token_hash IN (SELECT token_hash FROM dashboard_sessions "
               "WHERE expires_at <= ? OR ended_at <= ? LIMIT ?)")  # fmt: skip
        return await self._write(lambda c: c.execute(sql, (now, now, limit)).rowcount)

    # -- IdempotencyStore ---------------------------------------------------------------------------
    async def claim_idempotency_key(
        self: _Runs, tenant: str, key: str, fingerprint: str, now: float, lock_seconds: float, ttl: float
    ) -> IdempotencyClaim:
        return await self._write(lambda c: _claim(c, tenant, key, fingerprint, now, lock_seconds, ttl))

    async def finish_idempotency_key(
        self: _Runs, tenant: str, key: str, status: int, content_type: str, body: bytes
    ) -> None:
        sql = (
            "UPDATE http_idempotency SET status = ?, content_type = ?, body = ?, locked_until = NULL "
            "WHERE tenant = ? AND key = ?"
        )
        await self._write(lambda c: c.execute(sql, (status, content_type, body, tenant, key)))

    async def release_idempotency_key(self: _Runs, tenant: str, key: str) -> None:
        sql = "DELETE FROM http_idempotency WHERE tenant = ? AND key = ? AND status IS NULL"
        await self._write(lambda c: c.execute(sql, (tenant, key)))

    async def prune_idempotency_keys(self: _Runs, now: float, limit: int) -> int:
        sql = (
            "DELETE FROM http_idempotency WHERE rowid IN "
            "(SELECT rowid FROM http_idempotency WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)"
        )
        return await self._write(lambda c: c.execute(sql, (now, limit)).rowcount)

    # -- QueueSettingsStore -------------------------------------------------------------------------
    async def list_queue_settings(self: _Runs) -> list[QueueSettings]:
        sql = "SELECT queue, paused, concurrency, updated_at FROM queue_settings ORDER BY queue"
        return await self._read(lambda c: [QueueSettings(r[0], bool(r[1]), r[2], r[3]) for r in c.execute(sql)])

    async def set_queue_settings(self: _Runs, settings: QueueSettings) -> QueueSettings:
        sql = "INSERT OR REPLACE INTO queue_settings (queue, paused, concurrency, updated_at) VALUES (?, ?, ?, ?)"
        args = (settings.queue, int(settings.paused), settings.concurrency, settings.updated_at)
        await self._write(lambda c: c.execute(sql, args))
        return settings

    async def running_counts(self: _Runs, queues: Sequence[str]) -> dict[str, int]:
        names = list(dict.fromkeys(queues))
        if not names:
            return {}
        # state = 'running' matches the partial index jobs_lease: only running rows are read.
        sql = (
            f"SELECT queue, count(*) FROM jobs WHERE state = 'running' AND queue IN ({', '.join('?' * len(names))}) "
            "GROUP BY queue"
        )
        return await self._read(lambda c: {r[0]: int(r[1]) for r in c.execute(sql, names)})

    # -- EventLogStore ------------------------------------------------------------------------------
    async def event_bounds(self: _Runs) -> tuple[int, int]:
        def read(c: sqlite3.Connection) -> tuple[int, int]:
            oldest = c.execute("SELECT min(id) FROM events").fetchone()[0]
            # AUTOINCREMENT keeps the highest id ever assigned in sqlite_sequence, pruned or not.
            newest = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
            return int(oldest or 0), int(newest[0]) if newest else 0

        return await self._read(read)

    async def prune_events(self: _Runs, before: float, limit: int) -> int:
        # Ids grow with time (one writer at a time), so the oldest by id are the oldest by time.
        sql = "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE at < ? ORDER BY id LIMIT ?)"
        return await self._write(lambda c: c.execute(sql, (before, limit)).rowcount)

    # -- DeadLetterStore ----------------------------------------------------------------------------
    async def purge_dead_jobs(
        self: _Runs,
        now: float,
        limit: int,
        *,
        tenant: str | None = None,
        ids: Sequence[JobId] | None = None,
        queue: str | None = None,
    ) -> list[Event]:
        return await self._write(lambda c: _purge_dead(c, now, limit, tenant, ids, queue))
