"""The task pack registry on SQLite (:class:`~jobengine.ports.packs.PackStore`), mixed into SqliteStore.

Metadata only: the content is in a blob store (``packs_blob_store``; ``backends/sqlite/blobs.py`` when it
is this database's ``pack_blobs``). Tables: migrations ``0006_packs.sql``, ``0009_pack_blob_store.sql``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, Protocol, TypeVar

from jobengine.core import codec
from jobengine.ports.packs import NewPackEvent, PackEvent, PackStatus, PackVersion

T = TypeVar("T")

_COLUMNS: Final = (
    "name, version, sha256, size, status, manifest, description, uploaded_by, uploaded_at, updated_at, "
    "status_reason, approved_by"
)


class _Runs(Protocol):
    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...


def _version(r: Sequence[Any]) -> PackVersion:
    return PackVersion(r[0], r[1], r[2], r[3], PackStatus(r[4]), codec.loads(r[5]), r[6], r[7], r[8], r[9], r[10],
                       r[11])  # fmt: skip


def _event(c: sqlite3.Connection, name: str, version: str, e: NewPackEvent) -> None:
    c.execute(
        "INSERT INTO pack_events (name, version, type, actor, reason, at) VALUES (?, ?, ?, ?, ?, ?)",
        (name, version, e.type, e.actor, e.reason, e.at),
    )


def _get(c: sqlite3.Connection, name: str, version: str) -> PackVersion | None:
    row = c.execute(f"SELECT {_COLUMNS} FROM pack_versions WHERE name = ? AND version = ?", (name, version)).fetchone()
    return _version(row) if row is not None else None


class SqlitePackMixin:
    async def insert_pack_version(self: _Runs, version: PackVersion, event: NewPackEvent) -> tuple[PackVersion, bool]:
        v = version
        manifest = codec.dumps(dict(v.manifest), "manifest")

        def write(c: sqlite3.Connection) -> tuple[PackVersion, bool]:
            existing = _get(c, v.name, v.version)
            if existing is not None:
                return existing, False
            c.execute(
                f"INSERT INTO pack_versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (v.name, v.version, v.sha256, v.size, v.status.value, manifest, v.description, v.uploaded_by,
                 v.uploaded_at, v.updated_at, v.status_reason, v.approved_by),
            )  # fmt: skip
            _event(c, v.name, v.version, event)
            return v, True

        return await self._write(write)

    async def get_pack_version(self: _Runs, name: str, version: str) -> PackVersion | None:
        return await self._read(lambda c: _get(c, name, version))

    async def pack_versions_by_digest(self: _Runs, sha256: str) -> list[PackVersion]:
        def read(c: sqlite3.Connection) -> list[PackVersion]:
            rows = c.execute(f"SELECT {_COLUMNS} FROM pack_versions WHERE sha256 = ? ORDER BY name, version", (sha256,))
            return [_version(r) for r in rows]

        return await self._read(read)

    async def list_pack_versions(self: _Runs, name: str | None = None, query: str | None = None) -> list[PackVersion]:
        def read(c: sqlite3.Connection) -> list[PackVersion]:
            where, args = ["1 = 1"], []
            if name is not None:
                where.append("name = ?")
                args.append(name)
            if query:
                # instr on lower(): no LIKE wildcards to escape in what a user typed
                where.append("(instr(lower(name), ?) > 0 OR instr(lower(description), ?) > 0)")
                args += [query.lower(), query.lower()]
            rows = c.execute(
                f"SELECT {_COLUMNS} FROM pack_versions WHERE {' AND '.join(where)} ORDER BY name, uploaded_at, version",
                args,
            )
            return [_version(r) for r in rows]

        return await self._read(read)

    async def set_pack_status(
        self: _Runs,
        name: str,
        version: str,
        expected: Collection[PackStatus],
        status: PackStatus,
        event: NewPackEvent,
        approved_by: str | None = None,
    ) -> PackVersion | None:
        allowed = [s.value for s in expected]

        def write(c: sqlite3.Connection) -> PackVersion | None:
            cur = c.execute(
                f"""UPDATE pack_versions SET status = ?, status_reason = ?, updated_at = ?,
                    approved_by = coalesce(?, approved_by)
                    WHERE name = ? AND version = ? AND status IN ({", ".join("?" * len(allowed))})""",
                (status.value, event.reason, event.at, approved_by, name, version, *allowed),
            )
            if cur.rowcount != 1:
                return None
            _event(c, name, version, event)
            return _get(c, name, version)

        return await self._write(write)

    async def list_pack_events(self: _Runs, name: str, version: str | None = None) -> list[PackEvent]:
        def read(c: sqlite3.Connection) -> list[PackEvent]:
            rows = c.execute(
                "SELECT id, name, version, type, actor, at, reason FROM pack_events"
                " WHERE name = ? AND (? IS NULL OR version = ?) ORDER BY id",
                (name, version, version),
            )
            return [PackEvent(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]

        return await self._read(read)
