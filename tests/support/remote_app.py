"""Task handlers for a remote SDK worker process (``jobengine worker --remote URL --app
tests.support.remote_app:app``). Every start writes ``start <job> <attempt> <token> <pid>`` to the ledger
(``LEDGER``), and every finish ``done <job> <attempt> <pid>``: one ``os.write`` each on an O_APPEND file."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from jobengine.sdk import TaskApp

app = TaskApp()


def record(*parts: object) -> None:
    fd = os.open(os.environ["LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(str(p) for p in parts) + "\n").encode())
    finally:
        os.close(fd)


@app.task(max_attempts=5)
async def slow(ctx: Any) -> dict[str, Any]:
    """The first attempt takes ``first_sleep`` seconds (long enough to be killed in); later ones are quick."""
    record("start", ctx.job_id, ctx.attempt, ctx.job.lease_token, os.getpid())
    await asyncio.sleep(float(ctx.payload.get("first_sleep", 60)) if ctx.attempt == 1 else 0.05)
    record("done", ctx.job_id, ctx.attempt, os.getpid())
    return {"attempt": ctx.attempt, "pid": os.getpid()}
