"""A process that runs only a webhook dispatcher on a database (``python -m tests.support.webhook_dispatcher_proc
DB SECONDS``), with its settings from ``JOBENGINE_*``: the multi-process rate limiter test starts three."""

from __future__ import annotations

import asyncio
import sys

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.webhooks.dispatcher import WebhookDispatcher


async def main(database: str, seconds: float) -> None:
    settings = Settings.load(env={**__import__("os").environ, "JOBENGINE_DATABASE": database})
    async with Engine.from_settings(settings) as engine:
        dispatcher = WebhookDispatcher(engine)
        await dispatcher.start()
        print("started", flush=True)
        try:
            await asyncio.sleep(seconds)
        finally:
            await dispatcher.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
