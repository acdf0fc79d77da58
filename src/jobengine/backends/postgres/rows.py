"""Rows to domain values: the job column list every statement returns, and how a row becomes a Job / Event.

jsonb columns are selected as text and parsed with :mod:`jobengine.core.codec`, so results do not depend
on the json adapters of a connection (which matters for a caller's own connection in a transactional
enqueue).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobengine.core import codec
from jobengine.core.ids import JobId
from jobengine.core.models import AttemptError, Event, Job, Phase
from jobengine.core.states import JobState

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - the postgres extra installs it
    _orjson = None  # type: ignore[assignment]

#: (expression, name) of the job columns, in the order :func:`job_from_row` reads them.
JOB_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "id"),
    ("tenant", "tenant"),
    ("queue", "queue"),
    ("task", "task"),
    ("payload::text", "payload"),
    ("priority", "priority"),
    ("run_at", "run_at"),
    ("state", "state"),
    ("attempt", "attempt"),
    ("max_attempts", "max_attempts"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("idempotency_key", "idempotency_key"),
    ("depends_on", "depends_on"),
    ("timeout", "timeout"),
    ("lease_worker", "lease_worker"),
    ("lease_token", "lease_token"),
    ("lease_expires_at", "lease_expires_at"),
    ("cancel_requested", "cancel_requested"),
    ("reason", "reason"),
    ("phases::text", "phases"),
    ("progress", "progress"),
    ("result::text", "result"),
    ("errors::text", "errors"),
    ("outcome", "outcome"),
    ("started_at", "started_at"),
    ("finished_at", "finished_at"),
    ("run_id", "run_id"),  # 0002_scheduler: the run (and schedule) a scheduler-made job belongs to
    ("schedule_id", "schedule_id"),
    ("has_dependents", "has_dependents"),
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
    """Parse JSON that the database produced (so it is valid): orjson when installed, else the codec."""
    if text is None:
        return None
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:  # e.g. an integer beyond 64 bits
            pass
    return codec.loads(text)


def _phases(text: str) -> tuple[Phase, ...]:
    return () if text == "[]" else tuple(Phase.from_json(p) for p in loads(text))


def _errors(text: str) -> tuple[AttemptError, ...]:
    return () if text == "[]" else tuple(AttemptError.from_json(e) for e in loads(text))


def job_from_row(r: Sequence[Any], o: int = 0) -> Job:
    """The job whose columns (:func:`job_columns`) start at ``r[o]``."""
    return Job(
        r[o],  # id
        r[o + 1],  # tenant
        r[o + 2],  # queue
        r[o + 3],  # task
        loads(r[o + 4]),  # payload
        r[o + 5],  # priority
        r[o + 6],  # run_at
        _STATES[r[o + 7]],  # state
        r[o + 8],  # attempt
        r[o + 9],  # max_attempts
        r[o + 10],  # created_at
        r[o + 11],  # updated_at
        r[o + 12],  # idempotency_key
        tuple(r[o + 13]) if r[o + 13] else (),  # depends_on
        r[o + 14],  # timeout
        r[o + 15],  # lease_worker
        r[o + 16],  # lease_token
        r[o + 17],  # lease_expires_at
        r[o + 18],  # cancel_requested
        r[o + 19],  # reason
        _phases(r[o + 20]),  # phases
        r[o + 21],  # progress
        loads(r[o + 22]),  # result
        _errors(r[o + 23]),  # errors
        _STATES[r[o + 24]] if r[o + 24] is not None else None,  # outcome
        r[o + 25],  # started_at
        r[o + 26],  # finished_at
        r[o + 27],  # run_id
        r[o + 28],  # schedule_id
        r[o + 29],  # has_dependents
    )


def event_from_row(r: Sequence[Any]) -> Event:
    """A row of ``id, at, type, tenant, job_id, queue, task, data::text``."""
    return Event(r[0], r[1], r[2], r[3], JobId(r[4]) if r[4] is not None else None, r[5], r[6], loads(r[7]))


def encode_rows(rows: Any) -> str:
    """JSON for a batch parameter whose values are already JSON-safe (ids, numbers, decoded payloads).

    orjson, when installed (the ``postgres`` extra brings it), encodes a batch faster than the standard
    library (docs/decisions/0018-postgres-batch-statements.md); anything it refuses (an integer beyond 64
    bits) goes through the codec.
    Values that come from users unchecked (results, checkpoints) go through ``codec.dumps`` instead, which
    also validates them.
    """
    if _orjson is not None:
        try:
            return _orjson.dumps(rows).decode()
        except TypeError:
            pass
    return codec.dumps(rows, "batch")
