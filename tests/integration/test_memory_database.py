"""``database: memory``: SQLite in a temporary directory of its own, removed when the store closes, or when
the process ends for a store never closed."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from jobengine.backends.sqlite import SqliteStore
from jobengine.backends.sqlite.temporary import TemporarySqliteStore
from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.settings import Settings


def _is_file(path: str) -> bool:
    return Path(path).is_file()


async def test_memory_is_a_sqlite_store_whose_directory_goes_when_it_closes() -> None:
    store = open_store("memory")
    assert isinstance(store, SqliteStore) and isinstance(store, TemporarySqliteStore)
    assert not store.capabilities.shared  # no other process knows the path
    directory = store.directory
    assert Path(store.path).parent == directory and directory.is_dir()
    await store.migrate()
    assert _is_file(store.path)
    await store.close()
    assert not directory.exists()
    await store.close()  # idempotent


async def test_two_memory_stores_share_nothing() -> None:
    async with (
        Engine.from_settings(Settings(database="memory")) as a,
        Engine.from_settings(Settings(database="memory")) as b,
    ):
        await a.enqueue("t")
        assert [j.task for j in await a.list_jobs()] == ["t"]
        assert await b.list_jobs() == []


def test_a_store_never_closed_leaves_nothing_behind() -> None:
    store = TemporarySqliteStore()
    directory = store.directory
    del store
    gc.collect()
    assert not directory.exists()
    # At interpreter exit too: a child process that opens one, migrates it and never closes it.
    code = (
        "import asyncio\n"
        "from jobengine.engine.compose import open_store\n"
        "store = open_store('memory')\n"
        "asyncio.run(store.migrate())\n"
        "print(store.directory, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    left = Path(out.stdout.strip())
    assert left.name.startswith("jobengine-memory-") and not left.exists()
