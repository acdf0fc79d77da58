"""The optional ports of the HTTP layer on PostgreSQL: API keys, dashboard sessions, idempotency records,
queue settings and the event log's bounds (tables: migrations ``0003_api.sql``,
``0011_sessions_hooks.sql``). Mixed into :class:`PostgresStore`; every statement goes through its pool,
retry and error translation (``_run``)."""

from __future__ import annotations

from collections.abc import Sequence

from jobengine.backends.postgres.mixin import Conn, Row, StoreCalls, qualify
from jobengine.core.ids import JobId
from jobengine.core.models import Event
from jobengine.ports.auth import ApiKey, ClaimState, IdempotencyClaim, IdempotencyRecord, SessionRecord
from jobengine.ports.queues import QueueSettings

_KEY_COLUMNS = "id, tenant, name, scopes, secret_hash, created_at, revoked_at"
_SESSION_COLUMNS = "token_hash, key_id, tenant, created_at, expires_at, ended_at"
_IDEM_COLUMNS = "tenant, key, fingerprint, created_at, expires_at, locked_until, status, content_type, body"

# Revoke a key (the first time counts) and end its dashboard sessions, in one statement.
_REVOKE = f"""WITH ended AS (
    UPDATE {{s}}dashboard_sessions SET ended_at = %(now)s::float8 WHERE key_id = %(id)s::text AND ended_at IS NULL
)
UPDATE {{s}}api_keys SET revoked_at = coalesce(revoked_at, %(now)s::float8) WHERE id = %(id)s::text
RETURNING {_KEY_COLUMNS}"""

# Insert a claim, or take over an expired record or a lapsed one of the same request; no row: not ours.
_CLAIM = """INSERT INTO {s}http_idempotency AS h (tenant, key, fingerprint, created_at, expires_at, locked_until)
VALUES (%(tenant)s::text, %(key)s::text, %(fp)s::text, %(now)s::float8, %(expires)s::float8, %(locked)s::float8)
ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at, locked_until = EXCLUDED.locked_until, status = NULL, content_type = NULL,
    body = NULL
WHERE h.expires_at <= %(now)s::float8
   OR (h.status IS NULL AND h.locked_until <= %(now)s::float8 AND h.fingerprint = EXCLUDED.fingerprint)
RETURNING 1"""

# As retention deletes (sql.PRUNE): the row, its outgoing edges and watermarks; edges to it stay.
_PURGE_DEAD = """WITH cand AS (
    SELECT j.id FROM {s}jobs j
    WHERE j.state = 'dead' AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
      AND (%(ids)s::text[] IS NULL OR j.id = ANY(%(ids)s::text[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    ORDER BY j.id LIMIT %(limit)s::int4
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM {s}jobs j USING cand WHERE j.id = cand.id AND j.state = 'dead'
    RETURNING j.id, j.tenant, j.queue, j.task, j.attempt
), deps AS (
    DELETE FROM {s}job_dependencies d USING del WHERE d.job_id = del.id
), marks AS (
    DELETE FROM {s}job_watermarks m USING del WHERE m.job_id = del.id
), ev AS (
    INSERT INTO {s}events (at, type, tenant, job_id, queue, task, data)
    SELECT %(now)s::float8, 'job.deleted', tenant, id, queue, task,
           jsonb_build_object('state', 'dead', 'attempt', attempt) FROM del ORDER BY id
    RETURNING id, at, type, tenant, job_id, queue, task, data::text
)
SELECT * FROM ev ORDER BY id"""


# How far past a follower's cursor the gap check looks (ids, through the primary key): more than one read
# of the feed takes, so the read never passes the checked range.
_SETTLE_SCAN = 5000
# The last id before the first hole in the sequence that a young row follows: the hole may be an open
# transaction's id (or several).
_SETTLED = """WITH tail AS (
    SELECT id, at FROM {s}events WHERE id > %(after)s::int8 ORDER BY id LIMIT %(scan)s::int4
), steps AS (
    SELECT id, at, lag(id) OVER (ORDER BY id) AS prev FROM tail
)
SELECT (SELECT coalesce(prev, %(after)s::int8) FROM steps
        WHERE id <> coalesce(prev, %(after)s::int8) + 1 AND at > %(young)s::float8 ORDER BY id LIMIT 1),
       (SELECT max(id) FROM {s}events)"""


def _key(r: Row) -> ApiKey:
    return ApiKey(r[0], r[1], r[2], tuple(r[3]), r[4], r[5], r[6])


def _idem(r: Row) -> IdempotencyRecord:
    return IdempotencyRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bytes(r[8]) if r[8] is not None else None)


class PostgresApiMixin:
    # -- KeyStore -----------------------------------------------------------------------------------
    async def insert_api_key(self: StoreCalls, key: ApiKey) -> None:
        q = qualify(self, f"INSERT INTO {{s}}api_keys ({_KEY_COLUMNS}) VALUES (%(id)s, %(tenant)s, %(name)s, "
                          "%(scopes)s, %(hash)s, %(created)s, %(revoked)s)")  # fmt: skip
        params = {"id": key.id, "tenant": key.tenant, "name": key.name, "scopes": list(key.scopes),
                  "hash": key.secret_hash, "created": key.created_at, "revoked": key.revoked_at}  # fmt: skip

        async def op(conn: Conn) -> None:
            await conn.execute(q, params)

        await self._run(op, retry=False)

    async def get_api_key(self: StoreCalls, key_id: str) -> ApiKey | None:
        rows = await self._rows(qualify(self, f"SELECT {_KEY_COLUMNS} FROM {{s}}api_keys WHERE id = %(id)s::text"),
                                {"id": key_id})  # fmt: skip
        return _key(rows[0]) if rows else None

    async def list_api_keys(self: StoreCalls, tenant: str | None = None) -> list[ApiKey]:
        q = f"SELECT {_KEY_COLUMNS} FROM {{s}}api_keys WHERE (%(t)s::text IS NULL OR tenant = %(t)s::text) "
        rows = await self._rows(qualify(self, q + "ORDER BY created_at, id"), {"t": tenant})
        return [_key(r) for r in rows]

    async def revoke_api_key(self: StoreCalls, key_id: str, now: float) -> ApiKey | None:
        rows = await self._rows(qualify(self, _REVOKE), {"id": key_id, "now": now})
        return _key(rows[0]) if rows else None

    # -- SessionStore -------------------------------------------------------------------------------
    async def insert_session(self: StoreCalls, session: SessionRecord) -> None:
        q = (f"INSERT INTO {{s}}dashboard_sessions ({_SESSION_COLUMNS}) VALUES (%(hash)s::text, %(key)s::text, "
             "%(tenant)s::text, %(created)s::float8, %(expires)s::float8, %(ended)s::float8) RETURNING 1")  # fmt: skip
        params = {"hash": session.token_hash, "key": session.key_id, "tenant": session.tenant,
                  "created": session.created_at, "expires": session.expires_at, "ended": session.ended_at}  # fmt: skip
        await self._rows(qualify(self, q), params, retry=False)

    async def get_session(self: StoreCalls, token_hash: str) -> SessionRecord | None:
        q = f"SELECT {_SESSION_COLUMNS} FROM {{s}}dashboard_sessions WHERE token_hash = %(hash)s::text"
        rows = await self._rows(qualify(self, q), {"hash": token_hash})
        return SessionRecord(*rows[0]) if rows else None

    async def end_session(self: StoreCalls, token_hash: str, now: float) -> None:
        q = ("UPDATE {s}dashboard_sessions SET ended_at = %(now)s::float8 WHERE token_hash = %(hash)s::text "
             "AND ended_at IS NULL RETURNING 1")  # fmt: skip
        await self._rows(qualify(self, q), {"hash": token_hash, "now": now})

    async def prune_sessions(self: StoreCalls, now: float, limit: int) -> int:
        q = ("DELETE FROM {s}dashboard_sessions WHERE token_hash IN (SELECT token_hash FROM {s}dashboard_sessions "
             "WHERE expires_at <= %(now)s::float8 OR ended_at <= %(now)s::float8 LIMIT %(limit)s::int4) "
             "RETURNING 1")  # fmt: skip
        return len(await self._rows(qualify(self, q), {"now": now, "limit": limit}))

    # -- IdempotencyStore ---------------------------------------------------------------------------
    async def claim_idempotency_key(
        self: StoreCalls, tenant: str, key: str, fingerprint: str, now: float, lock_seconds: float, ttl: float
    ) -> IdempotencyClaim:
        claim = qualify(self, _CLAIM)
        select = qualify(self, f"SELECT {_IDEM_COLUMNS} FROM {{s}}http_idempotency "
                               "WHERE tenant = %(tenant)s::text AND key = %(key)s::text")  # fmt: skip
        params = {"tenant": tenant, "key": key, "fp": fingerprint, "now": now, "expires": now + ttl,
                  "locked": now + lock_seconds}  # fmt: skip
        for _ in range(5):  # the row may be released between the two statements: try again
            if await self._rows(claim, params, retry=False):
                return IdempotencyClaim(
                    ClaimState.CLAIMED, IdempotencyRecord(tenant, key, fingerprint, now, now + ttl, now + lock_seconds)
                )
            rows = await self._rows(select, params)
            if rows:
                rec = _idem(rows[0])
                return IdempotencyClaim(ClaimState.DONE if rec.status is not None else ClaimState.IN_FLIGHT, rec)
        raise AssertionError("idempotency claim kept racing with releases")

    async def finish_idempotency_key(
        self: StoreCalls, tenant: str, key: str, status: int, content_type: str, body: bytes
    ) -> None:
        q = ("UPDATE {s}http_idempotency SET status = %(status)s::int4, content_type = %(ct)s::text, "
             "body = %(body)s::bytea, locked_until = NULL WHERE tenant = %(tenant)s::text AND key = %(key)s::text "
             "RETURNING 1")  # fmt: skip
        await self._rows(
            qualify(self, q), {"status": status, "ct": content_type, "body": body, "tenant": tenant, "key": key}
        )

    async def release_idempotency_key(self: StoreCalls, tenant: str, key: str) -> None:
        q = ("DELETE FROM {s}http_idempotency WHERE tenant = %(tenant)s::text AND key = %(key)s::text "
             "AND status IS NULL RETURNING 1")  # fmt: skip
        await self._rows(qualify(self, q), {"tenant": tenant, "key": key})

    async def prune_idempotency_keys(self: StoreCalls, now: float, limit: int) -> int:
        q = ("DELETE FROM {s}http_idempotency WHERE (tenant, key) IN (SELECT tenant, key FROM {s}http_idempotency "
             "WHERE expires_at <= %(now)s::float8 ORDER BY expires_at LIMIT %(limit)s::int4) RETURNING 1")  # fmt: skip
        return len(await self._rows(qualify(self, q), {"now": now, "limit": limit}))

    # -- QueueSettingsStore -------------------------------------------------------------------------
    async def list_queue_settings(self: StoreCalls) -> list[QueueSettings]:
        rows = await self._rows(
            qualify(self, "SELECT queue, paused, concurrency, updated_at FROM {s}queue_settings ORDER BY queue"), {}
        )
        return [QueueSettings(r[0], bool(r[1]), r[2], r[3]) for r in rows]

    async def set_queue_settings(self: StoreCalls, settings: QueueSettings) -> QueueSettings:
        q = ("INSERT INTO {s}queue_settings (queue, paused, concurrency, updated_at) VALUES (%(q)s::text, "
             "%(p)s::bool, %(c)s::int4, %(at)s::float8) ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, "
             "concurrency = EXCLUDED.concurrency, updated_at = EXCLUDED.updated_at RETURNING 1")  # fmt: skip
        params = {"q": settings.queue, "p": settings.paused, "c": settings.concurrency, "at": settings.updated_at}
        await self._rows(qualify(self, q), params)
        return settings

    async def running_counts(self: StoreCalls, queues: Sequence[str]) -> dict[str, int]:
        if not queues:
            return {}
        q = ("SELECT queue, count(*) FROM {s}jobs WHERE state = 'running' AND queue = ANY(%(queues)s::text[]) "
             "GROUP BY queue")  # fmt: skip
        return {r[0]: int(r[1]) for r in await self._rows(qualify(self, q), {"queues": list(set(queues))})}

    # -- EventLogStore ------------------------------------------------------------------------------
    async def event_bounds(self: StoreCalls) -> tuple[int, int]:
        rows = await self._rows(qualify(self, "SELECT min(id), max(id) FROM {s}events"), {})
        return int(rows[0][0] or 0), int(rows[0][1] or 0)

    async def settled_event_id(self: StoreCalls, after_id: int, now: float, grace: float) -> tuple[int, int]:
        rows = await self._rows(
            qualify(self, _SETTLED),
            {"after": after_id, "young": now - grace, "scan": _SETTLE_SCAN},
        )
        before_hole, newest = rows[0]
        newest = max(after_id, int(newest or 0))
        if before_hole is not None:
            return int(before_hole), newest
        return min(newest, after_id + _SETTLE_SCAN), newest  # past the scan: not checked yet

    async def prune_events(self: StoreCalls, before: float, limit: int) -> int:
        q = ("DELETE FROM {s}events WHERE id IN (SELECT id FROM {s}events WHERE at < %(before)s::float8 "
             "ORDER BY id LIMIT %(limit)s::int4) RETURNING 1")  # fmt: skip
        return len(await self._rows(qualify(self, q), {"before": before, "limit": limit}))

    # -- DeadLetterStore ----------------------------------------------------------------------------
    async def purge_dead_jobs(
        self: StoreCalls,
        now: float,
        limit: int,
        *,
        tenant: str | None = None,
        ids: Sequence[JobId] | None = None,
        queue: str | None = None,
    ) -> list[Event]:
        from jobengine.backends.postgres.rows import event_from_row

        params = {"now": now, "limit": max(0, limit), "tenant": tenant, "queue": queue,
                  "ids": list(ids) if ids is not None else None}  # fmt: skip
        return [event_from_row(r) for r in await self._rows(qualify(self, _PURGE_DEAD), params)]
