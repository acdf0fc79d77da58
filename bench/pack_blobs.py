"""``python -m bench.pack_blobs [S3_ENDPOINT]``: what one pack blob costs to put and get per blob store.

Puts and gets random blobs of 64 KiB and 1 MiB (20 of each; 10 on S3) through the filesystem store (fsync of
the file and the directory) and the SQLite ``pack_blobs`` table (the store's FULL synchronous writes), and
through an S3-compatible server when its endpoint is given (e.g. a local ``python -m moto.server -p 5000``;
credentials from ``AWS_*``, set to dummies when absent). Prints the median per operation. Never run as a test.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from jobengine.backends.blobs.filesystem import FilesystemBlobStore
from jobengine.backends.sql.blobs import SqlBlobStore
from jobengine.backends.sqlite import SqliteStore
from jobengine.ports.blobs import BlobStore


async def measure(name: str, blobs: BlobStore, size: int, n: int) -> None:
    puts, gets = [], []
    for _ in range(n):
        data = os.urandom(size)
        digest = hashlib.sha256(data).hexdigest()
        started = time.perf_counter()
        await blobs.put(digest, data)
        puts.append(time.perf_counter() - started)
        started = time.perf_counter()
        assert await blobs.get(digest) == data
        gets.append(time.perf_counter() - started)
    print(f"{name:12s} {size // 1024:6d} KiB  put {1000 * statistics.median(puts):7.2f} ms  "
          f"get {1000 * statistics.median(gets):6.2f} ms")  # fmt: skip


async def main(endpoint: str | None) -> None:
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        stores: list[tuple[str, BlobStore, int]] = [("filesystem", FilesystemBlobStore(Path(tmp) / "fs"), 20)]
        sqlite = SqliteStore(str(Path(tmp) / "jobs.db"))
        await sqlite.migrate()
        stores.append(("sqlite-db", SqlBlobStore(sqlite.db, sqlite.path), 20))
        if endpoint:
            import boto3

            from jobengine.backends.blobs.s3 import S3BlobStore

            os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
            bucket = f"bench-{uuid.uuid4().hex[:10]}"
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
            stores.append(("s3", S3BlobStore(bucket, endpoint=endpoint, region="us-east-1"), 10))
        try:
            for size in (64 * 1024, 1024 * 1024):
                for name, blobs, n in stores:
                    await measure(name, blobs, size, n)
        finally:
            await sqlite.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
