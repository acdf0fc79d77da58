"""Pack content in process memory (``packs_blob_store = database`` with the memory store): a dict by digest.
Gone with the process, like everything the memory store keeps."""

from __future__ import annotations

from jobengine.ports.blobs import BlobHealth, check_digest


class MemoryBlobStore:
    kind = "database"

    def __init__(self, blobs: dict[str, bytes] | None = None) -> None:
        self._blobs: dict[str, bytes] = {} if blobs is None else blobs  # the memory store's, to share it

    async def put(self, sha256: str, data: bytes) -> None:
        self._blobs.setdefault(check_digest(sha256), bytes(data))

    async def get(self, sha256: str) -> bytes | None:
        return self._blobs.get(check_digest(sha256))

    async def exists(self, sha256: str) -> bool:
        return check_digest(sha256) in self._blobs

    async def delete(self, sha256: str) -> None:
        self._blobs.pop(check_digest(sha256), None)

    async def health(self) -> BlobHealth:
        return BlobHealth(self.kind, True, 0.0, f"{len(self._blobs)} blobs in memory")
