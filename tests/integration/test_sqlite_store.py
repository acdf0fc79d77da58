"""What only the SQLite store has to prove: several connections and processes on one file, the
notifier across processes, migrations, error translation, and that the hot queries use their indexes."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.backends.sql.base import Dialect
from jobengine.backends.sql.reads import count_statement
from jobengine.backends.sqlite import SqliteStore
from jobengine.backends.sqlite.migrate import load_migrations
from jobengine.core.ids import JobId, LeaseToken, WorkerId
from jobengine.core.models import (
    AttemptError,
    Completion,
    FailOutcome,
    Failure,
    JobFilter,
    Lease,
    NewJob,
)
from jobengine.core.states import JobState
from jobengine.errors import ConfigError, InvalidJob, StoreError, StoreUnavailable, UnknownDependency

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


# -- migrations -----------------------------------------------------------------------------------------


async def test_migrate_is_idempotent_and_recorded(db_path: str) -> None:
    shipped = load_migrations()
    assert [m.version for m in shipped][:1] == [1] and shipped[0].name == "init"
    store = SqliteStore(db_path)
    try:
        assert await store.migrate() == [m.version for m in shipped]
        assert await store.migrate() == []
    finally:
        await store.close()
    conn = sqlite3.connect(db_path)
    try:
        rows = conn.execute("SELECT version, name, applied_at FROM jobengine_migrations").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert [(v, n) for v, n, _ in rows] == [(m.version, m.name) for m in shipped] and rows[0][2] > 0
    assert mode == "wal"


async def test_two_processes_migrating_at_once_apply_each_version_once(db_path: str) -> None:
    stores = [SqliteStore(db_path) for _ in range(4)]  # four connections, four threads: real contention
    try:
        applied = await asyncio.gather(*(s.migrate() for s in stores))
    finally:
        for s in stores:
            await s.close()
    assert sorted(applied) == [[], [], [], [m.version for m in load_migrations()]]


# -- several stores on one file ---------------------------------------------------------------------------


async def test_stores_sharing_a_file_never_claim_a_job_twice(store: SqliteStore, db_path: str) -> None:
    await store.insert_jobs([NewJob(task="t", priority=i % 7) for i in range(300)], T0, [()] * 300)
    others = [SqliteStore(db_path) for _ in range(3)]
    try:
        everyone = [store, *others]
        results = await asyncio.gather(
            *(s.fetch_jobs(["default"], 7, WorkerId(f"w{i}"), 30.0, T0) for i in range(60) for s in everyone)
        )
    finally:
        for s in others:
            await s.close()
    claimed = [j.id for r in results for j in r.jobs]
    assert len(claimed) == len(set(claimed)) == 300
    events = await store.list_events(0, 10_000)
    assert len({e.id for e in events}) == len(events) == 600


async def test_a_writer_in_another_process_does_not_block_reads(store: SqliteStore, db_path: str) -> None:
    (job,) = (await store.insert_jobs([NewJob(task="t")], T0, [()])).jobs
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        assert [j.id for j in await store.get_jobs([job.id])] == [job.id]  # WAL: readers carry on
    finally:
        other.execute("ROLLBACK")
        other.close()


async def test_a_write_lock_held_too_long_is_reported_unavailable(db_path: str) -> None:
    store = SqliteStore(db_path, busy_timeout_ms=50)
    await store.migrate()
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable):
            await store.insert_jobs([NewJob(task="t")], T0, [()])
        other.execute("ROLLBACK")
        assert (await store.insert_jobs([NewJob(task="t")], T0, [()])).created == [True]
    finally:
        other.close()
        await store.close()


async def test_concurrent_inserts_commit_together_and_fail_alone(store: SqliteStore, db_path: str) -> None:
    """Inserts that wait for the store thread share one transaction, each in a savepoint: a refused one
    changes nothing and raises, the others commit; a job may depend on one written earlier in the group,
    and an idempotency key used earlier in the group finds that job."""
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # holds the lock, so the calls below queue up behind the first one
    try:
        first = asyncio.ensure_future(store.insert_jobs([NewJob(task="first")], T0, [()]))
        b = NewJob(task="b")
        keyed = NewJob(task="k", payload={"x": 1}, idempotency_key="key")
        calls = [
            [b],
            [NewJob(task="bad1"), NewJob(task="bad2", depends_on=(JobId("no-such-job"),))],
            # fails half way: bad3 is written before bad4's id (b's) is refused
            [NewJob(task="bad3"), NewJob(task="bad4", id=b.id, timeout=5.0)],
            [keyed],
            [NewJob(task="k", payload={"x": 1}, idempotency_key="key")],
            [NewJob(task="after_b", depends_on=(b.id,))],
        ]
        rest = [asyncio.ensure_future(store.insert_jobs(jobs, T0, [()] * len(jobs))) for jobs in calls]
        await asyncio.sleep(0.2)
        assert not first.done() and not any(r.done() for r in rest)  # nothing answers before its commit
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert (await first).created == [True]
    results = await asyncio.gather(*rest, return_exceptions=True)
    assert isinstance(results[1], UnknownDependency)
    assert isinstance(results[2], InvalidJob)
    ok = [r for r in results if not isinstance(r, BaseException)]
    assert [r.created for r in ok] == [[True], [True], [False], [True]]
    assert ok[2].jobs[0].id == keyed.id  # the key's first job, written in an earlier savepoint
    assert ok[3].jobs[0].state is JobState.BLOCKED  # b is queued, in the same transaction
    stored = {j.task for j in await store.list_jobs(JobFilter(limit=100))}
    assert stored == {"first", "b", "k", "after_b"}  # nothing of the refused call


# -- the notifier -------------------------------------------------------------------------------------------


async def test_the_notifier_wakes_on_a_commit_from_another_connection(store: SqliteStore, db_path: str) -> None:
    notifier = store.notifier()
    assert await notifier.wait(0.05) is False
    other = SqliteStore(db_path)
    try:
        waiter = asyncio.create_task(notifier.wait(5.0))
        await asyncio.sleep(0.02)
        assert not waiter.done()
        await other.insert_jobs([NewJob(task="t")], T0, [()])
        assert await asyncio.wait_for(waiter, 1.0) is True
    finally:
        await other.close()


async def test_a_commit_while_nobody_waits_wakes_the_next_wait(store: SqliteStore) -> None:
    notifier = store.notifier()
    await store.insert_jobs([NewJob(task="t")], T0, [()])  # between a worker's fetch and its wait
    assert await notifier.wait(1.0) is True
    assert await notifier.wait(0.05) is False


async def test_a_quiet_file_is_asked_less_often_and_a_commit_still_wakes(store: SqliteStore, db_path: str) -> None:
    notifier = store.notifier()
    asked = 0
    read = notifier._read_version

    def counting() -> int | None:
        nonlocal asked
        asked += 1
        return read()

    notifier._read_version = counting  # type: ignore[method-assign]
    assert await notifier.wait(1.0) is False  # a second of quiet
    asked = 0
    assert await notifier.wait(1.0) is False
    # Every 2 ms this second would be ~500 questions (fewer on a busy machine, never near 40).
    assert asked <= 40
    other = SqliteStore(db_path)
    try:
        waiter = asyncio.create_task(notifier.wait(30.0))
        await asyncio.sleep(0.02)
        await other.insert_jobs([NewJob(task="t")], T0, [()])
        assert await asyncio.wait_for(waiter, 10.0) is True
    finally:
        await other.close()


async def test_every_waiter_wakes(store: SqliteStore) -> None:
    notifier = store.notifier()
    waiters = [asyncio.create_task(notifier.wait(5.0)) for _ in range(3)]
    await asyncio.sleep(0.02)
    await store.insert_jobs([NewJob(task="t")], T0, [()])
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1.0) == [True, True, True]


@pytest.mark.timeout(300)
async def test_the_notifier_wakes_on_a_commit_from_another_process(store: SqliteStore, db_path: str) -> None:
    notifier = store.notifier()
    script = textwrap.dedent(
        f"""
        import asyncio
        from jobengine.backends.sqlite import SqliteStore
        from jobengine.core.models import NewJob

        async def main():
            store = SqliteStore({db_path!r})
            await store.insert_jobs([NewJob(task="from.elsewhere")], {T0}, [()])
            await store.close()

        asyncio.run(main())
        """
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    try:
        assert await notifier.wait(30.0) is True
    finally:
        assert await proc.wait() == 0
    (job,) = await store.list_jobs(JobFilter())
    assert job.task == "from.elsewhere"


async def test_notify_from_another_thread_wakes_the_waiter(store: SqliteStore) -> None:
    notifier = store.notifier()
    waiter = asyncio.create_task(notifier.wait(10.0))
    await asyncio.sleep(0.01)
    thread = threading.Thread(target=notifier.notify)
    thread.start()
    thread.join()
    assert await asyncio.wait_for(waiter, 1.0) is True


async def test_closing_the_notifier_releases_waiters(store: SqliteStore) -> None:
    notifier = store.notifier()
    waiter = asyncio.create_task(notifier.wait(10.0))
    await asyncio.sleep(0.01)
    await notifier.close()
    assert await asyncio.wait_for(waiter, 1.0) is False
    assert await notifier.wait(1.0) is False
    await notifier.close()  # idempotent


# -- lifecycle and errors -------------------------------------------------------------------------------------


async def test_close_is_idempotent_and_a_closed_store_is_unavailable(db_path: str) -> None:
    store = SqliteStore(db_path)
    await store.migrate()
    store.notifier()
    await store.close()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.get_jobs([JobId("0190f2c4-0000-7000-8000-000000000000")])
    with pytest.raises(StoreUnavailable):
        await store.list_jobs(JobFilter())


async def test_a_path_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "no" / "such" / "dir" / "x.db"))
    try:
        with pytest.raises(StoreUnavailable):
            await store.migrate()
    finally:
        await store.close()


async def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database" * 200)
    store = SqliteStore(str(path))
    try:
        with pytest.raises(StoreError):
            await store.migrate()
    finally:
        await store.close()


async def test_a_store_used_before_migrate_says_so(db_path: str) -> None:
    store = SqliteStore(db_path)
    try:
        with pytest.raises(StoreError, match="migrate"):
            await store.insert_jobs([NewJob(task="t")], T0, [()])
    finally:
        await store.close()


@pytest.mark.parametrize("kwargs", [{"path": ":memory:"}, {"path": ""}, {"path": "x.db", "synchronous": "SOMETIMES"}])
def test_settings_that_cannot_work_are_refused(kwargs: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        SqliteStore(**kwargs)


async def test_synchronous_is_applied(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "n.db"), synchronous="normal")
    try:
        await store.migrate()
        level = await store._read(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
    finally:
        await store.close()
    assert level == 1  # NORMAL


# -- query plans ----------------------------------------------------------------------------------------------

# A plan line that reads a whole table (or a whole index of it) would make that operation O(table size).
_FULL_SCAN = re.compile(r"^SCAN (jobs|events|job_deps|[a-z])\b")


async def test_the_hot_statements_use_their_indexes(store: SqliteStore) -> None:
    """Every statement a worker, the rescuer, retention and the dashboard run is an index search.

    Allowed exceptions: list_jobs without a tenant walks the primary key newest first (stopping at the
    limit) and count_jobs without a tenant counts everything, by definition."""
    statements: list[str] = []
    await store._read(lambda c: c.set_trace_callback(statements.append))
    parent = NewJob(task="p", idempotency_key="k")
    child = NewJob(task="c", depends_on=(parent.id,))
    await store.insert_jobs([parent, child, NewJob(task="q", queue="other")], T0, [(), (), ()])
    claimed = (await store.fetch_jobs(["default", "other"], 10, WorkerId("w"), 30.0, T0)).jobs
    leases = [Lease(j.id, LeaseToken(j.lease_token or "")) for j in claimed]
    await store.heartbeat_jobs(leases, T0 + 60, T0 + 1)
    await store.expired_jobs(T0 + 100, 10)
    by_task = {j.task: j for j in claimed}
    await store.complete_jobs([Completion(by_task["p"].id, LeaseToken(by_task["p"].lease_token or ""))], T0 + 2)
    (running_child,) = (await store.fetch_jobs(["default"], 10, WorkerId("w"), 30.0, T0 + 3)).jobs
    error = AttemptError(1, T0 + 4, "E", "m")
    await store.fail_jobs(
        [Failure(running_child.id, LeaseToken(running_child.lease_token or ""), error, FailOutcome.DEAD)], T0 + 4
    )
    await store.release_jobs([Lease(by_task["q"].id, LeaseToken(by_task["q"].lease_token or ""))], T0 + 4)
    await store.cancel_jobs([by_task["q"].id], "x", T0 + 5)
    await store.retry_jobs([running_child.id], T0 + 6)
    await store.prune_jobs(T0 + 10, T0 + 10, T0 + 10, 10)
    await store.list_jobs(JobFilter(tenant="default"))
    await store.list_jobs(JobFilter(tenant="default", states=(JobState.DEAD, JobState.QUEUED), queue="other"))
    await store.list_events(0, 10, job_id=parent.id)
    await store.next_run_at(["default", "other"])
    await store.count_jobs("default", finished=False)
    await store.get_jobs([parent.id, child.id])
    await store._read(lambda c: c.set_trace_callback(None))

    def plans(conn: sqlite3.Connection) -> dict[str, list[str]]:
        found = {}
        for sql in dict.fromkeys(statements):
            if re.match(r"\s*(SELECT|UPDATE|DELETE|INSERT)\b", sql, re.IGNORECASE):
                found[sql] = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
        return found

    found = await store._read(plans)
    assert len(found) > 20
    full_scans = {sql[:200]: plan for sql, plan in found.items() if any(_FULL_SCAN.match(p) for p in plan)}
    assert full_scans == {}


async def test_counting_unfinished_jobs_of_every_tenant_reads_only_their_partial_indexes(store: SqliteStore) -> None:
    sql, _ = count_statement(None, finished=False)
    plan = await store._read(lambda c: [r[3] for r in c.execute("EXPLAIN QUERY PLAN " + Dialect().q(sql))])
    scans = [step for step in plan if step.startswith("SCAN")]
    assert scans == [f"SCAN jobs USING INDEX {i}" for i in ("jobs_claim", "jobs_lease", "jobs_blocked")], plan


# -- the state directory --------------------------------------------------------------------------------
async def test_the_default_database_makes_the_state_directory_when_first_opened(tmp_path: Path) -> None:
    from jobengine.engine import Engine
    from jobengine.settings import Settings

    state = tmp_path / "state"
    engine = Engine.from_settings(Settings(state_dir=str(state)))
    assert not state.exists()  # building an engine (an --app module being imported) writes nothing
    async with engine:
        pass
    assert (state / "jobengine.db").is_file()
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
    elsewhere = Engine.from_settings(Settings(state_dir=str(tmp_path / "unused"), database=str(tmp_path / "j.db")))
    async with elsewhere:
        pass
    assert not (tmp_path / "unused").exists()  # an explicit database keeps its files beside it
