"""The task pack registry on PostgreSQL (:class:`~jobengine.ports.packs.PackStore`), mixed into PostgresStore.

Metadata only: the content is in a blob store (``packs_blob_store``; ``backends/postgres/blobs.py`` when it
is this database's ``pack_blobs``). The version row's primary key decides concurrent uploads of one
version (``ON CONFLICT DO NOTHING``: exactly one insert wins, the others read the winner). Tables:
migrations ``0006_packs.sql``, ``0009_pack_blob_store.sql``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from jobengine.backends.postgres.mixin import Conn, Row, StoreCalls, qualify
from jobengine.ports.packs import NewPackEvent, PackEvent, PackStatus, PackVersion

_COLUMNS = (
    "name, version, sha256, size, status, manifest, description, uploaded_by, uploaded_at, updated_at, "
    "status_reason, approved_by"
)
_EVENT = """INSERT INTO {s}pack_events (name, version, type, actor, reason, at)
VALUES (%(name)s, %(version)s, %(type)s, %(actor)s, %(reason)s, %(at)s)"""


def _version(r: Row) -> PackVersion:
    return PackVersion(r[0], r[1], r[2], int(r[3]), PackStatus(r[4]), r[5], r[6], r[7], r[8], r[9], r[10], r[11])


def _event_params(name: str, version: str, e: NewPackEvent) -> dict[str, Any]:
    return {"name": name, "version": version, "type": e.type, "actor": e.actor, "reason": e.reason, "at": e.at}


def _rollback(tx: psycopg.AsyncTransaction) -> None:
    """Roll the transaction block back (psycopg's Rollback exception, swallowed by the block). Typed as
    returning, because the block swallows it: mypy would otherwise take the code after the block as dead."""
    raise psycopg.Rollback(tx)


class PostgresPackMixin:
    async def insert_pack_version(
        self: StoreCalls, version: PackVersion, event: NewPackEvent
    ) -> tuple[PackVersion, bool]:
        v = version
        row = qualify(self, f"INSERT INTO {{s}}pack_versions ({_COLUMNS}) VALUES (%(name)s, %(version)s, %(sha)s, "
                            "%(size)s, %(status)s, %(manifest)s, %(description)s, %(by)s, %(at)s, %(at)s, %(reason)s, "
                            "%(approved_by)s) ON CONFLICT (name, version) DO NOTHING RETURNING 1")  # fmt: skip
        get = qualify(
            self, f"SELECT {_COLUMNS} FROM {{s}}pack_versions WHERE name = %(name)s AND version = %(version)s"
        )
        params = {"sha": v.sha256, "size": v.size, "at": v.uploaded_at, "name": v.name,
                  "version": v.version, "status": v.status.value, "manifest": Jsonb(dict(v.manifest)),
                  "description": v.description, "by": v.uploaded_by, "reason": v.status_reason,
                  "approved_by": v.approved_by}  # fmt: skip
        ev = qualify(self, _EVENT)

        async def op(conn: Conn) -> tuple[PackVersion, bool]:
            created = False
            async with conn.transaction() as tx:
                cur = await conn.execute(row, params)
                created = await cur.fetchone() is not None
                if created:
                    await conn.execute(ev, _event_params(v.name, v.version, event))
                else:
                    _rollback(tx)  # the version exists: keep nothing of this upload
            if created:
                return v, True
            # Lost the race (or the version existed): read the winner's row, committed by now.
            found = await (await conn.execute(get, params)).fetchone()
            assert found is not None
            return _version(found), False

        return await self._run(op, retry=False)

    async def get_pack_version(self: StoreCalls, name: str, version: str) -> PackVersion | None:
        q = qualify(self, f"SELECT {_COLUMNS} FROM {{s}}pack_versions WHERE name = %(name)s AND version = %(version)s")
        rows = await self._rows(q, {"name": name, "version": version})
        return _version(rows[0]) if rows else None

    async def pack_versions_by_digest(self: StoreCalls, sha256: str) -> list[PackVersion]:
        q = qualify(self, f"SELECT {_COLUMNS} FROM {{s}}pack_versions WHERE sha256 = %(sha)s ORDER BY name, version")
        return [_version(r) for r in await self._rows(q, {"sha": sha256})]

    async def list_pack_versions(
        self: StoreCalls, name: str | None = None, query: str | None = None
    ) -> list[PackVersion]:
        q = qualify(self, f"""SELECT {_COLUMNS} FROM {{s}}pack_versions
            WHERE (%(name)s::text IS NULL OR name = %(name)s::text)
              AND (%(q)s::text IS NULL OR strpos(lower(name), %(q)s::text) > 0
                   OR strpos(lower(description), %(q)s::text) > 0)
            ORDER BY name, uploaded_at, version""")  # fmt: skip
        return [_version(r) for r in await self._rows(q, {"name": name, "q": query.lower() if query else None})]

    async def set_pack_status(
        self: StoreCalls,
        name: str,
        version: str,
        expected: Collection[PackStatus],
        status: PackStatus,
        event: NewPackEvent,
        approved_by: str | None = None,
    ) -> PackVersion | None:
        q = qualify(self, f"""UPDATE {{s}}pack_versions SET status = %(status)s, status_reason = %(reason)s,
                updated_at = %(at)s, approved_by = coalesce(%(approved_by)s::text, approved_by)
            WHERE name = %(name)s AND version = %(version)s AND status = ANY(%(expected)s::text[])
            RETURNING {_COLUMNS}""")  # fmt: skip
        ev = qualify(self, _EVENT)
        params = {"status": status.value, "reason": event.reason, "at": event.at, "approved_by": approved_by,
                  "name": name, "version": version, "expected": [s.value for s in expected]}  # fmt: skip

        async def op(conn: Conn) -> PackVersion | None:
            async with conn.transaction():
                found = await (await conn.execute(q, params)).fetchone()
                if found is None:
                    return None
                await conn.execute(ev, _event_params(name, version, event))
                return _version(found)

        return await self._run(op, retry=False)

    async def list_pack_events(self: StoreCalls, name: str, version: str | None = None) -> list[PackEvent]:
        q = qualify(
            self,
            """SELECT id, name, version, type, actor, at, reason FROM {s}pack_events
            WHERE name = %(name)s AND (%(version)s::text IS NULL OR version = %(version)s::text) ORDER BY id""",
        )
        rows = await self._rows(q, {"name": name, "version": version})
        return [PackEvent(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]
