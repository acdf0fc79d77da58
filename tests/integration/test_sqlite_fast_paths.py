"""What the SQLite store does for speed must not change what it stores or returns.

- Event data written from templates (claim, complete, release, enqueue) is byte-equal to the codec's
  canonical text of the event body (the parity test compares decoded values only).
- The payload copy that skips re-parsing equals the parsed payload, type for type.
- Worker transitions commit at ``worker_synchronous``, everything else at ``synchronous``.
- An empty claim takes no write lock; waiting for the write lock is bounded by the busy timeout and
  ends soon after the lock is released.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobengine.backends.sqlite import SqliteStore
from jobengine.backends.sqlite.fenced import LeaseTokens
from jobengine.backends.sqlite.inserts import _decoded
from jobengine.core import codec
from jobengine.core.ids import LeaseToken, WorkerId
from jobengine.core.models import AttemptError, Completion, Event, FailOutcome, Failure, Lease, NewJob
from jobengine.errors import ConfigError, StoreUnavailable

T0 = 1_700_000_000.0


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "jobengine.db")


@pytest.fixture
async def store(db_path: str) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(db_path)
    await store.migrate()
    yield store
    await store.close()


def _stored_event_texts(db_path: str) -> list[tuple[int, str, str]]:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute("SELECT id, type, data FROM events ORDER BY id").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("worker", ["w1", 'wörker "7"\n\\ \u2028 \U0001f600', "host:123:abcdef"])
async def test_event_data_is_the_canonical_text_of_the_event_returned(
    store: SqliteStore, db_path: str, worker: str
) -> None:
    returned: list[Event] = []
    jobs = [NewJob(task="t", priority=p, payload={"i": p}) for p in (0, 5, -3, 1_000_000)]
    jobs += [NewJob(task="t", run_at=T0 + 60), NewJob(task="t", queue="q2")]
    inserted = await store.insert_jobs(jobs, T0, [()] * len(jobs))
    returned += inserted.events
    parent = inserted.jobs[0]
    child = NewJob(task="c", depends_on=(parent.id,))
    returned += (await store.insert_jobs([child], T0, [()])).events
    claimed = await store.fetch_jobs(["default", "q2"], 10, WorkerId(worker), 30.0, T0 + 0.25)
    returned += claimed.events
    by_id = {j.id: j for j in claimed.jobs}
    first, second, third, *rest = [j for j in claimed.jobs if j.id != parent.id]
    token = LeaseToken
    # A completion whose job has a dependent: the dependent's unblock event follows it.
    done = await store.complete_jobs(
        [Completion(j.id, token(j.lease_token or ""), {"r": 1.5}) for j in (by_id[parent.id], first)], T0 + 1.1
    )
    returned += done.events
    error = AttemptError(1, T0 + 2, "Boom", 'bad "thing"\n', "tb", worker)
    failed = await store.fail_jobs(
        [
            Failure(second.id, token(second.lease_token or ""), error, FailOutcome.RETRY, T0 + 10.5),
            Failure(third.id, token(third.lease_token or ""), error, FailOutcome.DEAD),
        ],
        T0 + 2,
    )
    returned += failed.events
    released = await store.release_jobs([Lease(j.id, token(j.lease_token or "")) for j in rest], T0 + 3)
    returned += released.events
    assert {e.type for e in returned} >= {
        "job.enqueued", "job.started", "job.succeeded", "job.unblocked", "job.failed", "job.dead", "job.released",
    }  # fmt: skip
    stored = _stored_event_texts(db_path)
    assert [(i, t) for i, t, _ in stored] == [(e.id, e.type) for e in returned]
    for (_, _, text), event in zip(stored, returned, strict=True):
        assert text == codec.dumps(dict(event.data), "event")
    assert await store.list_events(0, 1000) == returned


@pytest.mark.parametrize(
    "payload",
    [
        None, "text", 7, True, 2**70, 1.5, 1.0, [1, (2, 3)], (1, 2), {},
        {"i": 1, "t": 1_700_000_000.123, "s": "é", "b": False, "n": None},
        {"f": 2.0}, {"f": 1e21}, {"f": -0.0}, {"nested": {"a": 1}}, {"l": [1]}, {"t": (1,)},
    ],
)  # fmt: skip
def test_the_payload_copy_is_the_parsed_payload(payload: Any) -> None:
    text = codec.dumps(payload)
    copy = _decoded(payload, text)
    parsed = codec.loads(text)
    assert copy == parsed and repr(copy) == repr(parsed)
    if isinstance(payload, dict):
        assert copy is not payload


def test_lease_tokens_look_like_core_ones_and_do_not_repeat() -> None:
    tokens = LeaseTokens()
    seen = [tokens() for _ in range(2000)]
    assert len(set(seen)) == 2000
    assert all(len(t) == 24 and int(t, 16) >= 0 for t in seen)


async def _synchronous_level(store: SqliteStore) -> int:
    level: int = await store._read(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
    return level


@pytest.mark.parametrize(
    ("synchronous", "worker_synchronous", "levels"),
    [("FULL", "NORMAL", (2, 1)), ("FULL", "FULL", (2, 2)), ("NORMAL", "FULL", (1, 1)), ("EXTRA", "OFF", (3, 0))],
)
async def test_worker_transitions_commit_at_worker_synchronous(
    db_path: str, synchronous: str, worker_synchronous: str, levels: tuple[int, int]
) -> None:
    durable, worker = levels
    store = SqliteStore(db_path, synchronous=synchronous, worker_synchronous=worker_synchronous)
    try:
        await store.migrate()
        assert await _synchronous_level(store) == durable
        await store.insert_jobs([NewJob(task="t") for _ in range(3)], T0, [()] * 3)
        assert await _synchronous_level(store) == durable
        claimed = (await store.fetch_jobs(["default"], 2, WorkerId("w"), 30.0, T0)).jobs
        assert await _synchronous_level(store) == worker
        await store.cancel_jobs([claimed[0].id], "stop", T0 + 1)  # an operator's action: durable again
        assert await _synchronous_level(store) == durable
        await store.heartbeat_jobs([Lease(j.id, LeaseToken(j.lease_token or "")) for j in claimed], T0 + 60, T0 + 1)
        assert await _synchronous_level(store) == worker
    finally:
        await store.close()


def test_a_bad_worker_synchronous_is_refused(db_path: str) -> None:
    with pytest.raises(ConfigError, match="worker_synchronous"):
        SqliteStore(db_path, worker_synchronous="SOMETIMES")


async def test_an_empty_claim_takes_no_write_lock(db_path: str) -> None:
    store = SqliteStore(db_path, busy_timeout_ms=50)
    await store.migrate()
    await store.insert_jobs([NewJob(task="t", run_at=T0 + 3600)], T0, [()])  # not due yet
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        assert (await store.fetch_jobs(["default"], 10, WorkerId("w"), 30.0, T0)).jobs == []
        with pytest.raises(StoreUnavailable):  # a due job needs the lock
            await store.fetch_jobs(["default"], 10, WorkerId("w"), 30.0, T0 + 3600)
    finally:
        other.execute("ROLLBACK")
        other.close()
        await store.close()


async def test_a_waiter_gets_the_write_lock_soon_after_it_is_released(store: SqliteStore, db_path: str) -> None:
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    released_at: list[float] = []

    def hold() -> None:
        # SQLite's own busy handler would be in a 100 ms sleep by then (it sleeps 1, 2, 5 ... 50, 50, 100 ms).
        time.sleep(0.25)
        released_at.append(time.monotonic())
        other.execute("ROLLBACK")

    try:
        other.execute("BEGIN IMMEDIATE")
        holder = threading.Thread(target=hold)
        holder.start()
        inserted = await store.insert_jobs([NewJob(task="t")], T0, [()])
        got_at = time.monotonic()
        await asyncio.to_thread(holder.join)
    finally:
        other.close()
    assert inserted.created == [True]
    # Retries sleep at most ~1.5 ms (jitter included) this early; a loaded machine adds its own delays.
    assert got_at - released_at[0] < 0.05


async def test_commits_that_checkpoint_while_a_reader_holds_a_snapshot_do_not_wait(db_path: str) -> None:
    """The auto-checkpoint after a commit (every ~1,000 WAL pages) runs with the busy timeout back on; it is
    PASSIVE, so a reader pinning an old snapshot makes it stop early, never wait or fail the commit."""
    store = SqliteStore(db_path, busy_timeout_ms=2000)
    await store.migrate()
    reader = sqlite3.connect(db_path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM jobs").fetchone()  # holds its snapshot until ROLLBACK
        started = time.monotonic()
        for _ in range(12):  # ~5 MB of WAL: several checkpoint attempts
            batch = [NewJob(task="t", payload={"pad": "x" * 400}) for _ in range(1000)]
            await store.insert_jobs(batch, T0, [()] * len(batch))
        claimed = await store.fetch_jobs(["default"], 500, WorkerId("w"), 30.0, T0)
        await store.complete_jobs([Completion(j.id, LeaseToken(j.lease_token or "")) for j in claimed.jobs], T0 + 1)
        assert time.monotonic() - started < 60
        assert reader.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0  # still the old snapshot
    finally:
        reader.execute("ROLLBACK")
        reader.close()
        await store.close()
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT count(*) FROM jobs WHERE state = 'succeeded'").fetchone()[0] == 500
    finally:
        conn.close()
