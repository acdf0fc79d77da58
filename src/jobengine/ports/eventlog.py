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
