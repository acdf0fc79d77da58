"""Pack content in the database (``packs_blob_store = database``): the ``pack_blobs`` table of migration
``0006``, for both SQL stores (the default on PostgreSQL unless S3 is configured; on SQLite, kept for a
single-file backup, content otherwise going to files beside the database)."""

from __future__ import annotations

import time

from jobengine.errors import JobEngineError
from jobengine.ports.blobs import BlobHealth, check_digest

from .base import Db


class SqlBlobStore:
    kind = "database"

    def __init__(self, db: Db, where: str) -> None:
        self._db = db
        self._where = where  # what health() reports: "pack_blobs in <where>"

    async def put(self, sha256: str, data: bytes) -> None:
        sql = ("INSERT INTO {s}pack_blobs (sha256, size, data, created_at) VALUES (?, ?, ?, ?) "
               "ON CONFLICT (sha256) DO NOTHING")  # fmt: skip
        args = (check_digest(sha256), len(data), bytes(data), time.time())
        await self._db.write(lambda tx: tx.run(sql, args))

    async def get(self, sha256: str) -> bytes | None:
        digest = check_digest(sha256)
        rows = await self._db.read(lambda tx: tx.rows("SELECT data FROM {s}pack_blobs WHERE sha256 = ?", (digest,)))
        return bytes(rows[0][0]) if rows else None

    async def exists(self, sha256: str) -> bool:
        digest = check_digest(sha256)
        return bool(await self._db.read(lambda tx: tx.rows("SELECT 1 FROM {s}pack_blobs WHERE sha256 = ?", (digest,))))

    async def delete(self, sha256: str) -> None:
        digest = check_digest(sha256)
        await self._db.write(lambda tx: tx.run("DELETE FROM {s}pack_blobs WHERE sha256 = ?", (digest,)))

    async def health(self) -> BlobHealth:
        started = time.perf_counter()
        try:
            await self._db.read(lambda tx: tx.rows("SELECT 1 FROM {s}pack_blobs LIMIT 1"))
        except JobEngineError as exc:
            return BlobHealth(self.kind, False, 1000 * (time.perf_counter() - started), str(exc))
        return BlobHealth(self.kind, True, 1000 * (time.perf_counter() - started), f"pack_blobs in {self._where}")
