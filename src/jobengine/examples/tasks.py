"""The example tasks. Each shows one feature; all are small, quick and safe to run on a laptop.

Sync tasks run in worker threads, which cannot be killed: they check ``ctx.cancelled`` between steps so a
cancel or a shutdown stops them promptly (a thread that ignored it would hold up the process's exit).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from typing import Any

from jobengine.errors import NonRetryable
from jobengine.worker.context import JobContext, SyncJobContext


def _payload(ctx: JobContext) -> dict[str, Any]:
    """The payload as a mapping; a task given something else fails at once (retrying cannot fix it)."""
    payload = ctx.payload
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise NonRetryable(f"payload: expected a JSON object, got {type(payload).__name__}")
    return payload


def _number(payload: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = payload.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise NonRetryable(f"payload.{key}: expected a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


async def hello(ctx: JobContext) -> str:
    """``{"name": "Ada"}`` -> ``"hello Ada"``; a scheduled segment ``{"items": ["Ada", "Grace"]}`` greets each."""
    payload = _payload(ctx)
    names = payload.get("items") or [payload.get("name", "world")]
    await asyncio.sleep(0.05)
    return "hello " + ", ".join(str(n) for n in names)


def resize_image(ctx: SyncJobContext) -> dict[str, Any]:
    """A sync (thread) task reporting progress: "resizes" ``images`` images, ``delay`` seconds each.

    ``{"images": 8, "delay": 0.1, "size": [320, 240]}``. Stops at the next image when cancelled.
    """
    payload = _payload(ctx)
    images = int(_number(payload, "images", 8, 1, 100_000))
    delay = _number(payload, "delay", 0.1, 0, 60)
    size = payload.get("size", [320, 240])
    for i in range(images):
        ctx.raise_if_cancelled()
        time.sleep(delay)  # stands in for the CPU-bound resize
        ctx.progress((i + 1) / images, f"image {i + 1}/{images}")
    return {"resized": images, "size": size}


async def extract(ctx: JobContext) -> dict[str, Any]:
    """Phase 1 of ``etl``: "reads" ``rows`` rows in batches."""
    rows = int(_number(_payload(ctx), "rows", 20, 1, 1_000_000))
    for done in range(0, rows, 5):
        await asyncio.sleep(0.1)
        ctx.progress(min(rows, done + 5) / rows, f"read {min(rows, done + 5)} rows")
    return {"rows": rows}


async def transform(ctx: JobContext) -> dict[str, Any]:
    """Phase 2 of ``etl``: sums the rows in chunks, saving a checkpoint after each chunk, so an attempt
    that died half-way resumes from the last chunk instead of starting over."""
    rows = int(ctx.results["extract"]["rows"])
    saved = ctx.checkpoint if isinstance(ctx.checkpoint, dict) else {}
    position, total = int(saved.get("position", 0)), int(saved.get("total", 0))
    while position < rows:
        end = min(rows, position + 5)
        total += sum(range(position, end))
        position = end
        await asyncio.sleep(0.1)
        await ctx.save_checkpoint({"position": position, "total": total})
        ctx.progress(position / rows, f"transformed {position}/{rows} rows")
    return {"total": total, "resumed_from": int(saved.get("position", 0))}


async def load(ctx: JobContext) -> dict[str, Any]:
    """Phase 3 of ``etl``: "writes" the transformed result."""
    for step in range(1, 4):
        await asyncio.sleep(0.1)
        ctx.progress(step / 3)
    return {"loaded": ctx.results["extract"]["rows"], "total": ctx.results["transform"]["total"]}


async def flaky(ctx: JobContext) -> dict[str, Any]:
    """Fails at random to show retries with backoff.

    ``{"fail_rate": 0.5, "max_failures": 2}``: each attempt fails with probability ``fail_rate``, but never
    more than ``max_failures`` attempts in a row fail (so a demo job always ends ``succeeded``); without
    ``max_failures`` it may go ``dead`` once its attempts run out.
    """
    payload = _payload(ctx)
    rate = _number(payload, "fail_rate", 0.5, 0, 1)
    limit = payload.get("max_failures")
    await asyncio.sleep(0.05)
    may_fail = limit is None or ctx.attempt <= int(limit)
    if may_fail and random.random() < rate:
        raise ConnectionError(f"upstream unavailable (attempt {ctx.attempt})")
    return {"ok": True, "attempts": ctx.attempt}


async def verify(ctx: JobContext) -> dict[str, Any]:
    """Checks an artifact (``{"artifact": "report.pdf"}``); ``publish`` jobs depend on it."""
    artifact = str(_payload(ctx).get("artifact", "artifact.bin"))
    await asyncio.sleep(0.2)
    return {"artifact": artifact, "sha256": hashlib.sha256(artifact.encode()).hexdigest()}


async def publish(ctx: JobContext) -> dict[str, Any]:
    """Publishes an artifact; enqueue it with ``depends_on=[verify_job_id]`` so it runs only after a
    successful verify (and is cancelled if the verify ends dead or cancelled)."""
    artifact = str(_payload(ctx).get("artifact", "artifact.bin"))
    await asyncio.sleep(0.1)
    return {"published": artifact, "url": f"https://downloads.example.com/{artifact}"}
