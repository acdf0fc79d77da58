"""An app whose task always fails, for the tests of what a worker logs: ``lookup`` raises KeyError on every
attempt (three, a few milliseconds apart) until its job is dead; ``greet`` succeeds. Settings come from
``JOBENGINE_*`` (the database)."""

from __future__ import annotations

from jobengine.core.retry import RetryPolicy
from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.worker import JobContext

app = Engine.from_settings(Settings.load())


@app.task(max_attempts=3, retry=RetryPolicy(base=0.01, cap=0.02))
def lookup(ctx: JobContext) -> str:
    table: dict[str, str] = {}
    return table[ctx.payload["key"]]


@app.task()
async def greet(ctx: JobContext) -> str:
    return f"hello {ctx.payload['name']}"
