"""Content stored before the blob store existed: reads fall back to the database's ``pack_blobs`` rows.

Until 0009 every pack's bytes were rows of ``pack_blobs``. A SQLite deployment upgraded in place now writes
to files (or S3), so the blobs of versions uploaded earlier are only in the table: :class:`WithLegacyRows`
reads them from there when the primary store does not have them, so no version loses its content. Writes
go to the primary only; ``delete`` removes both. (The table is kept; re-uploading a version's bytes
copies them to the primary.)
"""

from __future__ import annotations

from jobengine.ports.blobs import BlobHealth, BlobStore


class WithLegacyRows:
    def __init__(self, primary: BlobStore, legacy: BlobStore) -> None:
        self.primary = primary
        self.legacy = legacy
        self.kind = primary.kind

    async def put(self, sha256: str, data: bytes) -> None:
        await self.primary.put(sha256, data)

    async def get(self, sha256: str) -> bytes | None:
        found = await self.primary.get(sha256)
        return found if found is not None else await self.legacy.get(sha256)

    async def exists(self, sha256: str) -> bool:
        return await self.primary.exists(sha256) or await self.legacy.exists(sha256)

    async def delete(self, sha256: str) -> None:
        await self.primary.delete(sha256)
        await self.legacy.delete(sha256)

    async def health(self) -> BlobHealth:
        return await self.primary.health()
