"""Task packs end to end: ``jobengine pack build`` is reproducible; upload → pending → approve → a job enqueued
against it runs on a worker process that had never seen the pack (over HTTP, and from the database); a byte
flipped in the stored content is detected by the worker, which refuses to run it.

The server and the workers are real processes; the ``jobengine pack`` commands run in-process (``main``), as
they are thin HTTP clients of that server."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobengine.cli.main import main
from support.packs import write_pack
from support.processes import Processes
from support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


class Stack(Processes):
    def __init__(self, tmp: Path) -> None:
        self.db = str(tmp / "jobs.db")
        super().__init__(tmp, {**os.environ, "PYTHONPATH": str(ROOT), "JOBENGINE_DATABASE": self.db,
                               "JOBENGINE_POLL_INTERVAL": "0.2"}, tmp)  # fmt: skip
        self.url = ""


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    s = Stack(tmp_path)
    monkeypatch.setenv("JOBENGINE_DATABASE", s.db)
    monkeypatch.chdir(tmp_path)
    try:
        yield s
    finally:
        s.stop_all()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def key(capsys: pytest.CaptureFixture[str], *scopes: str) -> str:
    args = ["keys", "create", "--tenant", "acme", "--json"]
    for s in scopes:
        args += ["--scope", s]
    if not scopes:
        args.append("--admin")
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    return str(json.loads(out)["key"])


def test_pack_build_twice_gives_the_same_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = write_pack(tmp_path / "src")
    digests = []
    for out in ("a.tar.gz", "b.tar.gz"):
        code, text, err = cli(capsys, "pack", "build", str(folder), "--out", out, "--json")
        assert code == 0, err
        digests.append(json.loads(text)["sha256"])
    assert digests[0] == digests[1]
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    (folder / "jobengine-pack.yaml").write_text("name: hello\nversion: 1.0\ntasks: {}\n")
    code, _, err = cli(capsys, "pack", "build", str(folder))
    assert code == 2 and "version: must be a semantic version" in err


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_upload_approve_enqueue_and_run_on_a_fresh_worker(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    dev = key(capsys, "packs:write", "packs:read")
    reviewer = key(capsys, "packs:approve", "packs:read")
    app = key(capsys, "jobs:write", "jobs:read")
    worker_key = key(capsys, "worker", "packs:read")
    server = stack.spawn("server", "serve", "--port", "0", env={"JOBENGINE_PACKS_FOUR_EYES": "on"})
    found = wait_for(lambda: re.search(r"http://127\.0\.0\.1:\d+", stack.output("server")), 120, "the server")
    stack.url = found.group(0)  # type: ignore[attr-defined]
    assert server.poll() is None, stack.output("server")
    url = ["--url", stack.url]

    folder = write_pack(stack.tmp / "src")
    code, out, err = cli(capsys, "pack", "push", str(folder), *url, "--key", dev)
    assert code == 0 and "pending_approval" in out, err
    code, _, err = cli(capsys, "pack", "approve", "hello@1.0.0", *url, "--key", dev, "--yes")
    assert code == 1 and "packs:approve" in err  # the uploader's key cannot approve
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {app}"}, timeout=60) as api:
        refused = api.post("/api/v1/jobs", json={"task": "hello@1.0.0:greet", "payload": {"who": "ann"}})
        assert refused.status_code == 422 and "pending_approval" in refused.json()["detail"]

        code, out, err = cli(capsys, "pack", "approve", "hello@1.0.0", *url, "--key", reviewer, "--yes")
        assert code == 0 and "approved" in out, err
        code, out, _ = cli(capsys, "pack", "show", "hello@1.0.0", *url, "--key", dev, "--json")
        shown = json.loads(out)
        assert shown["status"] == "approved" and [h["type"] for h in shown["history"]] == [
            "pack.uploaded", "pack.approved"
        ]  # fmt: skip
        code, out, _ = cli(capsys, "pack", "versions", "hello", *url, "--key", dev, "--json")
        assert [v["version"] for v in json.loads(out)] == ["1.0.0"]
        code, out, _ = cli(capsys, "pack", "list", "greets", *url, "--key", dev, "--json")
        assert [p["name"] for p in json.loads(out)] == ["hello"]
        code, out, err = cli(capsys, "pack", "pull", "hello@1.0.0", *url, "--key", dev, "--out", "pulled.tar.gz")
        assert code == 0, err
        assert (stack.tmp / "pulled.tar.gz").stat().st_size == shown["size"]
        code, _, err = cli(capsys, "pack", "reject", "hello@1.0.0", *url, "--key", reviewer, "--reason", "late")
        assert code == 2 and "approved" in err  # approved is not pending: 409

        job = api.post("/api/v1/jobs", json={"task": "hello@1.0.0:greet", "payload": {"who": "ann"}}).json()
        assert job["task"] == f"hello@{shown['sha256']}:greet"

        # A remote worker with an empty cache: it downloads by digest, verifies, unpacks, runs.
        cache = stack.tmp / "cache-remote"
        worker = stack.spawn("worker", "worker", "--remote", stack.url, "--key", worker_key, "--packs",
                             "hello@1.0.0", env={"JOBENGINE_PACKS_CACHE_DIR": str(cache)})  # fmt: skip

        def succeeded() -> bool:
            assert worker.poll() is None, stack.output("worker")
            return bool(api.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "succeeded")

        done = wait_for(succeeded, 120, "the job")
        assert done, stack.output("worker")
        result = api.get(f"/api/v1/jobs/{job['id']}").json()["result"]
        assert result["greeting"] == "hello ann" and result["pack"].startswith("_jobengine_pack_")
        assert (cache / shown["sha256"] / "hello" / "tasks.py").is_file()
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=15) == 0, stack.output("server")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_flipped_byte_in_stored_content_is_refused_by_the_worker(
    stack: Stack, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import asyncio

    from jobengine.engine import Engine
    from jobengine.packs.archive import build
    from jobengine.settings import Settings

    built = build(write_pack(tmp_path / "src"))

    async def publish() -> str:
        async with Engine.from_settings(Settings(database=stack.db)) as engine:
            v, _ = await engine.packs.upload(built.data, "key:dev")
            await engine.packs.approve(v.name, v.version, "key:reviewer")
            job = await engine.enqueue("hello@1.0.0:shout", {"who": "ann"})
            return str(job.id)

    job_id = asyncio.run(publish())
    # On SQLite the content is a file beside the database (packs_blob_store: filesystem, the default).
    (blob,) = Path(stack.db + ".packs").glob("sha256/*/*")
    assert blob.name == built.sha256
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))

    cache = tmp_path / "cache"
    worker = stack.spawn("worker", "worker", "--packs", "hello@1.0.0", env={"JOBENGINE_PACKS_CACHE_DIR": str(cache)})
    assert worker.wait(timeout=60) == 1, stack.output("worker")
    assert "hashes to" in stack.output("worker") and "refusing" in stack.output("worker")
    assert not cache.exists() or list(cache.iterdir()) == []  # nothing unpacked

    async def state() -> str:
        async with Engine.from_settings(Settings(database=stack.db)) as engine:
            return (await engine.get_job(job_id)).state.value  # type: ignore[arg-type]

    assert asyncio.run(state()) == "queued"  # never claimed
