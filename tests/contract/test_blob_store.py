"""The BlobStore port (pack content by sha256), one suite on every backend: filesystem, database (SQLite,
PostgreSQL) and s3 (a real moto server). Round trip of empty and 300 KB contents, idempotent puts
(the first bytes stay), delete, refusal of any digest that is not 64 lower-case hex before any I/O, health."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.backends.blobs.filesystem import FilesystemBlobStore
from jobengine.ports.blobs import BlobStore, InvalidDigest
from support.s3 import new_bucket, s3_endpoint, s3_server  # noqa: F401 - fixtures

BACKENDS = ["filesystem", "sqlite", "postgres", "s3"]


@pytest.fixture(params=BACKENDS)
async def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    kind = request.param
    if kind == "filesystem":
        yield FilesystemBlobStore(tmp_path / "blobs")
    elif kind == "sqlite":
        from jobengine.backends.sql.blobs import SqlBlobStore
        from jobengine.backends.sqlite import SqliteStore

        store = SqliteStore(str(tmp_path / "jobs.db"))
        await store.migrate()
        try:
            yield SqlBlobStore(store.db, store.path)
        finally:
            await store.close()
    elif kind == "postgres":
        dsn = request.getfixturevalue("postgres_contract_dsn")
        from jobengine.backends.postgres import PostgresStore
        from jobengine.backends.sql.blobs import SqlBlobStore
        from support.services import unique_name

        pg = PostgresStore(dsn, schema=unique_name("blobs"), pool_max=2)
        await pg.migrate()
        try:
            yield SqlBlobStore(pg.db, f"schema {pg.schema}")
        finally:
            await pg.drop_schema()
            await pg.close()
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        from jobengine.backends.blobs.s3 import S3BlobStore

        yield S3BlobStore(new_bucket(endpoint), prefix="packs/", endpoint=endpoint, region="us-east-1")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_round_trip_exists_and_missing(blobs: BlobStore) -> None:
    big = bytes(range(256)) * 1200  # 300 KB, every byte value
    for data in (b"", big):
        d = _digest(data)
        assert not await blobs.exists(d) and await blobs.get(d) is None
        await blobs.put(d, data)
        assert await blobs.exists(d)
        assert await blobs.get(d) == data
    assert await blobs.get(_digest(b"never stored")) is None


async def test_put_is_idempotent_and_keeps_the_first_bytes(blobs: BlobStore) -> None:
    data = b"pack content"
    d = _digest(data)
    await asyncio.gather(*(blobs.put(d, data) for _ in range(4)))  # concurrent writers of one digest
    await blobs.put(d, data)
    assert await blobs.get(d) == data
    # The store trusts the caller's digest (the registry hashes); a second put of a stored digest changes nothing.
    await blobs.put(d, b"other bytes")
    assert await blobs.get(d) == data


async def test_delete_removes_and_tolerates_missing(blobs: BlobStore) -> None:
    a, b = b"first", b"second"
    await blobs.put(_digest(a), a)
    await blobs.put(_digest(b), b)
    await blobs.delete(_digest(a))
    assert not await blobs.exists(_digest(a)) and await blobs.get(_digest(a)) is None
    assert await blobs.get(_digest(b)) == b  # only that one
    await blobs.delete(_digest(a))  # again: no error
    await blobs.put(_digest(a), a)  # and it can be stored again
    assert await blobs.get(_digest(a)) == a


BAD = ["../" * 10 + "etc/passwd", "A" * 64, "a" * 63, "a" * 65, "a" * 64 + "\n", "g" * 64, "/" + "a" * 63, "", "..",
       "a" * 32 + "/" + "a" * 31]  # fmt: skip


async def test_a_digest_that_is_not_64_lower_case_hex_is_refused(blobs: BlobStore) -> None:
    for bad in BAD:
        for call in (blobs.put(bad, b"x"), blobs.get(bad), blobs.exists(bad), blobs.delete(bad)):
            with pytest.raises(InvalidDigest) as info:
                await call
            assert info.value.field == "sha256"
    with pytest.raises(InvalidDigest):
        await blobs.get(None)  # type: ignore[arg-type]


async def test_health(blobs: BlobStore) -> None:
    h = await blobs.health()
    assert h.ok, h.detail
    assert h.backend == blobs.kind in ("filesystem", "database", "s3")
    assert h.to_json()["ok"] is True
