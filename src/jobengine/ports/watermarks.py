"""Watermarks: per (source, key) high-water marks for ordered incremental processing (an optional port:
``capabilities.watermarks``).

A job may carry watermarks. The store raises ``watermark(source, key)`` to the job's value in the same
transaction that marks the job succeeded, and never before; a job that fails, dies or is cancelled leaves
the mark where it was. A mark only moves up (the maximum of the values of the succeeded jobs), so jobs that
succeed out of order cannot move it back. Usage::

    mark = await store.get_watermark("orders", "eu")          # None before anything succeeded
    rows = fetch_orders(after=mark)
    await engine.enqueue("import_orders", {"rows": rows},
                         watermark=Watermark("orders", "eu", rows[-1]["updated"]))

Values are numbers or strings; use one kind per (source, key) (they compare as numbers, or as strings).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from jobengine.core.ids import JobId
from jobengine.core.models import Inserted, NewJob
from jobengine.errors import InvalidJob

WatermarkValue: TypeAlias = int | float | str


@dataclass(frozen=True, slots=True)
class Watermark:
    """A mark a job carries. Raises :class:`InvalidJob` naming the field."""

    source: str
    key: str
    value: WatermarkValue

    def __post_init__(self) -> None:
        for name in ("source", "key"):
            v = getattr(self, name)
            if not isinstance(v, str) or not 1 <= len(v) <= 200:
                raise InvalidJob(f"watermark.{name}", "must be a string of 1-200 characters")
        v = self.value
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise InvalidJob("watermark.value", "must be a number or a string")
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidJob("watermark.value", "must be a finite number")
        if isinstance(v, str) and len(v) > 1000:
            raise InvalidJob("watermark.value", "must be at most 1000 characters")


@runtime_checkable
class WatermarkStore(Protocol):
    async def insert_jobs(
        self,
        jobs: Sequence[NewJob],
        now: float,
        phases: Sequence[tuple[str, ...]],
        *,
        watermarks: Mapping[JobId, Sequence[Watermark]] | None = None,
    ) -> Inserted:
        """:meth:`Store.insert_jobs`, also recording the watermarks each new job carries (a job that already
        existed, by idempotency key, keeps what it had)."""
        ...

    async def get_watermark(self, source: str, key: str) -> WatermarkValue | None: ...
