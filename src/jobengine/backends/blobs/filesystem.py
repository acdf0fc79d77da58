"""Content-addressed blobs in a directory (``packs_blob_store = filesystem``, the default on SQLite).

Layout: ``<root>/sha256/<first two hex>/<the 64 hex digest>``; ``<root>`` is ``packs_blob_dir`` or, beside
a SQLite file ``jobs.db``, ``jobs.db.packs``. The two-character shard keeps directories small.

A write is atomic and durable: the bytes go to a temporary file in the shard directory (``.tmp-*``, never
a name a digest can have), are fsynced, renamed onto the digest's name, and the directory is fsynced (and
its parent, when the shard was just created), so after ``put`` returns the blob survives a power loss, and
a crash at any point leaves either no file or the whole file under the digest's name (at most a
``.tmp-*`` file, which is never read). A digest already present is not rewritten (idempotent). Reads verify
nothing; the registry re-hashes what it reads. Blocking file I/O runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

from jobengine.errors import StoreError
from jobengine.ports.blobs import BlobHealth, check_digest


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesystemBlobStore:
    kind = "filesystem"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path_of(self, sha256: str) -> Path:
        """Where the blob of ``sha256`` lives (InvalidDigest for anything but 64 lower-case hex)."""
        digest = check_digest(sha256)
        return self.root / "sha256" / digest[:2] / digest

    async def put(self, sha256: str, data: bytes) -> None:
        target = self.path_of(sha256)
        await asyncio.to_thread(self._put, target, bytes(data))

    def _put(self, target: Path, data: bytes) -> None:
        if target.exists():
            return
        shard = target.parent
        try:
            if not shard.is_dir():
                shard.mkdir(parents=True, exist_ok=True)
                _fsync_dir(shard.parent)  # the new shard's entry
                _fsync_dir(shard.parent.parent)  # and sha256/ itself when it was new too (cheap)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=shard)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)  # concurrent writers of one digest write the same bytes
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            _fsync_dir(shard)
        except OSError as exc:
            raise StoreError(f"packs_blob_dir: cannot write {target}: {exc.strerror or exc}") from exc

    async def get(self, sha256: str) -> bytes | None:
        target = self.path_of(sha256)

        def read() -> bytes | None:
            try:
                return target.read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise StoreError(f"packs_blob_dir: cannot read {target}: {exc.strerror or exc}") from exc

        return await asyncio.to_thread(read)

    async def exists(self, sha256: str) -> bool:
        target = self.path_of(sha256)
        return await asyncio.to_thread(target.is_file)

    async def delete(self, sha256: str) -> None:
        target = self.path_of(sha256)

        def remove() -> None:
            try:
                target.unlink()
            except FileNotFoundError:
                return
            except OSError as exc:
                raise StoreError(f"packs_blob_dir: cannot delete {target}: {exc.strerror or exc}") from exc
            _fsync_dir(target.parent)

        await asyncio.to_thread(remove)

    async def health(self) -> BlobHealth:
        started = time.perf_counter()

        def check() -> str:
            self.root.mkdir(parents=True, exist_ok=True)
            if not os.access(self.root, os.W_OK | os.X_OK):
                return "not writable"
            return ""

        try:
            problem = await asyncio.to_thread(check)
        except OSError as exc:
            problem = str(exc.strerror or exc)
        elapsed = 1000 * (time.perf_counter() - started)
        if problem:
            return BlobHealth(self.kind, False, elapsed, f"{self.root}: {problem}")
        return BlobHealth(self.kind, True, elapsed, str(self.root))
