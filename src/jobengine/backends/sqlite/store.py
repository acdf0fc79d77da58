"""The SQLite Store: one file in WAL mode, shared by any number of processes on one machine.

All SQLite work of a store runs on one dedicated thread that owns the connection: sqlite3 calls block,
and a single writer per process is what SQLite wants anyway (writers serialise on the file lock; WAL
lets readers in other processes carry on). Every write transaction starts with ``BEGIN IMMEDIATE``;
several processes contend for the write lock within the busy timeout (see ``connection.begin_immediate``),
never by failing half way. The lock is held for SQL only: what can be computed without the database
(payload texts) is computed before ``BEGIN``, and the Job / Event values returned are built after
``COMMIT`` (``inserts``, ``fenced``).

Durability is split by who asked (``synchronous`` / ``worker_synchronous``). Enqueues and operator actions
(insert, cancel, retry, prune, migrate, and everything else not listed next) commit at ``synchronous``
(FULL by default: on disk when acknowledged, power loss included). A worker's own transitions (fetch,
heartbeat, save_phases, complete, fail, release) commit at ``worker_synchronous`` (NORMAL by default: no
fsync per commit). This loses nothing that was acknowledged, because in WAL mode commits are appended to
the log in order, a crash can only lose a suffix of the log (recovery stops at the first frame whose
checksum does not follow on), and the fsync of a FULL commit makes every frame before it durable too. So a
power loss can roll back only worker progress made after the last FULL commit: a job that was started,
completed or failed becomes running or queued again and runs again once its lease expires (jobs run at
least once, which they must tolerate anyway: a worker can die after a job's side effects and before its
completion), while every acknowledged enqueue or cancel survives. What is lost is an event suffix as well:
their ids are given out again, so a consumer that saw those events before the power loss must not trust its
``after_id`` cursor across it. A process crash (not power loss) loses nothing at either level.

Cancelling a coroutine that awaits a store call does not cancel the transaction already running on the
thread: it commits or rolls back on its own. A fetch whose caller went away leaves claimed jobs behind,
which the rescuer recovers when their lease expires.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from jobengine.aio import CallThread
from jobengine.backends.sql.keys import SqlKeysMixin
from jobengine.backends.sql.outbox import SqlOutboxMixin
from jobengine.backends.sql.packs import SqlPacksMixin
from jobengine.backends.sql.queues import SqlQueuesMixin
from jobengine.backends.sql.reads import SqlReadsMixin
from jobengine.core.ids import JobId, WorkerId
from jobengine.core.models import (
    Changed,
    Completion,
    Failure,
    Heartbeat,
    Inserted,
    Job,
    JobFilter,
    Lease,
    NewJob,
    PhaseUpdate,
    Pruned,
)
from jobengine.errors import ConfigError, StoreUnavailable
from jobengine.ports.store import Capabilities

from . import db as graph_steps
from . import fenced, inserts, reads, writes
from .api import SqliteApiMixin
from .connection import SYNCHRONOUS_MODES, OwnConnection, connect, in_transaction, translate, weaker
from .db import SqliteDb, same
from .flow import SqliteFlowMixin
from .leader import SqliteLeader
from .migrate import apply_migrations, load_migrations
from .notifier import SqliteNotifier
from .outbox import SqliteOutboxMixin
from .together import Together
from .workers import SqliteWorkers

T = TypeVar("T")
R = TypeVar("R")


class SqliteStore(
    SqlKeysMixin,
    SqlQueuesMixin,
    SqliteApiMixin,
    SqlOutboxMixin,
    SqliteOutboxMixin,
    SqlReadsMixin,
    SqlPacksMixin,
    SqliteFlowMixin,
):
    """The Store port on a SQLite file.

    Example::

        store = SqliteStore("jobengine.db")
        await store.migrate()
        inserted = await store.insert_jobs([NewJob(task="email.send", payload={"to": "a@b.c"})], now, [()])
        await store.close()

    ``synchronous`` is SQLite's durability knob: FULL (default) survives power loss at every commit;
    NORMAL in WAL mode may lose the last commits on power loss but never corrupts. ``worker_synchronous``
    (NORMAL by default) is the level of a worker's own transitions, never more durable than
    ``synchronous`` (the module's docstring explains why NORMAL loses no acknowledged job). ``busy_timeout_ms``
    bounds how long a transaction waits for another process's write lock before StoreUnavailable.
    ``leader_lease_seconds``: the lease of the leaders it hands out (:meth:`leader`).
    Driver errors surface as StoreError / StoreUnavailable.
    """

    capabilities = Capabilities(cross_process_notify=True, shared=True, migrates_on_first_use=True)

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        worker_synchronous: str = "NORMAL",
        busy_timeout_ms: int = 30000,
        leader_lease_seconds: float = 5.0,
        prepare: Callable[[], object] | None = None,
    ) -> None:
        """``prepare``: called once before the file is first opened (to make the directory it lies in)."""
        if path == ":memory:" or path.startswith("file::memory:") or path == "":
            # Each connection would get its own private database: the notifier's connection could never
            # see the store's commits. ``database: memory`` is a temporary file instead.
            raise ConfigError("sqlite: path must name a file (use database: memory for a throwaway store)")
        mode = synchronous.upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ConfigError(f"sqlite: synchronous must be one of {sorted(SYNCHRONOUS_MODES)}, not {synchronous!r}")
        worker_mode = worker_synchronous.upper()
        if worker_mode not in SYNCHRONOUS_MODES:
            raise ConfigError(
                f"sqlite: worker_synchronous must be one of {sorted(SYNCHRONOUS_MODES)}, not {worker_synchronous!r}"
            )
        if busy_timeout_ms < 0:
            raise ConfigError("sqlite: busy_timeout_ms must be >= 0")
        self._path = path
        self._synchronous = mode
        self._worker_synchronous = weaker(mode, worker_mode)
        self._synchronous_now: str | None = None  # what the connection is set to (store thread only)
        self._busy_timeout_ms = busy_timeout_ms
        self._leader_lease_seconds = leader_lease_seconds
        self._prepare = prepare
        self._thread = CallThread("jobengine-sqlite")
        # Inserts waiting for the store thread (callers may run on several event loops or threads).
        self._conn = OwnConnection(self._open)  # opened and used only on the store thread
        self._notifier: SqliteNotifier | None = None
        self._workers: SqliteWorkers | None = None
        self._closed = False
        self._together = Together(self._write)
        self.db = SqliteDb(self)  # the runner of the repositories shared with PostgreSQL

    @property
    def path(self) -> str:
        return self._path

    # -- plumbing -----------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if self._prepare is not None:
            self._prepare()
            self._prepare = None
        conn = connect(self._path, busy_timeout_ms=self._busy_timeout_ms, synchronous=self._synchronous)
        fenced.register_functions(conn, fenced.LeaseTokens())
        self._synchronous_now = self._synchronous
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Runs on the store thread. The one place driver errors become jobengine errors."""
        try:
            return fn(self._conn.get())
        except sqlite3.Error as exc:
            raise translate(exc) from exc

    def _transaction(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], synchronous: str) -> T:
        """On the store thread: ``fn`` in a write transaction that commits at ``synchronous``. The pragma is
        a setting of the connection, changed between transactions and only when it differs."""
        if synchronous != self._synchronous_now:
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            self._synchronous_now = synchronous
        return in_transaction(conn, fn, self._busy_timeout_ms)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreUnavailable("sqlite: the store is closed")
        try:
            return await self._thread.submit(self._call, fn)
        except RuntimeError as exc:
            if self._closed:  # closed while this call was being submitted
                raise StoreUnavailable("sqlite: the store is closed") from exc
            raise

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in a write transaction at ``synchronous``: enqueues, operator actions, everything durable."""
        return await self._run(lambda c: self._transaction(c, fn, self._synchronous))

    async def _write_together(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """As :meth:`_write`, sharing the transaction (and its fsync) with writes that arrive meanwhile
        (:mod:`.together`): for enqueues, which many callers make at once."""
        if not self._together.usable():
            return await self._write(fn)
        return await self._together.write(fn)

    async def _work(self, fn: Callable[[sqlite3.Connection], R], then: Callable[[R], T]) -> T:
        """A worker's transition: ``fn`` in a write transaction at ``worker_synchronous``, then ``then`` of
        its result after COMMIT (building values without holding the write lock)."""
        return await self._run(lambda c: then(self._transaction(c, fn, self._worker_synchronous)))

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._run(fn)

    # -- lifecycle ----------------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        migrations = load_migrations()
        return await self._write(lambda c: apply_migrations(c, migrations))

    async def close(self) -> None:
        """Close the notifier, the connection and the thread. Idempotent."""
        if self._closed:
            return
        if self._workers is not None:
            await self._workers.close()
        self._closed = True  # refuse new calls; those already queued on the thread still run first
        if self._notifier is not None:
            await self._notifier.close()
        await self._thread.submit(self._conn.close)
        self._thread.shutdown()  # idle by now: returns at once

    def notifier(self) -> SqliteNotifier:
        if self._notifier is None:
            self._notifier = SqliteNotifier(self._path)
        return self._notifier

    def finished_notifier(self) -> SqliteNotifier:
        return SqliteNotifier(self._path)

    def graphs(self) -> SqlGraphs:
        """Graphs of jobs in this file (:mod:`jobengine.ports.graphs`)."""
        from jobengine.backends.sql.graphs import SqlGraphs

        return SqlGraphs(self.db)

    def scheduling(self) -> SqlScheduling:
        """Schedules, runs and failure signatures in this file (on this store's thread and connection)."""
        from jobengine.backends.sql.schedules import SqlScheduling  # a worker never loads it

        return SqlScheduling(self.db)

    def workers(self) -> SqliteWorkers:
        """The registry of live workers (:mod:`jobengine.ports.workers`)."""
        if self._workers is None:
            self._workers = SqliteWorkers(self)
        return self._workers

    def leader(self, name: str) -> SqliteLeader:
        """A lease-row leader for ``name`` among every process using this file (``leader_lease_seconds``)."""
        return SqliteLeader(self, name, lease_seconds=self._leader_lease_seconds)

    def webhook_store(self, settings: Settings) -> WebhookStore:
        """Webhooks in this file, their secrets sealed with ``secret_keys`` or else the key file beside it."""
        from jobengine.backends.sql.webhooks import SqlWebhookStore
        from jobengine.backends.webhooks import secret_box

        return SqlWebhookStore(self.db, secret_box(settings, self.path))

    def blob_store(self, settings: Settings) -> BlobStore:
        """Pack content: by default in files beside this one (``<database>.packs``)."""
        from jobengine.backends.blobs import choose_blob_store
        from jobengine.backends.sql.blobs import SqlBlobStore

        return choose_blob_store(
            settings, "sqlite", lambda: SqlBlobStore(self.db, self.path), beside=Path(self.path + ".packs")
        )

    # -- transitions --------------------------------------------------------------------------------
    async def insert_jobs(self, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]) -> Inserted:
        """Concurrent calls share one transaction (group commit, :mod:`.together`): each call's jobs are
        written in a savepoint of their own, so a refused call (an unknown dependency, an idempotency
        conflict) changes nothing and fails alone, and every call returns only once the transaction holding
        its jobs has committed: one fsync for them all, where each alone would pay its own."""
        if not jobs:
            return Inserted([], [], [])
        if self._closed:  # before queueing: a call refused now must not be written by a later one
            raise StoreUnavailable("sqlite: the store is closed")
        texts = inserts.encode(jobs)  # outside the transaction: the costliest part needs no lock
        written = await self._write_together(lambda c: inserts.write(c, jobs, texts, now, phases))
        return inserts.built(written)

    async def fetch_jobs(
        self,
        queues: Sequence[str],
        limit: int,
        worker: WorkerId,
        lease_seconds: float,
        now: float,
        *,
        tasks: Sequence[str] | None = None,
        tenant: str | None = None,
    ) -> Changed:
        which = fenced.Claimable(tasks, tenant)
        if limit <= 0 or not queues or which.nothing:
            return Changed()
        names = list(dict.fromkeys(queues))

        def fetch(conn: sqlite3.Connection) -> Changed:
            if not fenced.any_due(conn, names, now, which):  # a WAL read: no write lock for an empty claim
                return Changed()
            claim = self._transaction(
                conn,
                lambda c: fenced.claim(c, names, limit, worker, lease_seconds, now, which),
                self._worker_synchronous,
            )
            return fenced.claimed(claim, worker, now)

        return await self._run(fetch)

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_until: float, now: float) -> Heartbeat:
        if not leases:
            return Heartbeat(frozenset(), frozenset())
        return await self._work(lambda c: fenced.heartbeat_jobs(c, leases, lease_until, now), same)

    async def save_phases(self, updates: Sequence[PhaseUpdate], now: float) -> Changed:
        if not updates:
            return Changed()
        return await self._work(lambda c: writes.save_phases(c, updates, now), same)

    async def complete_jobs(self, completions: Sequence[Completion], now: float) -> Changed:
        if not completions:
            return Changed()
        return await self._work(lambda c: graph_steps.succeed(c, completions, now), lambda a: fenced.succeeded(a, now))

    async def fail_jobs(self, failures: Sequence[Failure], now: float) -> Changed:
        if not failures:
            return Changed()
        return await self._work(lambda c: graph_steps.fail(c, failures, now), lambda a: fenced.failed(a, failures, now))

    async def release_jobs(self, leases: Sequence[Lease], now: float) -> Changed:
        if not leases:
            return Changed()
        return await self._work(lambda c: fenced.release(c, leases, now), lambda a: fenced.released(a, now))

    async def cancel_jobs(self, ids: Sequence[JobId], reason: str, now: float, tenant: str | None = None) -> Changed:
        if not ids:
            return Changed()
        return await self._write(lambda c: graph_steps.cancel_jobs(c, ids, reason, now, tenant))

    async def retry_jobs(self, ids: Sequence[JobId], now: float, tenant: str | None = None) -> Changed:
        if not ids:
            return Changed()
        return await self._write(lambda c: writes.retry_jobs(c, ids, now, tenant))

    async def prune_jobs(self, stale_before: float, delete_before: float, now: float, limit: int) -> Pruned:
        return await self._write(lambda c: writes.prune_jobs(c, stale_before, delete_before, now, limit))

    # -- reads --------------------------------------------------------------------------------------
    async def expired_jobs(self, now: float, limit: int) -> list[Job]:
        return await self._read(lambda c: reads.expired_jobs(c, now, limit))

    async def list_jobs(self, filter: JobFilter) -> list[Job]:
        return await self._read(lambda c: reads.list_jobs(c, filter))

    async def next_run_at(self, queues: Sequence[str], tasks: Sequence[str] | None = None) -> float | None:
        return await self._read(lambda c: reads.next_run_at(c, queues, tasks))


if TYPE_CHECKING:
    from jobengine.backends.sql.graphs import SqlGraphs
    from jobengine.backends.sql.schedules import SqlScheduling
    from jobengine.ports.blobs import BlobStore
    from jobengine.ports.store import Store
    from jobengine.ports.webhooks import WebhookStore
    from jobengine.settings import Settings

    def _conforms(store: SqliteStore) -> Store:  # mypy checks SqliteStore against the port here
        return store
