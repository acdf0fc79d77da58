"""The worker registry on SQLite (table ``workers``, migration 0010; :mod:`jobengine.ports.workers`).

A registered local worker's process holds an exclusive ``flock`` on ``<database>.workers/<lock_key>.lock``.
The kernel releases it when the process dies, however it dies, and only then: every process sharing the
database runs on this machine, so a lock that can be taken belongs to a dead worker. ``flock`` locks belong
to an open file, not to a process, so a process that looks at its own workers' files finds them locked too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jobengine.backends.sql import workers as shared
from jobengine.core.ids import WorkerId
from jobengine.errors import StoreUnavailable
from jobengine.ports.workers import WorkerInfo

if TYPE_CHECKING:
    from .store import SqliteStore


class SqliteWorkers(shared.SqlWorkers[tuple[int, Path]]):
    """The :class:`~jobengine.ports.workers.WorkerRegistry` of a :class:`SqliteStore`; a worker's liveness is
    its lock file's descriptor and path."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store.db)
        self._store = store
        self._dir = Path(f"{store.path}.workers")

    def _lock_file(self, key: int) -> Path:
        return self._dir / f"{key}.lock"

    async def _hold(self, key: int) -> tuple[int, Path]:
        path = self._lock_file(key)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"sqlite: cannot make the worker's liveness file {path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreUnavailable(f"sqlite: the worker's liveness file {path} is locked by another process") from exc
        return fd, path

    def _free(self, key: int) -> bool:
        """Whether nobody holds ``key``'s lock (its process is gone). A missing file counts as free: a
        worker makes it before its row."""
        try:
            fd = os.open(self._lock_file(key), os.O_RDWR)
        except FileNotFoundError:
            return True
        except OSError:
            return False  # cannot tell: never declare a worker dead on a doubt
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        finally:
            os.close(fd)

    async def _let_go(self, held: tuple[int, Path], *, leaving: bool) -> None:
        fd, path = held
        if leaving:
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            os.close(fd)  # the lock goes with the descriptor

    def _removed(self, workers: Sequence[WorkerId], keys: Sequence[int | None]) -> None:
        for key in keys:
            if key is not None:
                with contextlib.suppress(OSError):
                    self._lock_file(key).unlink()

    async def dead(self, now: float) -> list[WorkerInfo]:
        sql = f"SELECT {shared.SELECT} FROM {{s}}workers w"
        dead = []
        for info in map(shared.info_of, await self._store.db.read(lambda tx: tx.rows(sql))):
            if info.id in self._held:
                continue
            key = info.lock_key
            if (key is None and info.expires_at <= now) or (key is not None and self._free(key)):
                dead.append(info)
        return dead
