"""Opening SQLite connections the way every part of this backend needs them, and translating errors.

Transactions are managed by hand (``isolation_level=None``): the sqlite3 module's implicit transactions
would open with a plain ``BEGIN``, which takes the write lock only at the first write and can then fail
with SQLITE_BUSY mid-transaction, without the busy handler being able to help.

Waiting for the write lock is done here, in Python, not by SQLite's busy handler: that one sleeps 1, 2, 5,
10, 15, 20, 25... ms between attempts, far longer than a write transaction here holds the lock, so a waiter
oversleeps the release, and the longer it has waited the more (the long latency tail;
docs/decisions/0007-sqlite-begin-immediate-retry.md). :func:`in_transaction` tries ``BEGIN IMMEDIATE`` with
no busy timeout and sleeps ~0.1-1 ms (jittered) between attempts, within the same total budget (the busy
timeout), then gives up with SQLITE_BUSY.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
from collections.abc import Callable
from typing import Final, TypeVar

from jobengine.aio import forks
from jobengine.errors import StoreError, StoreUnavailable

T = TypeVar("T")

SYNCHRONOUS_MODES: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
#: The synchronous modes from least to most durable.
_DURABILITY: Final = ("OFF", "NORMAL", "FULL", "EXTRA")

# Sleeps between attempts to take the write lock (seconds): the first, how fast they grow, and the longest
# one (10x that once the lock has been busy for _PATIENCE: a lock held that long is not a normal
# transaction, and polling it faster buys nothing). Each is jittered by 0.5-1.5x so that waiters in
# several processes do not retry in step.
_FIRST_SLEEP: Final = 0.0002
_GROWTH: Final = 1.25
_MAX_SLEEP: Final = 0.001
_PATIENCE: Final = 0.1

# Result codes that mean "the database cannot be reached right now", not "the request was wrong".
# Extended codes (SQLITE_IOERR_SHORT_READ, SQLITE_BUSY_SNAPSHOT...) are matched by their primary prefix.
_UNAVAILABLE: Final = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_CANTOPEN",
    "SQLITE_IOERR",
    "SQLITE_NOTADB",
    "SQLITE_READONLY",
    "SQLITE_FULL",
    "SQLITE_PERM",
    "SQLITE_AUTH",
    "SQLITE_PROTOCOL",
)


def translate(exc: sqlite3.Error) -> StoreError:
    """The jobengine error for a driver error (the caller chains the original with ``from``)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name.startswith(_UNAVAILABLE):
        return StoreUnavailable(f"sqlite: {exc} ({name})")
    hint = " (is the schema migrated? run `jobengine migrate`)" if "no such table" in str(exc) else ""
    return StoreError(f"sqlite: {exc}" + (f" ({name})" if name else "") + hint)


def connect(path: str, *, busy_timeout_ms: int, synchronous: str | None = None) -> sqlite3.Connection:
    """Open ``path`` in WAL mode. ``synchronous`` None leaves the connection's default (readers).

    Raises StoreUnavailable when the file cannot be opened.
    """
    try:
        # check_same_thread=False: the owner guarantees single-threaded use (one store thread for the
        # store, the event loop thread for the notifier); the check would only get in the way of close().
        conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"sqlite: cannot open {path!r}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreUnavailable(f"sqlite: {path!r} cannot use WAL mode (journal_mode is {mode!r})")
        if synchronous is not None:
            conn.execute(f"PRAGMA synchronous = {synchronous}")
        # Sorters (top-N claim over several queues, list paging) stay in memory; a bigger page cache
        # keeps the hot right edge of the indexes resident.
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -32768")
    except BaseException as exc:
        conn.close()
        if isinstance(exc, sqlite3.Error):
            raise translate(exc) from exc
        raise
    return conn


#: Connections a forked child found open: never used nor closed there (either would touch the parent's locks
#: and WAL index), and kept referenced for the process's life, since collecting a connection closes it.
_LEFT_TO_PARENT: list[sqlite3.Connection] = []


class OwnConnection:
    """A connection that belongs to the process that opened it, with ``open`` when first asked for. In a child
    forked after that, it is the parent's: an SQLite connection must not cross a fork, so the child leaves it
    alone and opens its own."""

    __slots__ = ("_conn", "_fork", "_open")

    def __init__(self, open_: Callable[[], sqlite3.Connection]) -> None:
        self._open = open_
        self._conn: sqlite3.Connection | None = None
        self._fork = forks()

    def get(self) -> sqlite3.Connection:
        if self._conn is not None and self._fork != forks():
            _LEFT_TO_PARENT.append(self._conn)
            self._conn = None
        if self._conn is None:
            self._conn, self._fork = self._open(), forks()
        return self._conn

    def close(self) -> None:
        """Close it if this process opened it (else leave it to the parent); a later :meth:`get` opens again."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._fork == forks():
            conn.close()
        else:
            _LEFT_TO_PARENT.append(conn)


def weaker(a: str, b: str) -> str:
    """The less durable of two ``synchronous`` modes (both upper case, in :data:`SYNCHRONOUS_MODES`)."""
    return a if _DURABILITY.index(a) <= _DURABILITY.index(b) else b


def is_busy(exc: BaseException) -> bool:
    """True for SQLITE_BUSY and its extended codes (another connection holds the lock asked for)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


def retry_busy(attempt: Callable[[], T], timeout: float) -> T:
    """``attempt()`` again after a short jittered sleep for as long as it fails with SQLITE_BUSY, at most
    ``timeout`` seconds from the first failure; then the last SQLITE_BUSY is raised."""
    try:
        return attempt()
    except sqlite3.OperationalError as exc:
        if not is_busy(exc):
            raise
    started = time.monotonic()
    deadline = started + timeout
    sleep = _FIRST_SLEEP
    while True:
        now = time.monotonic()
        if now >= deadline:
            return attempt()  # one last try: its SQLITE_BUSY is the error to raise
        time.sleep(min(deadline - now, sleep * (0.5 + random.random())))
        cap = _MAX_SLEEP if now - started < _PATIENCE else 10 * _MAX_SLEEP
        sleep = min(sleep * _GROWTH, cap)
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise


def begin_immediate(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """``BEGIN IMMEDIATE``, waiting for the write lock up to ``busy_timeout_ms`` (see the module's docstring).

    SQLite's busy handler is off only for these attempts (``PRAGMA busy_timeout = 0``) and back to
    ``busy_timeout_ms`` once the transaction has begun, so the rare statement that could still meet a lock
    later (a reader during another process's WAL recovery) keeps SQLite's own waiting. In WAL mode nothing
    in a transaction that holds the write lock waits for another writer, and the checkpoint run after a
    commit never waits (it is PASSIVE: it copies what it can and returns).
    """
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), busy_timeout_ms / 1000)
    finally:
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise


def in_transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], busy_timeout_ms: int) -> T:
    """Run ``fn`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``; roll back on any exception.

    IMMEDIATE takes the write lock up front (waiting up to ``busy_timeout_ms``, see :func:`begin_immediate`),
    so a transaction that reads then writes can never be refused half way, and readers in other processes
    are never blocked (WAL).
    """
    begin_immediate(conn, busy_timeout_ms)
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            # SQLite may have rolled back already (e.g. after SQLITE_FULL); the first error is the one to raise.
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return result
