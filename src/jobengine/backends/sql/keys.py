"""API keys, dashboard sessions and the HTTP API's idempotency records (tables: migrations ``0003_api``,
``0011_sessions_hooks``): the :class:`~jobengine.ports.auth.KeyStore`, ``SessionStore`` and
``IdempotencyStore`` ports, mixed into both SQL stores."""

from __future__ import annotations

from typing import Final

from jobengine.ports.auth import ApiKey, ClaimState, IdempotencyClaim, IdempotencyRecord, SessionRecord

from .base import HasDb, Row, Tx, conditions, marks

_KEY: Final = "id, tenant, name, scopes, secret_hash, created_at, revoked_at"
_SESSION: Final = "token_hash, key_id, tenant, created_at, expires_at, ended_at"
_IDEM: Final = "tenant, key, fingerprint, created_at, expires_at, locked_until, status, content_type, body"

# Insert a claim, or take over an expired record or a lapsed one of the same request; no row: not ours.
_CLAIM: Final = f"""INSERT INTO {{s}}http_idempotency AS h ({_IDEM}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL)
ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at, locked_until = EXCLUDED.locked_until, status = NULL, content_type = NULL,
    body = NULL
WHERE h.expires_at <= ? OR (h.status IS NULL AND h.locked_until <= ? AND h.fingerprint = EXCLUDED.fingerprint)
RETURNING 1"""


def _key(tx: Tx, r: Row) -> ApiKey:
    return ApiKey(r[0], r[1], r[2], tx.d.strings(r[3]), r[4], r[5], r[6])


def _idem(r: Row) -> IdempotencyRecord:
    return IdempotencyRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], bytes(r[8]) if r[8] is not None else None)


async def _get_key(tx: Tx, key_id: str) -> ApiKey | None:
    rows = await tx.rows(f"SELECT {_KEY} FROM {{s}}api_keys WHERE id = ?", (key_id,))
    return _key(tx, rows[0]) if rows else None


class SqlKeysMixin:
    # -- KeyStore -----------------------------------------------------------------------------------
    async def insert_api_key(self: HasDb, key: ApiKey) -> None:
        async def op(tx: Tx) -> None:
            row = (key.id, key.tenant, key.name, tx.d.array(key.scopes), key.secret_hash, key.created_at,
                   key.revoked_at)  # fmt: skip
            await tx.run(f"INSERT INTO {{s}}api_keys ({_KEY}) VALUES ({marks(7)})", row)

        await self.db.write(op, retry=False)

    async def get_api_key(self: HasDb, key_id: str) -> ApiKey | None:
        return await self.db.read(lambda tx: _get_key(tx, key_id))

    async def list_api_keys(self: HasDb, tenant: str | None = None) -> list[ApiKey]:
        where, args = conditions(("tenant = ?", tenant))

        async def op(tx: Tx) -> list[ApiKey]:
            rows = await tx.rows(f"SELECT {_KEY} FROM {{s}}api_keys WHERE {where} ORDER BY created_at, id", args)
            return [_key(tx, r) for r in rows]

        return await self.db.read(op)

    async def revoke_api_key(self: HasDb, key_id: str, now: float) -> ApiKey | None:
        async def op(tx: Tx) -> ApiKey | None:
            await tx.run("UPDATE {s}api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, key_id))
            sql = "UPDATE {s}dashboard_sessions SET ended_at = ? WHERE key_id = ? AND ended_at IS NULL"
            await tx.run(sql, (now, key_id))
            return await _get_key(tx, key_id)

        return await self.db.write(op)

    # -- SessionStore -------------------------------------------------------------------------------
    async def insert_session(self: HasDb, s: SessionRecord) -> None:
        row = (s.token_hash, s.key_id, s.tenant, s.created_at, s.expires_at, s.ended_at)
        sql = f"INSERT INTO {{s}}dashboard_sessions ({_SESSION}) VALUES ({marks(6)})"
        await self.db.write(lambda tx: tx.run(sql, row), retry=False)

    async def get_session(self: HasDb, token_hash: str) -> SessionRecord | None:
        sql = f"SELECT {_SESSION} FROM {{s}}dashboard_sessions WHERE token_hash = ?"
        rows = await self.db.read(lambda tx: tx.rows(sql, (token_hash,)))
        return SessionRecord(*rows[0]) if rows else None

    async def end_session(self: HasDb, token_hash: str, now: float) -> None:
        sql = "UPDATE {s}dashboard_sessions SET ended_at = ? WHERE token_hash = ? AND ended_at IS NULL"
        await self.db.write(lambda tx: tx.run(sql, (now, token_hash)))

    async def prune_sessions(self: HasDb, now: float, limit: int) -> int:
        sql = ("DELETE FROM {s}dashboard_sessions WHERE token_hash IN (SELECT token_hash FROM {s}dashboard_sessions "
               "WHERE expires_at <= ? OR ended_at <= ? LIMIT ?)")  # fmt: skip
        return await self.db.write(lambda tx: tx.run(sql, (now, now, limit)))

    # -- IdempotencyStore ---------------------------------------------------------------------------
    async def claim_idempotency_key(
        self: HasDb, tenant: str, key: str, fingerprint: str, now: float, lock_seconds: float, ttl: float
    ) -> IdempotencyClaim:
        rec = IdempotencyRecord(tenant, key, fingerprint, now, now + ttl, now + lock_seconds)
        select = f"SELECT {_IDEM} FROM {{s}}http_idempotency WHERE tenant = ? AND key = ?"

        async def op(tx: Tx) -> IdempotencyClaim | None:
            if await tx.rows(_CLAIM, (tenant, key, fingerprint, now, rec.expires_at, rec.locked_until, now, now)):
                return IdempotencyClaim(ClaimState.CLAIMED, rec)
            rows = await tx.rows(select, (tenant, key))
            if not rows:
                return None  # released between the two statements (PostgreSQL): try again
            found = _idem(rows[0])
            return IdempotencyClaim(ClaimState.DONE if found.status is not None else ClaimState.IN_FLIGHT, found)

        for _ in range(5):
            claim = await self.db.write(op, retry=False)
            if claim is not None:
                return claim
        raise AssertionError("idempotency claim kept racing with releases")

    async def finish_idempotency_key(
        self: HasDb, tenant: str, key: str, status: int, content_type: str, body: bytes
    ) -> None:
        sql = ("UPDATE {s}http_idempotency SET status = ?, content_type = ?, body = ?, locked_until = NULL "
               "WHERE tenant = ? AND key = ?")  # fmt: skip
        await self.db.write(lambda tx: tx.run(sql, (status, content_type, body, tenant, key)))

    async def release_idempotency_key(self: HasDb, tenant: str, key: str) -> None:
        sql = "DELETE FROM {s}http_idempotency WHERE tenant = ? AND key = ? AND status IS NULL"
        await self.db.write(lambda tx: tx.run(sql, (tenant, key)))

    async def prune_idempotency_keys(self: HasDb, now: float, limit: int) -> int:
        sql = ("DELETE FROM {s}http_idempotency WHERE (tenant, key) IN (SELECT tenant, key FROM {s}http_idempotency "
               "WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)")  # fmt: skip
        return await self.db.write(lambda tx: tx.run(sql, (now, limit)))
