"""The results of the store's transitions: rows to jobs and events, and batch helpers.

A transition statement returns job rows (``ev_id`` NULL, the job from ``J`` on, then statement-specific
columns) and event rows (``ev_id, ev_type, ev_data, job_id``): see ``sql._changed``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from jobengine.backends.postgres.rows import HAS_DEPENDENTS, JOB_COLUMNS, job_from_row, loads
from jobengine.core.models import Changed, Event, Job

T = TypeVar("T")
Row = tuple[Any, ...]

J = 3
STATE = J + 7
DEPENDENTS = J + HAS_DEPENDENTS
GRAPH = J + [name for _, name in JOB_COLUMNS].index("graph_id")


def job_rows(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r[0] is None]


def cut_after(items: Sequence[T], cut: Callable[[T], bool]) -> list[list[T]]:
    """``items`` in order, in chunks that end at every item for which ``cut`` is true."""
    chunks: list[list[T]] = [[]]
    for item in items:
        chunks[-1].append(item)
        if cut(item):
            chunks.append([])
    return [c for c in chunks if c]


class Collect:
    """Jobs and events of one store call, gathered over the statements it ran."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.jobs: list[Job] = []
        self.events: list[Event] = []
        self._by_id: dict[str, Job] = {}

    def add(self, rows: Sequence[Row]) -> None:
        events = []
        for r in rows:
            if r[0] is None:
                job = job_from_row(r, J)
                self.jobs.append(job)
                self._by_id[job.id] = job
            else:
                events.append(r)
        for r in events:
            job = self._by_id[r[3]]
            self.events.append(Event(r[0], self.now, r[1], job.tenant, job.id, job.queue, job.task, loads(r[2])))

    def merge(self, changed: Changed) -> None:
        """Jobs and events built already (by a step written once for both SQL backends), later in the
        transaction than those gathered: a job gathered already keeps its place in its new state."""
        merged = Changed(self.jobs, self.events).then(changed)
        self.jobs, self.events = merged.jobs, merged.events
        self._by_id.update((j.id, j) for j in changed.jobs)

    def changed(self) -> Changed:
        self.events.sort(key=lambda e: e.id)
        return Changed(self.jobs, self.events)
