"""Pack content in PostgreSQL (``packs_blob_store = database``, the default there unless S3 is configured):
``bytea`` rows of the ``pack_blobs`` table (migration 0006), shared by every host that shares the database."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from jobengine.backends.postgres import sql
from jobengine.errors import JobEngineError
from jobengine.ports.blobs import BlobHealth, check_digest

if TYPE_CHECKING:
    from jobengine.backends.postgres.store import PostgresStore


class PostgresBlobStore:
    kind = "database"

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._s = sql.prefix(store.schema)

    def _q(self, text: str) -> bytes:
        return text.replace("{s}", self._s).encode()

    async def put(self, sha256: str, data: bytes) -> None:
        q = self._q("INSERT INTO {s}pack_blobs (sha256, size, data, created_at) VALUES (%(sha)s, %(size)s, "
                    "%(data)s, %(at)s) ON CONFLICT (sha256) DO NOTHING RETURNING 1")  # fmt: skip
        params = {"sha": check_digest(sha256), "size": len(data), "data": bytes(data), "at": time.time()}
        await self.store._rows(q, params)

    async def get(self, sha256: str) -> bytes | None:
        q = self._q("SELECT data FROM {s}pack_blobs WHERE sha256 = %(sha)s")
        rows = await self.store._rows(q, {"sha": check_digest(sha256)})
        return bytes(rows[0][0]) if rows else None

    async def exists(self, sha256: str) -> bool:
        q = self._q("SELECT 1 FROM {s}pack_blobs WHERE sha256 = %(sha)s")
        return bool(await self.store._rows(q, {"sha": check_digest(sha256)}))

    async def delete(self, sha256: str) -> None:
        q = self._q("DELETE FROM {s}pack_blobs WHERE sha256 = %(sha)s RETURNING 1")
        await self.store._rows(q, {"sha": check_digest(sha256)})

    async def health(self) -> BlobHealth:
        started = time.perf_counter()
        try:
            await self.store._rows(self._q("SELECT 1 FROM {s}pack_blobs LIMIT 1"), {})
        except JobEngineError as exc:
            return BlobHealth(self.kind, False, 1000 * (time.perf_counter() - started), str(exc))
        detail = f"pack_blobs in schema {self.store.schema}"
        return BlobHealth(self.kind, True, 1000 * (time.perf_counter() - started), detail)
