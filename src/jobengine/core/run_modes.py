"""The modes of a run request, and the mode of a job, apart from :mod:`jobengine.core.run_requests` so a
worker reads ``ctx.mode`` without loading the scheduler's modules."""

from __future__ import annotations

from enum import StrEnum

from jobengine.core.models import Job


class RunMode(StrEnum):
    """Which items a run request takes, and whether its success moves the stream's cursor."""

    FULL = "full"  # every item; the cursor moves when every segment succeeded
    INCREMENTAL = "incremental"  # the items after the cursor that no earlier run did
    SIMULATE = "simulate"  # every item, as a dry run: no effects, no webhooks, never moves the cursor


def mode_of(job: Job) -> RunMode:
    """The mode of the run request that made ``job`` (its payload carries it); ``full`` for any other job.

    Usage::

        if mode_of(job) is RunMode.SIMULATE: ...
    """
    payload = job.payload if job.run_id is not None else None
    mode = payload.get("mode") if isinstance(payload, dict) else None
    return RunMode(mode) if isinstance(mode, str) and mode in RunMode.__members__.values() else RunMode.FULL
