"""Rows to domain values: the job column list every statement returns, and how a row becomes a Job / Event.

jsonb columns are selected as text and parsed with :mod:`jobengine.core.codec`, so results do not depend
on the json adapters of a connection (which matters for a caller's own connection in a transactional
enqueue).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from jobengine.core import codec
from jobengine.core.ids import JobId
from jobengine.core.models import AttemptError, Event, Job, Phase
from jobengine.core.states import JobState

# The job columns in Job's field order; jsonb ones are read as text. run_id and schedule_id: the run (and
# schedule) a scheduler-made job belongs to; graph_id: the graph a node belongs to; trace: its traceparent.
_NAMES = (
    "id tenant queue task payload priority run_at state attempt max_attempts created_at updated_at idempotency_key "
    "depends_on timeout lease_worker lease_token lease_expires_at cancel_requested reason phases progress result "
    "errors outcome started_at finished_at run_id schedule_id has_dependents graph_id trace"
)
#: (expression, name) of the job columns, in the order :func:`job_from_row` reads them.
JOB_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f"{n}::text" if n in ("payload", "phases", "result", "errors") else n, n) for n in _NAMES.split()
)
N_JOB_COLUMNS = len(JOB_COLUMNS)
#: Where has_dependents is among the job columns (the store reads it to choose a transition's slow path).
HAS_DEPENDENTS = [name for _, name in JOB_COLUMNS].index("has_dependents")


def job_columns(table: str) -> str:
    """The job columns read from ``table`` (an alias), casts named after their column: for SELECT/RETURNING."""
    return ", ".join(f"{table}.{expr} AS {name}" if "::" in expr else f"{table}.{expr}" for expr, name in JOB_COLUMNS)


def job_names(table: str) -> str:
    """The same columns, by name, from a CTE that returned :func:`job_columns`."""
    return ", ".join(f"{table}.{name}" for _, name in JOB_COLUMNS)


_STATES = {s.value: s for s in JobState}


def loads(text: str | None) -> Any:
    """Parse JSON that the database produced (so it is valid): orjson, else (what it refuses) the codec."""
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # e.g. an integer beyond 64 bits
        return codec.loads(text)


def _phases(text: str) -> tuple[Phase, ...]:
    return () if text == "[]" else tuple(Phase.from_json(p) for p in loads(text))


def _errors(text: str) -> tuple[AttemptError, ...]:
    return () if text == "[]" else tuple(AttemptError.from_json(e) for e in loads(text))


def job_from_row(r: Sequence[Any], o: int = 0) -> Job:
    """The job whose columns (:func:`job_columns`) start at ``r[o]``."""
    # Positional, in the order of JOB_COLUMNS (Job's fields): a row is decoded per job a statement returns.
    return Job(
        r[o], r[o + 1], r[o + 2], r[o + 3], loads(r[o + 4]), r[o + 5], r[o + 6], _STATES[r[o + 7]], r[o + 8],
        r[o + 9], r[o + 10], r[o + 11], r[o + 12], tuple(r[o + 13]) if r[o + 13] else (), r[o + 14], r[o + 15],
        r[o + 16], r[o + 17], r[o + 18], r[o + 19], _phases(r[o + 20]), r[o + 21], loads(r[o + 22]),
        _errors(r[o + 23]), _STATES[r[o + 24]] if r[o + 24] is not None else None, r[o + 25], r[o + 26],
        r[o + 27], r[o + 28], r[o + 29], r[o + 30], r[o + 31],
    )  # fmt: skip


def event_from_row(r: Sequence[Any]) -> Event:
    """A row of ``id, at, type, tenant, job_id, queue, task, data::text``."""
    return Event(r[0], r[1], r[2], r[3], JobId(r[4]) if r[4] is not None else None, r[5], r[6], loads(r[7]))


def encode_rows(rows: Any) -> str:
    """JSON for a batch parameter whose values are already JSON-safe (ids, numbers, decoded payloads).

    orjson encodes a batch faster than the standard library
    (docs/decisions/0018-postgres-batch-statements.md); anything it refuses (an integer beyond 64 bits) goes
    through the codec.
    Values that come from users unchecked (results, checkpoints) go through ``codec.dumps`` instead, which
    also validates them.
    """
    try:
        return orjson.dumps(rows).decode()
    except TypeError:
        return codec.dumps(rows, "batch")
