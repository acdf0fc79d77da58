"""An app whose task returns the module of the event loop it ran on, for the test that ``jobengine worker``
chooses its loop by the ``event_loop`` setting. Settings come from ``JOBENGINE_*`` (the database)."""

from __future__ import annotations

import asyncio

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext

app = Engine.from_settings(Settings.load())


@app.task()
async def loop_kind(ctx: JobContext) -> str:
    return type(asyncio.get_running_loop()).__module__
