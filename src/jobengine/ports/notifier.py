"""Wakes idle workers when work may be available, so they need not poll tightly."""

from __future__ import annotations

from typing import Protocol


class Notifier(Protocol):
    def notify(self) -> None:
        """Say that runnable work may exist (called after an enqueue commits in this process)."""

    async def wait(self, timeout: float) -> bool:
        """Return True as soon as work may be available (from any process the notifier reaches),
        False after ``timeout`` seconds without a sign. Spurious wake-ups are allowed."""
        ...

    async def close(self) -> None: ...
