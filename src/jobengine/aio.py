"""Small asyncio helpers shared by every layer (this module imports nothing of jobengine's)."""

from __future__ import annotations

import asyncio


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None (a plain thread, a sync caller): for code that is called
    both on a loop and off it and must tell which."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
