"""Event log bounds and pruning (optional ports beside the Store).

The event log is what SSE clients resume from; a client whose ``Last-Event-ID`` is older than the oldest
retained event missed events that no longer exist, and must be told (a ``reset`` event) rather than be
silently resumed past a gap. Event ids are global (every tenant shares one sequence), so the bounds are
global too; they reveal nothing but numbers.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class EventLogStore(Protocol):
    async def event_bounds(self) -> tuple[int, int]:
        """(oldest retained event id, newest event id); (0, 0) for an empty log. The newest id is the
        highest ever assigned (ids are never reused), even if that event was pruned since."""
        ...


@runtime_checkable
class EventPruneStore(Protocol):
    async def prune_events(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` of the oldest events recorded before ``before``; return how many."""
        ...


@runtime_checkable
class SettlingEventLog(Protocol):
    """A log whose ids can commit out of order (PostgreSQL: an identity value is taken at insert, and two
    transactions may commit in the other order). A follower must not move its cursor past an id that is
    taken but not yet committed, or it would never see that event. Stores that number events in commit
    order (SQLite, under its one writer) do not implement this."""

    async def settled_event_id(self, after_id: int, now: float, grace: float) -> tuple[int, int]:
        """``(settled, newest_seen)``: every event with an id in ``(after_id, settled]`` that will ever
        exist is committed and visible now; ``newest_seen`` is the newest id in the log. An id missing
        from the sequence is a transaction still open (or rolled back): the ids after it are unsettled
        until it fills, or until the event after it is ``grace`` seconds old (``now`` on the engine's
        clock), when the hole is taken for a rollback."""
        ...
