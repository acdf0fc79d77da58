"""Leader election: leader-only services (rescuer, retention, scheduler) run in one process at a time."""

from __future__ import annotations

from typing import Protocol


class Leader(Protocol):
    name: str

    async def try_acquire(self) -> bool:
        """Become (or stay) leader if no one else is; return whether this process leads now.
        Called periodically; must also detect a lost leadership (e.g. a dropped connection)."""
        ...

    async def release(self) -> None:
        """Give leadership up (idempotent)."""
        ...
