"""The task pack registry (:class:`~jobengine.ports.packs.PackStore`), mixed into both SQL stores.

Metadata only: the content is in a blob store (``packs_blob_store``). The version row's primary key
decides concurrent uploads of one version (``ON CONFLICT DO NOTHING``: exactly one insert wins, the others
read the winner). Tables: migrations ``0006_packs``, ``0009_pack_blob_store``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from jobengine.core import codec
from jobengine.ports.packs import NewPackEvent, PackEvent, PackStatus, PackVersion

from .base import HasDb, Row, Tx, conditions, marks

_COLUMNS: Final = (
    "name, version, sha256, size, status, manifest, description, uploaded_by, uploaded_at, updated_at, "
    "status_reason, approved_by"
)
_GET: Final = f"SELECT {_COLUMNS} FROM {{s}}pack_versions WHERE name = ? AND version = ?"


def _version(tx: Tx, r: Row) -> PackVersion:
    return PackVersion(r[0], r[1], r[2], int(r[3]), PackStatus(r[4]), tx.d.loads(r[5]), r[6], r[7], r[8], r[9],
                       r[10], r[11])  # fmt: skip


async def _event(tx: Tx, name: str, version: str, e: NewPackEvent) -> None:
    await tx.run(
        "INSERT INTO {s}pack_events (name, version, type, actor, reason, at) VALUES (?, ?, ?, ?, ?, ?)",
        (name, version, e.type, e.actor, e.reason, e.at),
    )


async def _get(tx: Tx, name: str, version: str) -> PackVersion | None:
    rows = await tx.rows(_GET, (name, version))
    return _version(tx, rows[0]) if rows else None


class SqlPacksMixin:
    async def insert_pack_version(self: HasDb, version: PackVersion, event: NewPackEvent) -> tuple[PackVersion, bool]:
        v = version
        row = (v.name, v.version, v.sha256, v.size, v.status.value, codec.dumps(dict(v.manifest), "manifest"),
               v.description, v.uploaded_by, v.uploaded_at, v.updated_at, v.status_reason, v.approved_by)  # fmt: skip
        sql = (f"INSERT INTO {{s}}pack_versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, {{json}}, ?, ?, ?, ?, ?, ?) "
               "ON CONFLICT (name, version) DO NOTHING RETURNING 1")  # fmt: skip

        async def op(tx: Tx) -> tuple[PackVersion, bool]:
            if await tx.rows(sql, row):
                await _event(tx, v.name, v.version, event)
                return v, True
            # Lost the race (or the version existed): the winner's row, committed by now.
            found = await _get(tx, v.name, v.version)
            assert found is not None
            return found, False

        return await self.db.write(op, retry=False)

    async def get_pack_version(self: HasDb, name: str, version: str) -> PackVersion | None:
        return await self.db.read(lambda tx: _get(tx, name, version))

    async def pack_versions_by_digest(self: HasDb, sha256: str) -> list[PackVersion]:
        async def op(tx: Tx) -> list[PackVersion]:
            rows = await tx.rows(f"SELECT {_COLUMNS} FROM {{s}}pack_versions WHERE sha256 = ? ORDER BY name, version",
                                 (sha256,))  # fmt: skip
            return [_version(tx, r) for r in rows]

        return await self.db.read(op)

    async def list_pack_versions(self: HasDb, name: str | None = None, query: str | None = None) -> list[PackVersion]:
        clause, args = conditions(("name = ?", name))
        if query:
            # position in lower(): no LIKE wildcards to escape in what a user typed
            clause += " AND ({instr}(lower(name), ?) > 0 OR {instr}(lower(description), ?) > 0)"
            args += [query.lower(), query.lower()]
        sql = f"SELECT {_COLUMNS} FROM {{s}}pack_versions WHERE {clause} ORDER BY name, uploaded_at, version"

        async def op(tx: Tx) -> list[PackVersion]:
            return [_version(tx, r) for r in await tx.rows(sql, args)]

        return await self.db.read(op)

    async def set_pack_status(
        self: HasDb,
        name: str,
        version: str,
        expected: Collection[PackStatus],
        status: PackStatus,
        event: NewPackEvent,
        approved_by: str | None = None,
    ) -> PackVersion | None:
        allowed = [s.value for s in expected]
        sql = f"""UPDATE {{s}}pack_versions SET status = ?, status_reason = ?, updated_at = ?,
            approved_by = coalesce(?, approved_by)
            WHERE name = ? AND version = ? AND status IN ({marks(len(allowed))})"""

        async def op(tx: Tx) -> PackVersion | None:
            if not allowed:
                return None
            args = (status.value, event.reason, event.at, approved_by, name, version, *allowed)
            if await tx.run(sql, args) != 1:
                return None
            await _event(tx, name, version, event)
            return await _get(tx, name, version)

        return await self.db.write(op, retry=False)

    async def add_pack_event(self: HasDb, name: str, version: str, event: NewPackEvent) -> None:
        async def op(tx: Tx) -> None:
            await _event(tx, name, version, event)

        await self.db.write(op, retry=False)

    async def list_pack_events(self: HasDb, name: str, version: str | None = None) -> list[PackEvent]:
        sql = "SELECT id, name, version, type, actor, at, reason FROM {s}pack_events WHERE name = ?"
        args = (name,) if version is None else (name, version)
        sql += " ORDER BY id" if version is None else " AND version = ? ORDER BY id"
        rows = await self.db.read(lambda tx: tx.rows(sql, args))
        return [PackEvent(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]
