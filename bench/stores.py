"""A fresh, empty store for every phase, per backend.

SQLite: a new temp file. Memory: ``database: memory``, a temp SQLite file only this process knows (its
workers then run in the benchmark process).
PostgreSQL: a new database, see :mod:`bench.postgres`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from bench import postgres


@dataclass(frozen=True, slots=True)
class FreshStore:
    #: The ``database`` setting that the producer and the worker processes open.
    database: str
    #: Drops the store (file, schema) after the phase.
    cleanup: Callable[[], None]
    #: False when only this process can reach it (memory): workers run in-process then.
    shared: bool = True


def fresh_store(backend: str, dsn: str | None, directory: str | None) -> FreshStore:
    if backend == "sqlite":
        return _fresh_sqlite(directory)
    if backend == "memory":
        return FreshStore("memory", lambda: None, shared=False)
    if backend == "postgres":
        if not dsn:
            raise SystemExit("--backend postgres needs --dsn postgresql://user@host/db")
        database, drop = postgres.fresh_database(dsn)
        return FreshStore(database, drop)
    raise SystemExit(f"unknown backend {backend!r}")


def _fresh_sqlite(directory: str | None) -> FreshStore:
    folder = tempfile.mkdtemp(prefix="jobengine-bench-", dir=directory)
    path = os.path.join(folder, "jobs.db")

    def cleanup() -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + suffix)
        with contextlib.suppress(OSError):
            os.rmdir(folder)

    return FreshStore(path, cleanup)
