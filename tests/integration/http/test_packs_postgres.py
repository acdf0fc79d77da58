"""The pack registry over HTTP on PostgreSQL: concurrent uploads of one version (one wins), a digest
mismatch stores nothing, approval, download with ETag, and a job pinned to the digest."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx

from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings
from support.packs import pack_bytes

GZ = {"Content-Type": "application/gzip"}


async def test_the_registry_on_postgres(postgres_dsn: str, tmp_path: Path) -> None:
    settings = Settings(database=postgres_dsn, packs_four_eyes="on")
    async with Engine.from_settings(settings) as engine:
        dev = (await engine.keys.create("acme", ["packs:write", "packs:read", "jobs:write"]))[1]
        reviewer = (await engine.keys.create("acme", ["packs:approve", "packs:read"]))[1]
        app = create_app(engine, settings)

        def client(key: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pg",
                                     headers={"Authorization": f"Bearer {key}"})  # fmt: skip

        bodies = [pack_bytes(tmp_path / str(i), extra=f" v{i}") for i in range(5)]
        async with client(dev) as d, client(reviewer) as r:
            bad = await d.post("/api/v1/packs", content=bodies[0], headers={**GZ, "X-Content-SHA256": "a" * 64})
            assert bad.status_code == 400
            assert await engine.packs.blobs.get(hashlib.sha256(bodies[0]).hexdigest()) is None
            answers = await asyncio.gather(*(d.post("/api/v1/packs", content=b, headers=GZ) for b in bodies))
            assert sorted(a.status_code for a in answers) == [201, 409, 409, 409, 409]
            winner = next(a for a in answers if a.status_code == 201).json()["sha256"]
            stored = [hashlib.sha256(b).hexdigest() for b in bodies]
            kept = [s for s in stored if await engine.packs.blobs.get(s) is not None]
            assert kept == [winner]  # the losers' blobs were deleted again (no version can ever name them)
            assert engine.packs.blobs.kind == "database"  # PostgreSQL's default: every host shares it
            assert (await r.post("/api/v1/packs/hello/versions/1.0.0/approve")).status_code == 200
            got = await d.get("/api/v1/packs/hello/versions/1.0.0/download")
            assert hashlib.sha256(got.content).hexdigest() == winner == got.headers["etag"].strip('"')[7:]
            cached = await d.get(
                "/api/v1/packs/hello/versions/1.0.0/download", headers={"If-None-Match": got.headers["etag"]}
            )
            assert cached.status_code == 304
            job = await d.post("/api/v1/jobs", json={"task": "hello@latest:greet", "payload": {"who": "pg"}})
            assert job.status_code == 201 and job.json()["task"] == f"hello@{winner}:greet"
