"""Where pack content goes: the default blob store per store, the settings that choose another (and refuse
what cannot work, naming the field), the filesystem layout and its failures, and the registry over each
backend — content written before the version row, a losing upload's blob deleted again, a re-upload of the
same bytes putting lost content back, and flipped bytes in S3 refused like anywhere else."""

from __future__ import annotations

import asyncio
import glob
import hashlib
import os
from pathlib import Path

import pytest

from jobengine.backends.blobs.fallback import WithLegacyRows
from jobengine.backends.blobs.filesystem import FilesystemBlobStore
from jobengine.backends.blobs.s3 import S3BlobStore
from jobengine.backends.postgres import PostgresStore
from jobengine.backends.sqlite import SqliteStore
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.errors import ConfigError, StoreError
from jobengine.packs.errors import PackConflict
from jobengine.packs.registry import PackIntegrityError
from jobengine.settings import Settings
from support.packs import pack_bytes
from support.s3 import client, new_bucket, s3_endpoint, s3_server  # noqa: F401 - fixtures

UNREACHABLE = "postgresql://jobengine@127.0.0.1:9/none"  # never connected to: the settings are refused first


def test_the_default_is_files_beside_sqlite_and_the_database_elsewhere(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    fs = SqliteStore(db).blob_store(Settings(database=db))
    assert isinstance(fs, WithLegacyRows) and fs.kind == "filesystem"  # reads fall back to pack_blobs rows
    assert isinstance(fs.primary, FilesystemBlobStore) and fs.primary.root == Path(db + ".packs")
    own = SqliteStore(db).blob_store(Settings(database=db, packs_blob_dir=str(tmp_path / "b")))
    assert isinstance(own, WithLegacyRows) and isinstance(own.primary, FilesystemBlobStore)
    assert own.primary.root == tmp_path / "b"
    assert SqliteStore(db).blob_store(Settings(packs_blob_store="database")).kind == "database"
    memory = open_store("memory")  # SQLite in a temporary directory: the files stay in it
    temporary = memory.blob_store(Settings(database="memory"))
    assert isinstance(temporary, WithLegacyRows) and isinstance(temporary.primary, FilesystemBlobStore)
    assert temporary.primary.root.parent == memory.directory  # type: ignore[attr-defined]
    s3 = SqliteStore(db).blob_store(Settings(packs_s3_bucket="b", packs_s3_endpoint="http://127.0.0.1:9"))
    assert isinstance(s3, WithLegacyRows) and s3.kind == "s3"  # a bucket alone chooses s3
    assert isinstance(s3.primary, S3BlobStore) and s3.primary.bucket == "b"
    with pytest.raises(ConfigError, match=r"^packs_blob_dir: required"):
        PostgresStore(UNREACHABLE).blob_store(Settings(database=UNREACHABLE, packs_blob_store="filesystem"))


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"packs_blob_store": "nfs"}, "packs_blob_store"),
        ({"packs_blob_store": "s3"}, "packs_s3_bucket"),
        ({"packs_s3_bucket": "b", "packs_s3_endpoint": "minio:9000"}, "packs_s3_endpoint"),
        ({"packs_s3_bucket": "b", "packs_s3_prefix": "/abs/"}, "packs_s3_prefix"),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_field(values: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{field}: "):
        Settings.from_mapping(values)
    env = {f"JOBENGINE_{k.upper()}": v for k, v in values.items()}
    with pytest.raises(ConfigError, match=f"^{field}: "):
        Settings.from_mapping({}, env)


async def test_filesystem_layout_atomic_writes_and_failures(tmp_path: Path) -> None:
    blobs = FilesystemBlobStore(tmp_path / "packs")
    data = b"x" * 1000
    digest = hashlib.sha256(data).hexdigest()
    await blobs.put(digest, data)
    path = tmp_path / "packs" / "sha256" / digest[:2] / digest
    assert path.read_bytes() == data and blobs.path_of(digest) == path
    assert [p.name for p in path.parent.iterdir()] == [digest]  # no temporary file left behind
    # A root that cannot be a directory: writes fail with a StoreError naming the setting, health says so.
    (tmp_path / "file").write_bytes(b"")
    broken = FilesystemBlobStore(tmp_path / "file")
    with pytest.raises(StoreError, match=r"^packs_blob_dir: cannot write"):
        await broken.put(digest, data)
    health = await broken.health()
    assert not health.ok and str(tmp_path / "file") in health.detail
    assert (await blobs.health()).ok


async def test_concurrent_uploads_keep_only_the_winners_blob(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    bodies = [pack_bytes(tmp_path / str(i), extra=f" v{i}") for i in range(4)]
    async with Engine.from_settings(Settings(database=db)) as engine:
        results = await asyncio.gather(*(engine.packs.upload(b, "key:dev") for b in bodies), return_exceptions=True)
        winners = [r[0] for r in results if isinstance(r, tuple) and r[1]]
        assert len(winners) == 1 and all(isinstance(r, PackConflict) for r in results if not isinstance(r, tuple))
        files = sorted(os.path.basename(p) for p in glob.glob(db + ".packs/sha256/*/*"))
        assert files == [winners[0].sha256]  # written before the row; the losers' blobs deleted again
        # Content lost from the blob store is put back by uploading the same bytes again (idempotent upload).
        await engine.packs.blobs.delete(winners[0].sha256)
        data = next(b for b in bodies if hashlib.sha256(b).hexdigest() == winners[0].sha256)
        again, created = await engine.packs.upload(data, "key:dev")
        assert not created and await engine.packs.content(again) == data


async def test_the_database_store_on_sqlite_keeps_content_in_the_file(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    data = pack_bytes(tmp_path / "src")
    async with Engine.from_settings(Settings(database=db, packs_blob_store="database")) as engine:
        v, _ = await engine.packs.upload(data, "key:dev")
        await engine.packs.approve(v.name, v.version, "key:reviewer")
        assert await engine.packs.runnable(await engine.packs.get(v.name, v.version)) == data
    assert glob.glob(db + ".packs") == []  # no blob directory


async def test_content_stored_in_the_database_before_the_blob_store_is_still_read(tmp_path: Path) -> None:
    """An upgraded SQLite deployment: versions uploaded when content was rows of pack_blobs keep it."""
    db = str(tmp_path / "jobs.db")
    data = pack_bytes(tmp_path / "src")
    async with Engine.from_settings(Settings(database=db, packs_blob_store="database")) as engine:
        v, _ = await engine.packs.upload(data, "key:dev")
        await engine.packs.approve(v.name, v.version, "key:reviewer")
    async with Engine.from_settings(Settings(database=db)) as engine:  # the default now: files
        assert engine.packs.blobs.kind == "filesystem" and await engine.packs.blobs.exists(v.sha256)
        assert await engine.packs.runnable(await engine.packs.get(v.name, v.version)) == data
        assert glob.glob(db + ".packs/sha256/*/*") == []  # read from the row, not copied
        await engine.packs.upload(data, "key:dev")  # the same bytes again: now a file too
        assert [os.path.basename(p) for p in glob.glob(db + ".packs/sha256/*/*")] == [v.sha256]


async def test_the_registry_on_s3(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811 - a fixture
    bucket = new_bucket(s3_endpoint)
    settings = Settings(database=str(tmp_path / "jobs.db"), packs_s3_bucket=bucket, packs_s3_prefix="team/",
                        packs_s3_endpoint=s3_endpoint, packs_s3_region="us-east-1")  # fmt: skip
    data = pack_bytes(tmp_path / "src")
    async with Engine.from_settings(settings) as engine:
        assert engine.packs.blobs.kind == "s3"
        v, created = await engine.packs.upload(data, "key:dev")
        v = await engine.packs.approve(v.name, v.version, "key:reviewer")
        assert created and await engine.packs.runnable(v) == data
        s3 = client(s3_endpoint)
        key = f"team/sha256/{v.sha256}"
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(flipped))  # tampered in the bucket
        with pytest.raises(PackIntegrityError, match="refusing it"):
            await engine.packs.runnable(v)
    assert glob.glob(settings.database + ".packs") == []


async def test_readyz_reports_the_blob_store(tmp_path: Path) -> None:
    import httpx

    from jobengine.http import create_app

    (tmp_path / "not-a-dir").write_bytes(b"")
    for blob_dir, ready in ((str(tmp_path / "blobs"), True), (str(tmp_path / "not-a-dir"), False)):
        settings = Settings(database=str(tmp_path / "jobs.db"), packs_blob_dir=blob_dir)
        async with Engine.from_settings(settings) as engine:
            app = create_app(engine, settings)
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
            ):
                answer = await c.get("/readyz")
                check = answer.json()["checks"]["packs"]
                assert check["ready"] is ready and answer.status_code == (200 if ready else 503)
                assert (
                    ("filesystem" in check["detail"]) if ready else ("packs_blob_store: filesystem" in check["detail"])
                )
            assert "packs" not in await engine.health.readiness()  # removed with the app


async def test_migration_0009_keeps_versions_and_their_content_on_sqlite(tmp_path: Path) -> None:
    """A database at 0008 with a pack (content as a pack_blobs row) upgraded: the row survives the table
    rebuild, the foreign key is gone, and the default (files) still serves the old content."""
    import sqlite3

    from jobengine.backends.sqlite.migrate import apply_migrations, load_migrations

    db = str(tmp_path / "jobs.db")
    data = pack_bytes(tmp_path / "src")
    digest = hashlib.sha256(data).hexdigest()
    conn = sqlite3.connect(db)
    try:
        apply_migrations(conn, [m for m in load_migrations() if m.version <= 8])
        conn.execute("INSERT INTO pack_blobs VALUES (?, ?, ?, 1.0)", (digest, len(data), data))
        conn.execute(
            "INSERT INTO pack_versions (name, version, sha256, size, status, manifest, uploaded_by, uploaded_at,"
            " updated_at, approved_by) VALUES ('hello', '1.0.0', ?, ?, 'approved', '{}', 'key:dev', 1.0, 2.0, 'key:r')",
            (digest, len(data)),
        )
        conn.commit()
    finally:
        conn.close()
    async with Engine.from_settings(Settings(database=db)) as engine:
        v = await engine.packs.get("hello", "1.0.0")
        assert (v.sha256, v.size, v.approved_by, v.updated_at) == (digest, len(data), "key:r", 2.0)
        assert await engine.packs.runnable(v) == data
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA foreign_key_list(pack_versions)").fetchall() == []
        assert conn.execute("SELECT name FROM jobengine_migrations WHERE version = 9").fetchone() is not None
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("env", "field"),
    [({"JOBENGINE_PACKS_BLOB_STORE": "s3"}, "packs_s3_bucket"),
     ({"JOBENGINE_DATABASE": "postgres_dsn", "JOBENGINE_PACKS_BLOB_STORE": "filesystem"}, "packs_blob_dir")],
)  # fmt: skip
def test_serve_refuses_a_blob_store_that_cannot_work(
    env: dict[str, str],
    field: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    from jobengine.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JOBENGINE_DATABASE", str(tmp_path / "jobs.db"))
    monkeypatch.setenv("JOBENGINE_API_PORT", "0")
    for name, value in env.items():  # "postgres_dsn": a fresh PostgreSQL database (a fixture)
        monkeypatch.setenv(name, request.getfixturevalue(value) if value == "postgres_dsn" else value)
    assert main(["serve"]) == 2
    assert f"{field}: " in capsys.readouterr().err
