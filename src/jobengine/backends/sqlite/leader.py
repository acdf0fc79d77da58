"""The Leader port on SQLite: a lease row per name in ``leader_leases``, taken when free or expired and
renewed by its holder on a call once a third of the lease has passed (a call before that answers from
what the holder wrote: nobody else can take the row before it expires). Each renewal is a commit, which
wakes the idle workers of every process sharing the file, so an idle scheduler renews every few seconds
rather than at each pass. Usage::

    leader = store.leader("scheduler")
    if await leader.try_acquire():      # call at least every lease_seconds / 2
        ...                              # leader-only work

A holder that dies (``kill -9``) or stalls past ``lease_seconds`` loses the lease at its expiry, and
another process's next call takes it. Leases are compared on the wall clock of the machine, which every
process sharing the file shares. Failure policy: ``try_acquire`` never raises for a database problem; it
answers False (not leader), logged, and tries again on the next call.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
from typing import TYPE_CHECKING

from jobengine.core.clock import Clock, SystemClock
from jobengine.errors import StoreError

if TYPE_CHECKING:
    from .store import SqliteStore

log = logging.getLogger("jobengine.sqlite")

_TAKE = """
INSERT INTO leader_leases (name, holder, expires_at, acquired_at) VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    expires_at = excluded.expires_at,
    acquired_at = CASE WHEN leader_leases.holder = excluded.holder THEN leader_leases.acquired_at
                       ELSE excluded.acquired_at END
WHERE leader_leases.holder = excluded.holder OR leader_leases.expires_at < ?
RETURNING holder
"""


class SqliteLeader:
    def __init__(
        self, store: SqliteStore, name: str, *, lease_seconds: float = 5.0, clock: Clock | None = None
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds: must be positive")
        self.name = name
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.lease_seconds = lease_seconds
        self._store = store
        self._clock = clock or SystemClock()
        self._leading = False
        self._expires_at = 0.0  # of the lease this holder last wrote

    @property
    def leading(self) -> bool:
        """What the last :meth:`try_acquire` found."""
        return self._leading

    async def try_acquire(self) -> bool:
        now = self._clock.now()
        if self._leading and now < self._expires_at - self.lease_seconds * 2 / 3:
            return True

        def take(conn: sqlite3.Connection) -> bool:
            row = conn.execute(_TAKE, (self.name, self.holder, now + self.lease_seconds, now, now)).fetchone()
            return row is not None

        try:
            leading = await self._store._write(take)
            if leading:
                self._expires_at = now + self.lease_seconds
        except StoreError as exc:
            if self._leading:
                log.warning("leader %s: cannot renew its lease (%s); no longer leading", self.name, exc)
            leading = False
        self._leading = leading
        return leading

    async def release(self) -> None:
        self._leading = False

        def drop(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM leader_leases WHERE name = ? AND holder = ?", (self.name, self.holder))

        try:
            await self._store._write(drop)
        except StoreError as exc:
            log.warning("leader %s: cannot release its lease (%s); it expires by itself", self.name, exc)
