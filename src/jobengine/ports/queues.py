"""Queue control (an optional port beside the Store).

- :class:`QueueSettingsStore`: a queue's paused flag and concurrency limit. Queues are lanes shared by
  every tenant (a worker serves a queue, whatever tenant its jobs belong to), so their settings are too.
  The engine reads them (cached briefly) before every claim and leaves paused queues out of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """``concurrency``: at most this many running jobs of the queue at once (None: no limit)."""

    queue: str
    paused: bool = False
    concurrency: int | None = None
    updated_at: float = 0.0


@runtime_checkable
class QueueSettingsStore(Protocol):
    async def list_queue_settings(self) -> list[QueueSettings]:
        """Every queue that has settings (queues without a row are unpaused and unlimited), by name."""
        ...

    async def set_queue_settings(self, settings: QueueSettings) -> QueueSettings:
        """Insert or replace the settings of ``settings.queue``."""
        ...
