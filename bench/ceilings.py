"""The machine's ceilings, measured in the same run as the benchmark.

For SQLite: the commit rate of SQLite itself with the store's settings (WAL, the same ``synchronous``,
``BEGIN IMMEDIATE``), one tiny INSERT per transaction. Every store transition is at least one such commit,
so ``jobs/s / commits/s`` is how many jobs one commit carries. For PostgreSQL: pgbench (see
:mod:`bench.postgres`).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time


def sqlite_commit_rate(synchronous: str, commits: int, directory: str | None = None) -> float:
    """Commits per second of ``commits`` INSERT + COMMIT transactions on a fresh file in ``directory``."""
    fd, path = tempfile.mkstemp(prefix="jobengine-bench-ceiling-", suffix=".db", dir=directory)
    os.close(fd)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        execute = conn.execute
        started = time.perf_counter()
        for i in range(commits):
            execute("BEGIN IMMEDIATE")
            execute("INSERT INTO t (v) VALUES (?)", (str(i),))
            execute("COMMIT")
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
    return commits / elapsed
