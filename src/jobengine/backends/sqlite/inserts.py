"""``insert_jobs`` as one SQLite transaction: idempotency, dependencies, rows, edges and events.

The rules are those of ``core/transitions.py`` and the parity oracle (the contract suite holds both to
them); only the mechanics differ: existing keys and dependency states are read with a few statements up
front, the batch is decided in Python, then written with multi-row INSERTs.

The work is split around the write lock, which every process on the file shares: :func:`encode` (the
canonical payload texts, the costliest part) runs before the transaction, :func:`write` inside it (reads,
decisions, INSERTs; event data written from a template, see ``_ENQUEUED_DATA``) and :func:`built` after
COMMIT (the Job and Event values returned). :func:`insert_jobs` is the three in a row, for callers that
insert jobs inside a transaction of their own (the outbox, the scheduler).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from jobengine.core import codec
from jobengine.core import events as ev
from jobengine.core import transitions as tr
from jobengine.core.models import Event, Inserted, Job, Json, NewEvent, NewJob
from jobengine.core.states import BREAKS_DEPENDENTS, JobState
from jobengine.errors import IdempotencyConflict, InvalidJob, UnknownDependency

from .rows import insert_events, insert_rows, json_list, phases_json, select_jobs

_INSERT_JOB: Final = (
    "INSERT INTO jobs (id, tenant, queue, task, payload, priority, run_at, state, max_attempts, created_at, "
    "updated_at, idempotency_key, timeout, phases, reason, finished_at, run_id, schedule_id, trace) VALUES "
)
_INSERT_DEP: Final = "INSERT INTO job_deps (job_id, position, depends_on) VALUES "
# Most jobs have no idempotency key, timeout, run or schedule and are not born cancelled: their rows leave
# those columns to their NULL default and bind ``now`` once per statement (see rows.insert_rows).
_INSERT_PLAIN_JOB: Final = (
    "INSERT INTO jobs (created_at, updated_at, id, tenant, queue, task, payload, priority, run_at, state, "
    "max_attempts, phases) VALUES "
)
_PLAIN_JOB_ROW: Final = "(?1, ?1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

# codec.dumps of the body core.events.job_event(ENQUEUED, job, {"priority": job.priority}) makes: keys
# sorted, no spaces; priority is an int (NewJob refuses anything else, bool included), written as the codec
# writes ints (int.__repr__, which is what %d gives an int), and the state value is a plain word.
_ENQUEUED_DATA: Final = '{"attempt":0,"priority":%d,"state":"%s"}'

#: Payload values that decode from their JSON text as themselves (see :func:`_decoded`). Not float: 1.0
#: reads back as 1.
_SELF_DECODING: Final = frozenset({str, int, bool, type(None)})


def _final_state(state: str, outcome: str | None) -> JobState:
    """What a dependency ended as: a stale job counts as the outcome it had."""
    return JobState(outcome) if state == JobState.STALE and outcome is not None else JobState(state)


def _decoded(payload: Json, text: str) -> Json:
    """``codec.loads(text)`` where ``text`` is ``codec.dumps(payload)``: the payload as the store gives it
    back, a copy that shares nothing with the caller's value. Flat objects with ASCII keys and values that
    are strings, integers, booleans, nulls or non-integral floats (the usual payload) are copied without
    parsing the text, since each of those values decodes as itself; anything else is parsed."""
    kind = type(payload)
    if kind in _SELF_DECODING:
        return payload
    if kind is dict:
        for key, value in payload.items():
            vkind = type(value)
            if type(key) is not str or not key.isascii():
                return codec.loads(text)
            if vkind not in _SELF_DECODING and (vkind is not float or value.is_integer()):
                return codec.loads(text)
        # In the text's key order (sorted: ASCII keys sort the same by code point and by UTF-16 unit).
        return dict(sorted(payload.items()))
    return codec.loads(text)


def encode(jobs: Sequence[NewJob]) -> list[str]:
    """The canonical payload texts of ``jobs``: no database needed, so computed before the transaction."""
    dumps = codec.dumps
    return [dumps(new.payload) for new in jobs]


def _existing_by_key(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> dict[tuple[str, str], Job]:
    keys = {(j.tenant, j.idempotency_key) for j in jobs if j.idempotency_key is not None}
    found: dict[tuple[str, str], Job] = {}
    for tenant, key in keys:
        # One indexed probe per distinct key (jobs_idempotency); batches without keys pay nothing.
        for job in select_jobs(conn, "jobs.tenant = ? AND jobs.idempotency_key = ?", (tenant, key)):
            found[(tenant, key)] = job
    return found


def _dependency_states(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> dict[tuple[str, str], JobState]:
    """The final states of the jobs the batch depends on, by (tenant, id): a job of another tenant is not
    one a dependent can name."""
    wanted = {d for j in jobs for d in j.depends_on}
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT tenant, id, state, outcome FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
        (json_list(wanted),),
    )
    return {(r[0], r[1]): _final_state(r[2], r[3]) for r in rows}


@dataclass(slots=True)
class Written:
    """What :func:`write` decided and wrote, for :func:`built`. ``out`` holds, per job asked for, either the
    index of the job of this batch that created it or the existing Job an idempotency key named."""

    jobs: Sequence[NewJob]
    texts: Sequence[str]
    phases: Sequence[tuple[str, ...]]
    now: float
    out: list[int | Job] = field(default_factory=list)
    created: list[bool] = field(default_factory=list)
    states: dict[int, JobState] = field(default_factory=dict)  # the initial state of each created job
    #: Jobs born cancelled (a dependency had already failed): built in the transaction (rare), with the
    #: cancel event that follows their enqueue event.
    born_cancelled: dict[int, tuple[Job, NewEvent]] = field(default_factory=dict)
    first_event: int = 0


def write(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    texts: Sequence[str],
    now: float,
    phases: Sequence[tuple[str, ...]],
) -> Written:
    """In the transaction: check keys and dependencies, insert the rows, edges and events."""
    existing = _existing_by_key(conn, jobs)
    dep_states = _dependency_states(conn, jobs)
    w = Written(jobs, texts, phases, now)

    # Final states of jobs created in this batch, by (tenant, id): later ones may depend on them.
    staged: dict[tuple[str, str], JobState] = {}
    staged_keys: dict[tuple[str, str], int] = {}
    job_rows: list[tuple[Any, ...]] = []
    plain_rows: list[tuple[Any, ...]] = []
    dep_rows: list[tuple[str, int, str]] = []
    event_rows: list[tuple[Any, ...]] = []
    phase_texts: dict[tuple[str, ...], str] = {}

    n_phases = len(phases)
    for i, new in enumerate(jobs):
        payload_text = texts[i]
        if new.idempotency_key is not None:
            key = (new.tenant, new.idempotency_key)
            index = staged_keys.get(key)
            found = existing.get(key)
            if index is not None or found is not None:
                hit: int | Job
                if index is not None:  # created earlier in this batch
                    hit, same_id, same = index, jobs[index].id, (jobs[index].task, jobs[index].queue, texts[index])
                else:
                    assert found is not None
                    hit, same_id, same = found, found.id, (found.task, found.queue, codec.dumps(found.payload))
                if same != (new.task, new.queue, payload_text):
                    raise IdempotencyConflict(new.idempotency_key, same_id)
                w.out.append(hit)
                w.created.append(False)
                continue

        all_succeeded = True
        broken: tuple[str, JobState] | None = None
        for dep_id in new.depends_on:
            dep_state = staged.get((new.tenant, dep_id))
            if dep_state is None:
                dep_state = dep_states.get((new.tenant, dep_id))
                if dep_state is None:
                    raise UnknownDependency(dep_id)
            if dep_state is not JobState.SUCCEEDED:
                all_succeeded = False
            if broken is None and dep_state in BREAKS_DEPENDENTS:
                broken = (dep_id, dep_state)

        names = phases[i] if i < n_phases else ()
        state = tr.initial_state(new, now, all_succeeded)
        w.states[i] = state
        run_at = new.run_at if new.run_at is not None else now
        final, reason, finished_at = state, None, None
        event_rows.append(
            (ev.ENQUEUED, new.tenant, new.id, new.queue, new.task, _ENQUEUED_DATA % (new.priority, state.value))
        )
        if broken is not None:
            # Born cancelled: it could never run. Still enqueued first, so its history reads naturally.
            job, cancelled = tr.cancel(_job(new, payload_text, state, names, now), _broken_reason(broken), now)
            w.born_cancelled[i] = (job, cancelled)
            final, reason, finished_at = job.state, job.reason, job.finished_at
            event_rows.append(
                (cancelled.type, cancelled.tenant, cancelled.job_id, cancelled.queue, cancelled.task,
                 codec.dumps(dict(cancelled.data), "event"))
            )  # fmt: skip

        staged[(new.tenant, new.id)] = final
        if new.idempotency_key is not None:
            staged_keys[(new.tenant, new.idempotency_key)] = i
        w.out.append(i)
        w.created.append(True)
        if names:
            phases_text = phase_texts.get(names)
            if phases_text is None:
                phases_text = phase_texts[names] = phases_json(tr.phases_template(names))
        else:
            phases_text = "[]"
        if (
            final is state
            and new.idempotency_key is None
            and new.timeout is None
            and new.run_id is None
            and (new.schedule_id is None)
            and new.trace is None
        ):
            plain_rows.append(
                (new.id, new.tenant, new.queue, new.task, payload_text, new.priority, run_at, state.value,
                 new.max_attempts, phases_text)
            )  # fmt: skip
        else:
            job_rows.append(
                (new.id, new.tenant, new.queue, new.task, payload_text, new.priority, run_at,
                 final.value,  # not ``state``: a job born cancelled has changed since
                 new.max_attempts, now, now, new.idempotency_key, new.timeout, phases_text, reason, finished_at,
                 new.run_id, new.schedule_id, new.trace)
            )  # fmt: skip
        if new.depends_on:
            dep_rows.extend((new.id, pos, dep) for pos, dep in enumerate(new.depends_on))

    try:
        insert_rows(conn, _INSERT_PLAIN_JOB, 10, plain_rows, row=_PLAIN_JOB_ROW, shared=(now,))
        insert_rows(conn, _INSERT_JOB, 19, job_rows)
    except sqlite3.IntegrityError as exc:
        # The idempotency index cannot fire (keys were checked under the write lock), so this is the id.
        raise InvalidJob("id", f"a job with this id already exists ({exc})") from None
    if dep_rows:
        insert_rows(conn, _INSERT_DEP, 3, dep_rows)
    if event_rows:
        w.first_event = insert_events(conn, now, event_rows)
    return w


def _broken_reason(broken: tuple[str, JobState]) -> str:
    return f"dependency {broken[0]} ended {broken[1].value}"


def _job(new: NewJob, text: str, state: JobState, names: tuple[str, ...], now: float) -> Job:
    return Job(
        id=new.id,
        tenant=new.tenant,
        queue=new.queue,
        task=new.task,
        payload=_decoded(new.payload, text),
        priority=new.priority,
        run_at=new.run_at if new.run_at is not None else now,
        state=state,
        attempt=0,
        max_attempts=new.max_attempts,
        created_at=now,
        updated_at=now,
        idempotency_key=new.idempotency_key,
        depends_on=new.depends_on,
        timeout=new.timeout,
        phases=tr.phases_template(names) if names else (),
        run_id=new.run_id,
        schedule_id=new.schedule_id,
        trace=new.trace,
    )


def built(w: Written) -> Inserted:
    """After COMMIT: the jobs (created, or found by their idempotency key) and the events of :func:`write`."""
    now, jobs, phases = w.now, w.jobs, w.phases
    n_phases = len(phases)
    made: dict[int, Job] = {}
    events: list[Event] = []
    next_id = w.first_event
    for i, state in w.states.items():  # in the order they were created, as their events were written
        new = jobs[i]
        events.append(
            # The body of core.events.job_event(ENQUEUED, job, {"priority": job.priority}).
            Event(next_id, now, ev.ENQUEUED, new.tenant, new.id, new.queue, new.task,
                  {"state": state.value, "attempt": 0, "priority": new.priority})
        )  # fmt: skip
        next_id += 1
        cancelled = w.born_cancelled.get(i)
        if cancelled is None:
            made[i] = _job(new, w.texts[i], state, phases[i] if i < n_phases else (), now)
        else:
            made[i], e = cancelled
            events.append(Event(next_id, now, e.type, e.tenant, e.job_id, e.queue, e.task, e.data))
            next_id += 1
    out = [made[x] if isinstance(x, int) else x for x in w.out]
    return Inserted(jobs=tr.with_dependents(out, jobs), created=w.created, events=events)


def insert_jobs(
    conn: sqlite3.Connection, jobs: Sequence[NewJob], now: float, phases: Sequence[tuple[str, ...]]
) -> Inserted:
    """The whole insert for a caller that already holds the write transaction."""
    return built(write(conn, jobs, encode(jobs), now, phases))
