"""The Leader port for a single process: the memory store cannot be shared, so its process always leads."""

from __future__ import annotations


class LocalLeader:
    def __init__(self, name: str) -> None:
        self.name = name
        self.leading = False

    async def try_acquire(self) -> bool:
        self.leading = True
        return True

    async def release(self) -> None:
        self.leading = False
