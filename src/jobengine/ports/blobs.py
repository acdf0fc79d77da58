"""Content-addressed blob storage: the bytes of task packs, named by their sha256 (an optional port).

Backends (``packs_blob_store``): ``filesystem`` (files under the data directory), ``s3`` (an S3-compatible
object store, boto3) and ``database`` (the ``pack_blobs`` table of the store).
The metadata that says which digest a version has stays in the :class:`~jobengine.ports.packs.PackStore`.

Contract, every backend:

- ``put(sha256, data)`` is idempotent: a digest already stored is left as it is (the bytes of one digest
  are the same bytes). A backend does **not** check that ``data`` hashes to ``sha256``: the registry
  hashes before it writes and again whenever it reads, so a backend that returns flipped bytes is caught
  there (``PackIntegrityError``), never trusted.
- ``get`` returns the stored bytes or None; ``exists`` says whether they are there; ``delete`` removes them
  (a missing digest is no error).
- A digest that is not 64 lower-case hexadecimal characters is refused with :class:`InvalidDigest` before
  any I/O, so a digest can never name a path or key outside the store.
- ``health`` never raises: it answers whether the store can be reached now.
- Failures of the underlying service raise :class:`~jobengine.errors.StoreError`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from jobengine.errors import InvalidJob

SHA256_HEX = re.compile(r"^[0-9a-f]{64}\Z")


class InvalidDigest(InvalidJob):
    """A digest that is not 64 lower-case hexadecimal characters (the field is ``sha256``)."""

    def __init__(self, value: object) -> None:
        super().__init__("sha256", f"must be 64 lower-case hexadecimal characters, not {str(value)[:80]!r}")


def check_digest(sha256: object) -> str:
    """``sha256`` if it is 64 lower-case hex characters; InvalidDigest otherwise."""
    if not isinstance(sha256, str) or not SHA256_HEX.match(sha256):
        raise InvalidDigest(sha256)
    return sha256


@dataclass(frozen=True, slots=True)
class BlobHealth:
    backend: str  # filesystem | s3 | database
    ok: bool
    latency_ms: float
    detail: str = ""  # where the blobs are (a directory, a bucket and prefix) or what went wrong

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "latency_ms": round(self.latency_ms, 3),
                "detail": self.detail}  # fmt: skip


@runtime_checkable
class BlobStore(Protocol):
    #: filesystem | s3 | database
    kind: str

    async def put(self, sha256: str, data: bytes) -> None:
        """Store ``data`` under ``sha256`` durably before returning; idempotent."""
        ...

    async def get(self, sha256: str) -> bytes | None: ...

    async def exists(self, sha256: str) -> bool: ...

    async def delete(self, sha256: str) -> None:
        """Remove the blob; nothing happens when it is not there."""
        ...

    async def health(self) -> BlobHealth: ...


__all__: Sequence[str] = ("SHA256_HEX", "BlobHealth", "BlobStore", "InvalidDigest", "check_digest")
