"""Pack content in the SQLite file (``packs_blob_store = database``): the ``pack_blobs`` table of migration
0006, through the store's own connection (one writer thread). Not the default on SQLite, where content goes
to files beside the database (:mod:`jobengine.backends.blobs.filesystem`); kept for a single-file backup."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from jobengine.errors import JobEngineError
from jobengine.ports.blobs import BlobHealth, check_digest

if TYPE_CHECKING:
    from jobengine.backends.sqlite.store import SqliteStore


class SqliteBlobStore:
    kind = "database"

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    async def put(self, sha256: str, data: bytes) -> None:
        digest, content = check_digest(sha256), bytes(data)

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT OR IGNORE INTO pack_blobs (sha256, size, data, created_at) VALUES (?, ?, ?, ?)",
                (digest, len(content), content, time.time()),
            )

        await self.store._write(write)

    async def get(self, sha256: str) -> bytes | None:
        digest = check_digest(sha256)

        def read(c: sqlite3.Connection) -> bytes | None:
            row = c.execute("SELECT data FROM pack_blobs WHERE sha256 = ?", (digest,)).fetchone()
            return bytes(row[0]) if row is not None else None

        return await self.store._read(read)

    async def exists(self, sha256: str) -> bool:
        digest = check_digest(sha256)
        return await self.store._read(
            lambda c: c.execute("SELECT 1 FROM pack_blobs WHERE sha256 = ?", (digest,)).fetchone() is not None
        )

    async def delete(self, sha256: str) -> None:
        digest = check_digest(sha256)
        await self.store._write(lambda c: c.execute("DELETE FROM pack_blobs WHERE sha256 = ?", (digest,)))

    async def health(self) -> BlobHealth:
        started = time.perf_counter()
        try:
            await self.store._read(lambda c: c.execute("SELECT 1 FROM pack_blobs LIMIT 1").fetchall())
        except (JobEngineError, sqlite3.Error) as exc:
            return BlobHealth(self.kind, False, 1000 * (time.perf_counter() - started), str(exc))
        return BlobHealth(self.kind, True, 1000 * (time.perf_counter() - started), f"pack_blobs in {self.store.path}")
