"""A large plain batch written by ``COPY``: the jobs, then their ``job.enqueued`` events, in one transaction.

A plain batch has no idempotency keys, dependencies or watermarks (:func:`copies`), so nothing in it needs a
statement's guard: every job is new and queued or scheduled. ``COPY`` writes the heap rows of a table in
multi-row inserts and reads text columns without the JSON array that the INSERT statements parse, which
makes it the cheapest way into the tables for the server (docs/decisions/0039-postgres-copy-batch-insert.md).

The event ids are taken before the events are copied (one statement that also sends the batch's NOTIFY), so
the events are returned with their ids, ascending in the batch's order, as INSERT_FAST returns them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import tuple_row

from jobengine.backends.postgres.insert import InsertPlan, raise_if_id_taken
from jobengine.backends.postgres.sql import Queries
from jobengine.core import codec
from jobengine.core import events as ev
from jobengine.core import transitions as tr
from jobengine.core.ids import JobId
from jobengine.core.models import Event, Inserted, Job, NewJob
from jobengine.core.states import JobState
from jobengine.ports.watermarks import Watermark

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - the postgres extra installs it
    _orjson = None  # type: ignore[assignment]

Conn = psycopg.AsyncConnection[Any]
#: Jobs validated, encoded and sent per write: the server writes one part while the client encodes the next.
COPY_CHUNK = 250
#: The event data of a queued job of priority 0, as jsonb prints it.
_USUAL_DATA = '{"state": "queued", "attempt": 0, "priority": 0}'
# The characters COPY's text format gives a meaning to; a value holding one is escaped.
_SPECIAL = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copies(jobs: Sequence[NewJob], watermarks: Mapping[JobId, Sequence[Watermark]] | None) -> bool:
    """Whether :func:`insert_copied` writes this batch: two chunks or more, no keys, dependencies or watermarks."""
    if len(jobs) < 2 * COPY_CHUNK or watermarks:
        return False
    return not any(new.idempotency_key is not None or new.depends_on for new in jobs)


def _json(value: Any) -> str:
    """JSON text as a COPY text value: orjson escapes every control character, so only backslashes remain."""
    try:
        if _orjson is None:
            raise TypeError
        text = _orjson.dumps(value).decode()
    except TypeError:  # a value orjson refuses (an integer beyond 64 bits)
        text = codec.dumps(value, "payload")
    return text.replace("\\", "\\\\") if "\\" in text else text


#: Between two payloads in :func:`_payloads`' one array: the JSON of a string holding NUL, which no payload
#: holds (core.bounds refuses NUL), escaped as in a COPY value.
_BETWEEN = ',"\\\\u0000",'


def _payloads(payloads: list[Any]) -> list[str]:
    """The payloads as COPY text values, encoded in one orjson call: one array with a NUL string between
    each two, split at those, which costs a fraction of a call per payload."""
    if _orjson is not None and payloads:
        between = ["\x00"] * (2 * len(payloads) - 1)
        between[::2] = payloads
        try:
            text = _orjson.dumps(between).decode()
        except TypeError:  # a value orjson refuses (an integer beyond 64 bits): one by one
            pass
        else:
            out = text[1:-1].replace("\\", "\\\\").split(_BETWEEN)
            if len(out) == len(payloads):
                return out
    return [_json(p) for p in payloads]


def _text(value: str | None) -> str:
    """A text value the user gave unchecked (an id, a run id): escaped, or ``\\N`` for None."""
    return "\\N" if value is None else value.translate(_SPECIAL)


def _lines(plan: InsertPlan) -> tuple[list[Job], list[str], list[str]]:
    """The jobs of a plain batch, their lines for ``COPY jobs`` (``sql.COPY_JOBS``'s columns) and the ends
    of their events' lines for ``COPY events`` (``sql.COPY_EVENTS``'s columns from ``job_id`` on). Tenant,
    queue and task names are checked by NewJob and hold no special character; ids come from the caller, so a
    part whose ids hold one has them escaped. The parts every line of a batch shares (the names, the columns
    after the payload) are formatted once per distinct value, not per job
    (docs/decisions/0021-enqueue-client-instructions.md)."""
    now = plan.now
    at = repr(now)
    queued = JobState.QUEUED
    jobs: list[Job] = []
    lines: list[str] = []
    data: list[str] = []
    news = plan.jobs
    ids = "".join([n.id for n in news])
    safe = not ("\\" in ids or "\t" in ids or "\n" in ids or "\r" in ids)
    names_of: dict[tuple[str, str, str], str] = {}
    usual_tail: dict[tuple[int, int], str] = {}
    for new, payload, phases, text in zip(news, plan.payloads, plan.phases, _payloads(plan.payloads), strict=True):
        id_ = new.id if safe else _text(new.id)
        run_at = new.run_at
        state = queued if run_at is None else tr.initial_state(new, now, True)
        tenant, queue, task, priority, attempts = new.tenant, new.queue, new.task, new.priority, new.max_attempts
        key = (tenant, queue, task)
        names = names_of.get(key)
        if names is None:
            names = names_of[key] = f"{tenant}\t{queue}\t{task}"
        if (
            run_at is None
            and new.timeout is None
            and not phases
            and new.run_id is None
            and (new.schedule_id is None and new.trace is None)
        ):
            # The usual job, by position (docs/decisions/0020-positional-construction.md).
            jobs.append(Job(new.id, tenant, queue, task, payload, priority, now, state, 0, attempts, now, now))
            tail_key = (priority, attempts)
            tail = usual_tail.get(tail_key)
            if tail is None:
                tail = usual_tail[tail_key] = (
                    f"\t{priority}\t{at}\tqueued\t{attempts}\t{at}\t{at}\t\\N\t[]\t\\N\t\\N\t\\N\n"
                )
            lines.append(f"{id_}\t{names}\t{text}{tail}")
        else:
            jobs.append(Job(
                id=new.id, tenant=tenant, queue=queue, task=task, payload=payload, priority=priority,
                run_at=now if run_at is None else run_at, state=state, attempt=0, max_attempts=attempts,
                created_at=now, updated_at=now, timeout=new.timeout, phases=phases, run_id=new.run_id,
                schedule_id=new.schedule_id, trace=new.trace,
            ))  # fmt: skip
            timeout = "\\N" if new.timeout is None else repr(new.timeout)
            steps = _json([p.to_json() for p in phases]) if phases else "[]"
            when = at if run_at is None else repr(run_at)
            lines.append(
                f"{id_}\t{names}\t{text}\t{priority}\t{when}\t{state._value_}\t{attempts}\t{at}\t{at}\t{timeout}\t"
                f"{steps}\t{_text(new.run_id)}\t{_text(new.schedule_id)}\t{_text(new.trace)}\n"
            )
        if priority == 0 and state is queued:
            data.append(f"\t{id_}\t{names}\t{_USUAL_DATA}\n")
        else:
            data.append(f'\t{id_}\t{names}\t{{"state": "{state._value_}", "attempt": 0, "priority": {priority}}}\n')
    return jobs, lines, data


async def insert_copied(
    conn: Conn, q: Queries, channel: str, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]
) -> Inserted:
    """A plain batch (see :func:`copies`) in one transaction: ``COPY`` of the jobs, sent a part of
    ``COPY_CHUNK`` jobs at a time (the client encodes a part while the server writes the one before); one
    statement that takes the events' ids and NOTIFYs the queues of the queued jobs; ``COPY`` of the events.
    All of it or none: a bad payload in a later part (InvalidJob, raised while encoding) or a taken id rolls
    the transaction back (InvalidJob on ``id``). Never inside a caller's transaction (``insert_jobs_in`` takes
    the statement paths)."""
    out: list[Job] = []
    data: list[str] = []
    cur = conn.cursor(row_factory=tuple_row)
    try:
        async with conn.transaction():
            async with cur.copy(q.copy_jobs) as copy:
                for start in range(0, len(jobs), COPY_CHUNK):
                    end = start + COPY_CHUNK
                    part, lines, part_data = _lines(InsertPlan.of(jobs[start:end], now, phases[start:end], None))
                    await copy.write("".join(lines))
                    out += part
                    data += part_data
            queued = JobState.QUEUED
            queues = sorted({j.queue for j in out if j.state is queued})
            await cur.execute(q.reserve_events, {"n": len(out), "channel": channel, "queues": queues})
            row = await cur.fetchone()
            assert row is not None
            ids: list[int] = row[0]
            head = f"\t{now!r}\t{ev.ENQUEUED}"
            async with cur.copy(q.copy_events) as copy:
                await copy.write("".join([f"{eid}{head}{tail}" for eid, tail in zip(ids, data, strict=True)]))
    except pg_errors.UniqueViolation as exc:
        raise_if_id_taken(exc)
        raise
    return Inserted(jobs=out, created=[True] * len(out), events=_events(ids, out, now))


def _events(ids: Sequence[int], jobs: Sequence[Job], now: float) -> list[Event]:
    """The ``job.enqueued`` events written for ``jobs`` (their data as :func:`_lines` wrote it)."""
    enqueued = ev.ENQUEUED
    return [
        Event(eid, now, enqueued, j.tenant, j.id, j.queue, j.task,
              {"state": j.state._value_, "attempt": 0, "priority": j.priority})
        for eid, j in zip(ids, jobs, strict=True)
    ]  # fmt: skip
