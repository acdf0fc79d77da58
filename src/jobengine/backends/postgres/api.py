"""The event log's bounds and settled reads on PostgreSQL (their SQL is this backend's own: one statement
each). Mixed into :class:`PostgresStore`; the rest of the HTTP layer's ports are :mod:`jobengine.backends.sql`."""

from __future__ import annotations

from jobengine.backends.postgres.mixin import StoreCalls, qualify

# How far past a follower's cursor the gap check looks (ids, through the primary key): more than one read
# of the feed takes, so the read never passes the checked range.
_SETTLE_SCAN = 5000
# The last id before the first hole in the sequence that a young row follows: the hole may be an open
# transaction's id (or several).
_SETTLED = """WITH tail AS (
    SELECT id, at FROM {s}events WHERE id > %(after)s::int8 ORDER BY id LIMIT %(scan)s::int4
), steps AS (
    SELECT id, at, lag(id) OVER (ORDER BY id) AS prev FROM tail
)
SELECT (SELECT coalesce(prev, %(after)s::int8) FROM steps
        WHERE id <> coalesce(prev, %(after)s::int8) + 1 AND at > %(young)s::float8 ORDER BY id LIMIT 1),
       (SELECT max(id) FROM {s}events)"""


class PostgresApiMixin:
    # -- EventLogStore ------------------------------------------------------------------------------
    async def event_bounds(self: StoreCalls) -> tuple[int, int]:
        rows = await self._rows(qualify(self, "SELECT min(id), max(id) FROM {s}events"), {})
        return int(rows[0][0] or 0), int(rows[0][1] or 0)

    async def settled_event_id(self: StoreCalls, after_id: int, now: float, grace: float) -> tuple[int, int]:
        rows = await self._rows(
            qualify(self, _SETTLED),
            {"after": after_id, "young": now - grace, "scan": _SETTLE_SCAN},
        )
        before_hole, newest = rows[0]
        newest = max(after_id, int(newest or 0))
        if before_hole is not None:
            return int(before_hole), newest
        return min(newest, after_id + _SETTLE_SCAN), newest  # past the scan: not checked yet
