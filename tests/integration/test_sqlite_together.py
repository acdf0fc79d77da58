"""Group commit on SQLite (backends/sqlite/together.py): writes that arrive together share a transaction,
and one that fails takes only itself back."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobengine.backends.sqlite import SqliteStore
from jobengine.core.models import NewJob
from jobengine.errors import StoreError

T0 = 1_700_000_000.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(str(tmp_path / "jobs.db"))
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()


def _count_groups(store: SqliteStore) -> list[int]:
    """Wraps the store's group runner: the returned list gets one entry (the group's size) per transaction."""
    together: Any = store._together
    run, sizes = together._run, []

    async def counted(fn: Any) -> Any:
        out = await run(fn)
        sizes.append(len(out))
        return out

    together._run = counted
    return sizes


async def test_concurrent_enqueues_share_one_transaction(store: SqliteStore) -> None:
    sizes = _count_groups(store)
    batches = [[NewJob("t")] for _ in range(20)]
    outs = await asyncio.gather(*(store.insert_jobs_outboxed(b, T0, [()]) for b in batches))
    # The first found nothing in flight and went alone; the 19 that arrived meanwhile shared the next.
    assert sizes == [1, 19]
    assert [o.inserted.jobs[0].id for o in outs] == [b[0].id for b in batches]
    assert len({r.id for o in outs for r in o.rows}) == 20  # each got its own outbox row id
    stored = await store.get_jobs([b[0].id for b in batches])
    assert len(stored) == 20
    # Sequential callers get groups of one.
    await store.insert_jobs_outboxed([NewJob("t")], T0, [()])
    await store.insert_jobs_outboxed([NewJob("t")], T0, [()])
    assert sizes == [1, 19, 1, 1]


async def test_a_failing_write_takes_only_itself_back(store: SqliteStore) -> None:
    await store._write(lambda c: c.execute("CREATE TABLE t (x INTEGER NOT NULL)"))

    def boom(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t VALUES (2)")
        raise ValueError("refused")

    calls = [
        store._write_together(lambda c: c.execute("INSERT INTO t VALUES (1)").rowcount),
        store._write_together(boom),
        store._write_together(lambda c: c.execute("INSERT INTO t VALUES (NULL)").rowcount),  # NOT NULL
        store._write_together(lambda c: c.execute("INSERT INTO t VALUES (4)").rowcount),
    ]
    out = await asyncio.gather(*calls, return_exceptions=True)
    assert out[0] == 1 and out[3] == 1
    assert isinstance(out[1], ValueError)
    assert isinstance(out[2], StoreError)  # translated, as a lone write's error is
    rows = await store._read(lambda c: c.execute("SELECT x FROM t ORDER BY x").fetchall())
    assert [r[0] for r in rows] == [1, 4]


async def test_a_cancelled_caller_leaves_its_group_alone(store: SqliteStore) -> None:
    jobs = [NewJob("t") for _ in range(3)]
    calls = [asyncio.ensure_future(store.insert_jobs_outboxed([j], T0, [()])) for j in jobs]
    await asyncio.sleep(0)  # all queued
    calls[1].cancel()
    out = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(out[1], asyncio.CancelledError)
    # Its write was in the group already: stored with the others, as a write whose caller went away.
    async with asyncio.timeout(30):
        while len(await store.get_jobs([j.id for j in jobs])) < 3:  # noqa: ASYNC110 - nothing announces it
            await asyncio.sleep(0.01)


async def test_a_lone_write_cancelled_before_the_store_thread_takes_it_is_not_made(store: SqliteStore) -> None:
    gate = threading.Event()
    busy = asyncio.ensure_future(store._read(lambda c: gate.wait(30)))  # holds the store thread
    job = NewJob("t")
    lone = asyncio.ensure_future(store.insert_jobs_outboxed([job], T0, [()]))
    await asyncio.sleep(0)  # submitted, behind the read
    lone.cancel()
    gate.set()
    assert await busy is True
    with pytest.raises(asyncio.CancelledError):
        await lone
    assert await store.get_jobs([job.id]) == []
    after = NewJob("t")  # and the next write goes on as usual
    await store.insert_jobs_outboxed([after], T0, [()])
    assert [j.id for j in await store.get_jobs([after.id])] == [after.id]
