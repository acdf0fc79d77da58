"""Workers that load packs in-process (SQLite): the registry fetcher, the cache by digest, requirements that
are refused rather than installed, phases, deprecation, and schedules that name a pack's task."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.engine import Engine
from jobengine.errors import InvalidJob, InvalidSchedule
from jobengine.packs.archive import build
from jobengine.packs.errors import MissingRequirement, PackConflict
from jobengine.packs.loader import RegistryFetcher, load_packs
from jobengine.settings import Settings
from support.packs import HELLO_MANIFEST, write_pack

PHASED = """name: etl
version: 0.1.0
tasks:
  run:
    queue: packs
    phases:
      - {name: extract, entry: etl.steps:extract}
      - {name: load, entry: etl.steps:load}
"""
PHASED_CODE = """
def extract(ctx):
    return [1, 2, 3]


async def load(ctx):
    from .helpers import total

    return total(ctx.results["extract"])
"""


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    settings = Settings(database=str(tmp_path / "jobs.db"), poll_interval=0.05, packs_cache_dir=str(tmp_path / "c"))
    async with Engine.from_settings(settings) as e:
        yield e


async def _publish(engine: Engine, folder: Path, approve: bool = True) -> str:
    v, _ = await engine.packs.upload(build(folder).data, "key:dev")
    if approve:
        await engine.packs.approve(v.name, v.version, "key:reviewer")
    return v.sha256


async def _run_until_done(engine: Engine, job_id: str, *more: str) -> object:
    worker = engine.worker(queues=("packs",), concurrency=2)
    task = asyncio.create_task(worker.run())
    try:
        for other in more:
            await engine.wait_for(other, timeout=60)
        return await engine.wait_for(job_id, timeout=60)
    finally:
        worker.stop()
        await task


async def test_a_worker_loads_an_approved_pack_and_runs_its_tasks(engine: Engine, tmp_path: Path) -> None:
    folder = write_pack(tmp_path / "src", "etl", "0.1.0", manifest=PHASED, code=PHASED_CODE)
    (folder / "hello" / "tasks.py").unlink()
    (folder / "hello").rename(folder / "etl")
    (folder / "etl" / "steps.py").write_text(PHASED_CODE)
    (folder / "etl" / "helpers.py").write_text("def total(xs):\n    return sum(xs)\n")
    sha = await _publish(engine, folder)
    hello = await _publish(engine, write_pack(tmp_path / "src"))

    fetcher = RegistryFetcher(engine.packs)
    loaded = await load_packs(engine.tasks, fetcher, "etl@0.1.0, hello@stable", engine.settings.packs_cache_dir)
    assert [(p.name, p.sha256) for p in loaded] == [("etl", sha), ("hello", hello)]
    assert f"etl@{sha}:run" in engine.tasks.names()
    spec = engine.tasks.get(f"hello@{hello}:greet")
    assert spec is not None and spec.queue == "packs" and spec.max_attempts == 2

    job = await engine.enqueue("etl@0.1.0:run")
    done = await _run_until_done(engine, job.id)
    assert done.state.value == "succeeded"  # type: ignore[attr-defined]
    assert done.result == {"extract": [1, 2, 3], "load": 6}  # type: ignore[attr-defined]
    assert [p.name for p in done.phases] == ["extract", "load"]  # type: ignore[attr-defined]

    # Loading again uses the cache (no fetch), and registering twice is harmless.
    class NoFetch(RegistryFetcher):
        async def fetch(self, sha256: str) -> bytes:
            raise AssertionError("fetched a cached pack")

    again = await load_packs(engine.tasks, NoFetch(engine.packs), ["etl@0.1.0"], engine.settings.packs_cache_dir)
    assert again[0].tasks == loaded[0].tasks


async def test_unapproved_versions_cannot_be_loaded_or_named(engine: Engine, tmp_path: Path) -> None:
    await _publish(engine, write_pack(tmp_path / "src"), approve=False)
    with pytest.raises(PackConflict, match="pending_approval"):
        await load_packs(engine.tasks, RegistryFetcher(engine.packs), "hello@1.0.0", tmp_path / "c")
    with pytest.raises(InvalidJob) as info:
        await engine.enqueue("hello@1.0.0:greet", {"who": "a"})
    assert info.value.field == "task"
    await engine.packs.reject("hello", "1.0.0", "key:reviewer", "not today")
    with pytest.raises(InvalidJob, match="rejected"):
        await engine.enqueue("hello@1.0.0:greet", {"who": "a"})
    with pytest.raises(InvalidJob, match="no pack version"):
        await engine.enqueue("hello@stable:greet", {"who": "a"})
    with pytest.raises(InvalidJob, match="pack task is"):
        await engine.enqueue("hello@1.0.0", {"who": "a"})
    assert await engine.list_jobs() == []  # nothing was written


async def test_required_packages_are_never_installed(engine: Engine, tmp_path: Path) -> None:
    base = HELLO_MANIFEST.format(name="hello", version="1.0.0", extra="", queue="packs")
    cases = {
        "1.0.0": ("requires: [surely-not-installed-pkg>=1]\n", "not installed"),
        "1.0.1": ("requires: ['PyYAML<1']\n", "is installed"),
        "1.0.2": ("min_engine_version: 99.0.0\n", "needs jobengine >= 99.0.0"),
    }
    for version, (extra, message) in cases.items():
        manifest = base.replace("version: 1.0.0\n", f"version: {version}\n{extra}")
        await _publish(engine, write_pack(tmp_path / version, version=version, manifest=manifest))
        with pytest.raises(MissingRequirement, match=message):
            await load_packs(engine.tasks, RegistryFetcher(engine.packs), f"hello@{version}", tmp_path / "c")
    assert engine.tasks.names() == []
    ok = base.replace(
        "version: 1.0.0\n", "version: 1.1.0\nrequires: ['PyYAML>=5', 'nothing-here; python_version < \"3\"']\n"
    )
    await _publish(engine, write_pack(tmp_path / "ok", version="1.1.0", manifest=ok))
    assert await load_packs(engine.tasks, RegistryFetcher(engine.packs), "hello@1.1.0", tmp_path / "c")


async def test_deprecated_versions_run_and_warn(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sha = await _publish(engine, write_pack(tmp_path / "src"))
    await load_packs(engine.tasks, RegistryFetcher(engine.packs), "hello@1.0.0", tmp_path / "c")
    queued = await engine.enqueue("hello@1.0.0:shout", {"who": "ann"})
    await engine.packs.deprecate("hello", "1.0.0", "key:reviewer", "use 2.0.0")
    with caplog.at_level(logging.WARNING, logger="jobengine.packs"):
        fresh = await engine.enqueue("hello@1.0.0:shout", {"who": "bob"})
    assert "deprecated" in caplog.text and "use 2.0.0" in caplog.text
    assert fresh.task == f"hello@{sha}:shout"
    assert (await _run_until_done(engine, queued.id, fresh.id)).result == "ANN"  # type: ignore[attr-defined]
    assert (await engine.get_job(fresh.id)).result == "BOB"
    # Once archived, new jobs are refused (jobs already stored keep their digest).
    await engine.packs.archive("hello", "1.0.0", "key:reviewer")
    with pytest.raises(InvalidJob, match="archived"):
        await engine.enqueue("hello@1.0.0:shout", {"who": "cy"})


async def test_schedules_naming_a_pack_need_an_approved_version(engine: Engine, tmp_path: Path) -> None:
    await _publish(engine, write_pack(tmp_path / "a"), approve=False)
    spec = ScheduleSpec(name="nightly", every=3600.0, template=JobTemplate(task="hello@1.0.0:greet",
                                                                        payload={"who": "x"}))  # fmt: skip
    with pytest.raises(InvalidSchedule) as info:
        await engine.schedules.create(spec)
    assert info.value.field == "template.task"
    await engine.packs.approve("hello", "1.0.0", "key:reviewer")
    created = await engine.schedules.create(spec)
    version = await engine.packs.get("hello", "1.0.0")
    assert created.spec.template.task == f"hello@{version.sha256}:greet"
    assert created.spec.template.queue == "packs"
    with pytest.raises(InvalidSchedule):
        await engine.schedules.update("nightly", template={"task": "hello@9.9.9:greet"})


async def test_the_worker_checks_the_bytes_it_receives(engine: Engine, tmp_path: Path) -> None:
    from jobengine.packs.registry import PackIntegrityError

    await _publish(engine, write_pack(tmp_path / "src"))

    class Tampered(RegistryFetcher):
        """A registry whose bytes are altered in transit (a proxy, a bad disk under the server)."""

        async def fetch(self, sha256: str) -> bytes:
            data = bytearray(await super().fetch(sha256))
            data[-10] ^= 0xFF
            return bytes(data)

    cache = tmp_path / "cache"
    with pytest.raises(PackIntegrityError, match="refusing to run it"):
        await load_packs(engine.tasks, Tampered(engine.packs), "hello@1.0.0", cache)
    assert not cache.exists() and engine.tasks.names() == []
