"""The pack registry over HTTP (the real app, httpx ASGI transport, SQLite): upload raw and multipart,
digests, immutability, concurrent uploads, the approval workflow with scopes and four-eyes, downloads with
ETag, and jobs that name a pack version."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx

from support.packs import pack_bytes, raw_tar, write_pack

from .conftest import Api, MakeApi

P = "/api/v1/packs"
GZ = {"Content-Type": "application/gzip"}


async def _client(api: Api, *scopes: str) -> httpx.AsyncClient:
    return api.client(await api.key("acme", *scopes))


async def test_upload_approve_download_and_enqueue(make_api: MakeApi, tmp_path: Path) -> None:
    data = pack_bytes(tmp_path)
    digest = hashlib.sha256(data).hexdigest()
    async with (
        make_api(packs_four_eyes="on") as api,
        await _client(api, "packs:write", "packs:read") as dev,
        await _client(api, "packs:approve", "packs:read") as reviewer,
        await _client(api, "jobs:write", "jobs:read") as app,
    ):
        r = await dev.post(P, content=data, headers={**GZ, "X-Content-SHA256": digest})
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["status"] == "pending_approval" and body["sha256"] == digest and body["size"] == len(data)
        assert r.headers["location"] == f"{P}/hello/versions/1.0.0"
        assert set(body["manifest"]["tasks"]) == {"greet", "shout"}

        # Pending: a worker cannot download it, and a job cannot name it.
        assert (await dev.get(f"{P}/hello/versions/1.0.0/download")).status_code == 409
        refused = await app.post("/api/v1/jobs", json={"task": "hello@1.0.0:greet", "payload": {"who": "x"}})
        assert refused.status_code == 422 and refused.json()["field"] == "task"
        assert "pending_approval" in refused.json()["detail"]
        # The reviewer may read the code before approving it.
        assert (await reviewer.get(f"{P}/hello/versions/1.0.0/download")).content == data

        # The uploader cannot approve (no scope); four-eyes is checked for a key that has both.
        assert (await dev.post(f"{P}/hello/versions/1.0.0/approve")).status_code == 403
        ok = await reviewer.post(f"{P}/hello/versions/1.0.0/approve")
        assert ok.status_code == 200 and ok.json()["status"] == "approved"

        shown = (await dev.get(f"{P}/hello/versions/1.0.0")).json()
        assert [a["by"] for a in shown["approvals"]] == [ok.json()["approved_by"]]
        assert [h["type"] for h in shown["history"]] == ["pack.uploaded", "pack.approved"]

        got = await dev.get(f"{P}/hello/versions/1.0.0/download")
        assert got.status_code == 200 and got.content == data
        assert got.headers["etag"] == f'"sha256:{digest}"'
        again = await dev.get(f"{P}/hello/versions/1.0.0/download", headers={"If-None-Match": got.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        by_digest = await dev.get(f"{P}/-/blobs/{digest}")
        assert by_digest.content == data and by_digest.headers["etag"] == got.headers["etag"]

        job = await app.post("/api/v1/jobs", json={"task": "hello@stable:greet", "payload": {"who": "ann"}})
        assert job.status_code == 201, job.text
        assert job.json()["task"] == f"hello@{digest}:greet"  # the job keeps the digest
        assert job.json()["queue"] == "packs" and job.json()["max_attempts"] == 2  # the manifest's defaults
        bad = await app.post("/api/v1/jobs", json={"task": "hello@1.0.0:greet", "payload": {"who": 3}})
        assert bad.status_code == 422 and bad.json()["field"] == "payload"
        unknown = await app.post("/api/v1/jobs", json={"task": "hello@1.0.0:nope", "payload": {}})
        assert unknown.status_code == 422 and "no task 'nope'" in unknown.json()["detail"]


async def test_four_eyes_refuses_the_uploader_as_approver(make_api: MakeApi, tmp_path: Path) -> None:
    scopes = ("packs:write", "packs:approve", "packs:read")
    for four_eyes, approved in (("on", 403), ("off", 200)):
        db = str(tmp_path / f"{four_eyes}.db")
        async with make_api(packs_four_eyes=four_eyes, database=db) as api, await _client(api, *scopes) as both:
            assert (await both.post(P, content=pack_bytes(tmp_path), headers=GZ)).status_code == 201
            r = await both.post(f"{P}/hello/versions/1.0.0/approve")
            assert r.status_code == approved
            status = (await both.get(f"{P}/hello/versions/1.0.0")).json()["status"]
            if approved == 403:
                assert r.json()["rule"] == "four-eyes" and status == "pending_approval"
            else:
                assert status == "approved"


def test_four_eyes_is_on_by_default_off_loopback() -> None:
    from jobengine.packs.registry import four_eyes_from
    from jobengine.settings import Settings

    assert four_eyes_from(Settings(api_host="0.0.0.0"))
    assert not four_eyes_from(Settings(api_host="127.0.0.1"))
    assert four_eyes_from(Settings(api_host="127.0.0.1", packs_four_eyes="on"))


async def test_digest_mismatch_is_400_and_stores_nothing(api: Api, acme: httpx.AsyncClient, tmp_path: Path) -> None:
    data = pack_bytes(tmp_path)
    r = await acme.post(P, content=data, headers={**GZ, "X-Content-SHA256": "0" * 64})
    assert r.status_code == 400 and r.json()["field"] == "sha256"
    assert r.headers["content-type"] == "application/problem+json"
    assert (await acme.get(f"{P}/hello/versions")).status_code == 404
    assert await api.engine.packs.blobs.get(hashlib.sha256(data).hexdigest()) is None


async def test_same_version_other_bytes_is_409_same_bytes_is_idempotent(
    acme: httpx.AsyncClient, tmp_path: Path
) -> None:
    first = pack_bytes(tmp_path / "a")
    other = pack_bytes(tmp_path / "b", extra=" and others")
    assert (await acme.post(P, content=first, headers=GZ)).status_code == 201
    same = await acme.post(P, content=first, headers=GZ)
    assert same.status_code == 200 and same.json()["sha256"] == hashlib.sha256(first).hexdigest()
    clash = await acme.post(P, content=other, headers=GZ)
    assert clash.status_code == 409 and "immutable" in clash.json()["detail"]
    shown = (await acme.get(f"{P}/hello/versions/1.0.0")).json()
    assert shown["sha256"] == hashlib.sha256(first).hexdigest()
    assert [h["type"] for h in shown["history"]] == ["pack.uploaded"]


async def test_two_concurrent_uploads_of_one_version_exactly_one_wins(acme: httpx.AsyncClient, tmp_path: Path) -> None:
    bodies = [pack_bytes(tmp_path / str(i), extra=f" v{i}") for i in range(4)]
    answers = await asyncio.gather(*(acme.post(P, content=b, headers=GZ) for b in bodies))
    assert sorted(r.status_code for r in answers) == [201, 409, 409, 409]
    winner = next(r for r in answers if r.status_code == 201).json()["sha256"]
    assert (await acme.get(f"{P}/hello/versions/1.0.0")).json()["sha256"] == winner


async def test_multipart_upload_with_declared_digest(acme: httpx.AsyncClient, tmp_path: Path) -> None:
    data = pack_bytes(tmp_path)
    digest = hashlib.sha256(data).hexdigest()
    bad = await acme.post(P, files={"file": ("p.tar.gz", data, "application/gzip")}, data={"sha256": "f" * 64})
    assert bad.status_code == 400 and bad.json()["field"] == "sha256"
    ok = await acme.post(P, files={"file": ("p.tar.gz", data, "application/gzip")}, data={"sha256": digest})
    assert ok.status_code == 201 and ok.json()["sha256"] == digest
    missing = await acme.post(P, files={"other": ("p.tar.gz", data, "application/gzip")})
    assert missing.status_code == 422 and missing.json()["field"] == "file"
    wrong_type = await acme.post(P, content=b"{}", headers={"Content-Type": "text/plain"})
    assert wrong_type.status_code == 415


async def test_bad_packs_are_refused_or_marked_invalid(acme: httpx.AsyncClient, tmp_path: Path) -> None:
    evil = raw_tar([_member("../x", b"boom")])
    r = await acme.post(P, content=evil, headers=GZ)
    assert r.status_code == 422 and r.json()["field"] == "archive"
    junk = await acme.post(P, content=b"not a tarball", headers=GZ)
    assert junk.status_code == 422 and junk.json()["field"] == "archive"
    bad_manifest = write_pack(tmp_path / "m", manifest="name: hello\nversion: one\ntasks: {}\n")
    r = await acme.post(P, content=_tar_dir(bad_manifest), headers=GZ)
    assert r.status_code == 422 and r.json()["field"] == "version"
    # A valid manifest whose entry point is not in the code: stored, but invalid (never pending).
    folder = write_pack(tmp_path / "i", code="def shout(ctx):\n    return 1\n")
    r = await acme.post(P, content=_tar_dir(folder), headers=GZ)
    assert r.status_code == 201 and r.json()["status"] == "invalid"
    assert "greet" in r.json()["status_reason"]
    assert (await acme.post(f"{P}/hello/versions/1.0.0/approve")).status_code == 409
    assert (await acme.get(f"{P}/nothing/versions")).status_code == 404


async def test_workflow_reasons_and_archive_is_final(api: Api, acme: httpx.AsyncClient, tmp_path: Path) -> None:
    for v in ("1.0.0", "1.10.0", "1.2.0", "2.0.0-rc.1"):
        assert (await acme.post(P, content=pack_bytes(tmp_path / v, version=v), headers=GZ)).status_code == 201
    versions = (await acme.get(f"{P}/hello/versions")).json()["items"]
    assert [v["version"] for v in versions] == ["1.0.0", "1.2.0", "1.10.0", "2.0.0-rc.1"]  # semver order
    listed = (await acme.get(P, params={"q": "GREETS"})).json()["items"]
    assert [(p["name"], p["latest"], p["latest_approved"]) for p in listed] == [("hello", "2.0.0-rc.1", None)]
    assert (await acme.get(P, params={"q": "nomatch"})).json()["items"] == []

    no_reason = await acme.post(f"{P}/hello/versions/1.0.0/reject", json={})
    assert no_reason.status_code == 422 and no_reason.json()["field"] == "reason"
    assert (await acme.post(f"{P}/hello/versions/1.0.0/reject", json={"reason": "typo"})).json()["status"] == "rejected"
    assert (await acme.post(f"{P}/hello/versions/1.0.0/approve")).status_code == 409  # rejected is final
    assert (await acme.post(f"{P}/hello/versions/1.2.0/deprecate", json={"reason": "x"})).status_code == 409
    assert (await acme.post(f"{P}/hello/versions/1.2.0/approve")).status_code == 200
    rejected_job = await acme.post("/api/v1/jobs", json={"task": "hello@1.0.0:greet", "payload": {"who": "a"}})
    assert rejected_job.status_code == 422 and "rejected" in rejected_job.json()["detail"]
    assert (await acme.post(f"{P}/hello/versions/1.2.0/archive")).status_code == 409  # deprecate first
    dep = await acme.post(f"{P}/hello/versions/1.2.0/deprecate", json={"reason": "use 1.10"})
    assert dep.json()["status"] == "deprecated" and dep.json()["status_reason"] == "use 1.10"
    # Deprecated: new jobs are still accepted (with a warning in the log), downloads still work.
    assert (
        await acme.post("/api/v1/jobs", json={"task": "hello@1.2.0:shout", "payload": {"who": "a"}})
    ).status_code == 201
    assert (await acme.get(f"{P}/hello/versions/1.2.0/download")).status_code == 200
    assert (await acme.post(f"{P}/hello/versions/1.2.0/archive")).json()["status"] == "archived"
    # Archived: never published again, not even with the same bytes.
    republish = await acme.post(P, content=pack_bytes(tmp_path / "1.2.0", version="1.2.0"), headers=GZ)
    assert republish.status_code == 409 and "archived" in republish.json()["detail"]
    history = (await acme.get(f"{P}/hello/versions/1.2.0/history")).json()["items"]
    assert [(h["type"], h["reason"]) for h in history] == [
        ("pack.uploaded", None), ("pack.approved", None), ("pack.deprecated", "use 1.10"), ("pack.archived", None)
    ]  # fmt: skip
    assert all(h["actor"].startswith("key:") for h in history)


async def test_scopes(api: Api, tmp_path: Path) -> None:
    async with await _client(api, "jobs:read") as nobody, await _client(api, "packs:read") as reader:
        assert (await nobody.get(P)).status_code == 403
        assert (await reader.get(P)).status_code == 200
        r = await reader.post(P, content=pack_bytes(tmp_path), headers=GZ)
        assert r.status_code == 403 and r.json()["required_scope"] == "packs:write"


async def test_an_oversized_upload_is_413(make_api: MakeApi) -> None:
    async with make_api(packs_max_bytes=2048) as api, api.client(tenant="acme") as c:
        r = await c.post(P, content=b"x" * (2048 + 65536 + 1), headers=GZ)
        assert r.status_code == 413 and r.json()["field"] == "body"
        small_but_over_the_pack_limit = await c.post(P, content=b"x" * 4096, headers=GZ)
        assert small_but_over_the_pack_limit.status_code == 422


def _member(name: str, data: bytes) -> tuple[object, bytes]:
    import tarfile

    return tarfile.TarInfo(name), data


def _tar_dir(folder: Path) -> bytes:
    """Archive a directory without the builder's checks (to upload what the builder would refuse)."""
    import tarfile

    members = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        members.append((tarfile.TarInfo(path.relative_to(folder).as_posix()), path.read_bytes()))
    return raw_tar(members)


async def test_simulating_a_version_answers_problems_that_name_why(make_api: MakeApi, tmp_path: Path) -> None:
    async with (
        make_api() as api,
        await _client(api, "packs:write", "packs:read") as dev,
        await _client(api, "packs:approve", "packs:read") as reviewer,
    ):
        assert (await dev.post(P, content=pack_bytes(tmp_path / "a"), headers=GZ)).status_code == 201
        v1 = f"{P}/hello/versions/1.0.0"
        never = (await dev.get(f"{v1}/simulation")).json()
        assert never["run_id"] is None and never["counts"] is None and never["entries"] == []
        assert "jobengine pack simulate hello@1.0.0" in never["hint"]
        assert (await dev.post(f"{v1}/simulate")).status_code == 403  # packs:approve simulates
        several = await reviewer.post(f"{v1}/simulate")
        assert several.status_code == 422 and several.json()["field"] == "task"  # hello has greet and shout
        assert "greet, shout" in several.json()["detail"]
        no_run = await reviewer.post(f"{v1}/simulate", json={"task": "greet"})
        assert no_run.status_code == 409 and "no completed full run" in no_run.json()["detail"]
        bad = await reviewer.post(f"{v1}/simulate", json={"task": "greet", "sources": "x"})
        assert bad.status_code == 422
        assert (await reviewer.get(f"{P}/hello/versions/9.9.9/simulation")).status_code == 404
        assert (await reviewer.post(f"{v1}/approve")).status_code == 200
        approved = await reviewer.post(f"{v1}/simulate", json={"task": "greet"})
        assert approved.status_code == 409 and "only a version awaiting approval" in approved.json()["detail"]
