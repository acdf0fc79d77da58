"""The event log's bounds on SQLite (its SQL is this backend's own: the sequence table). Mixed into
:class:`SqliteStore`; the rest of the HTTP layer's ports are :mod:`jobengine.backends.sql`."""

from __future__ import annotations

import sqlite3

from .db import StoreCalls


class SqliteApiMixin:
    # -- EventLogStore ------------------------------------------------------------------------------
    async def event_bounds(self: StoreCalls) -> tuple[int, int]:
        def read(c: sqlite3.Connection) -> tuple[int, int]:
            oldest = c.execute("SELECT min(id) FROM events").fetchone()[0]
            # AUTOINCREMENT keeps the highest id ever assigned in sqlite_sequence, pruned or not.
            newest = c.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
            return int(oldest or 0), int(newest[0]) if newest else 0

        return await self._read(read)
