"""What a worker says about the jobs it runs, on the ``jobengine.worker.jobs`` logger.

One INFO line as a job ends (succeeded, cancelled, released at a stop), and one as it starts when it is still
running :data:`START_LINE_AFTER` seconds later (every start at DEBUG); a failed attempt ends with its
traceback at WARNING when the job will run again and at ERROR when it goes dead; a job whose lease another
worker took ends at WARNING without one. Every line carries the job's fields as record attributes
(:data:`JOB_FIELDS`), which a formatter may render (the command line's JSON lines hold them all, its text
lines show a short id). The lines come from :class:`JobLog`, the first middleware of every worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from jobengine.aio import running_loop
from jobengine.core.models import Job
from jobengine.middleware import Middleware

log = logging.getLogger("jobengine.worker.jobs")


class _Printable(logging.Filter):
    """A failure's text comes from the task and may hold lone surrogates, which no UTF-8 stream, file or
    pipe takes: the message and the traceback of such a line are escaped before any handler sees them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            record.exc_text = _escaped(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
            record.msg, record.args = _escaped(record.getMessage()), None
        return True


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


log.addFilter(_Printable())

#: Seconds a job runs before its start line is written, stamped with its start. A job that ends sooner is
#: told by its end line alone, which names its duration: most jobs are short, and a worker busy with them
#: would spend more on two lines per job than on the jobs.
START_LINE_AFTER: Final = 0.1

#: The record attributes every job line carries.
JOB_FIELDS: Final = ("job_id", "task", "attempt", "outcome", "duration_ms")

#: Every outcome a job line can end with, and the level it is logged at.
OUTCOMES: Final = {
    "succeeded": logging.INFO,
    "cancelled": logging.INFO,
    "released": logging.INFO,  # handed back at a stop, no attempt spent
    "retry": logging.WARNING,  # failed; runs again after its backoff
    "lease_lost": logging.WARNING,  # another worker runs it now
    "dead": logging.ERROR,  # failed for the last time, or NonRetryable
}

#: What a line says of each outcome: the verb before the duration, and what follows the attempt.
_PHRASES: Final = {
    "succeeded": ("succeeded", ""),
    "cancelled": ("was cancelled", ""),
    "released": ("was released", " (the worker is stopping)"),
    "retry": ("failed", ", will retry"),
    "lease_lost": ("lost its lease", "; another worker runs it"),
    "dead": ("failed", ", dead"),
}


#: The loggers a job line passes on its way to the root logger's handlers.
_CHAIN: Final = (log, logging.getLogger("jobengine.worker"), logging.getLogger("jobengine"))


def _sole_writer(level: int) -> Any:
    """The one handler a line at ``level`` would reach, when it can write the line without a record (the
    command line's stderr handler has ``write_line``) and nothing else would see the record: no handler or
    filter of an app's on the way, one root handler. None otherwise."""
    if len(log.filters) != 1:  # ours, which only escapes tracebacks
        return None
    for logger in _CHAIN:
        if logger.handlers or not logger.propagate or (logger is not log and logger.filters):
            return None
    handlers = logging.root.handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if handler.filters or level < handler.level or not hasattr(handler, "write_line"):
        return None
    return handler


def _line(level: int, msg: str, args: tuple[object, ...], fields: dict[str, object],
          exc: BaseException | None = None, created: float | None = None) -> None:  # fmt: skip
    """One job line, stamped ``created`` (default: now). Without a traceback and with only the command
    line's handler listening, the handler writes it from its parts; otherwise a record is made and handed to
    the logger's handlers directly, since :meth:`logging.Logger.info` would also walk the stack for the
    caller's file and line, which no job line shows (the lines say ``(job)`` there)."""
    if exc is None and (writer := _sole_writer(level)) is not None:
        writer.write_line(level, log.name, msg, args, fields, created)
        return
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = log.makeRecord(log.name, level, "(job)", 0, msg, args, exc_info, extra=fields)
    if created is not None:
        record.created, record.msecs = created, (created - int(created)) * 1000
    log.handle(record)


def started(job: Job, created: float | None = None) -> None:
    """The line of a job that started at ``created`` (default: now)."""
    if log.isEnabledFor(logging.INFO):
        fields = {"job_id": job.id, "task": job.task, "attempt": job.attempt, "outcome": "started"}
        _line(logging.INFO, "job %s (%s) started (attempt %d of %d)",
              (job.id, job.task, job.attempt, job.max_attempts), fields, created=created)  # fmt: skip


def ended(job: Job, outcome: str, seconds: float, exc: BaseException | None = None) -> None:
    """The line of a job that ended with ``outcome`` (a key of :data:`OUTCOMES`) after ``seconds``; the
    traceback of ``exc`` goes with a failure that is logged at WARNING or above."""
    level = OUTCOMES[outcome]
    if not log.isEnabledFor(level):
        return
    ms = round(seconds * 1000)
    fields = {"job_id": job.id, "task": job.task, "attempt": job.attempt, "outcome": outcome, "duration_ms": ms}
    verb, tail = _PHRASES[outcome]
    failed = exc is not None and outcome in ("retry", "dead")
    if failed:
        tail += f": {type(exc).__name__}: {exc}"
    args = (job.id, job.task, verb, ms, job.attempt, job.max_attempts, tail)
    _line(level, "job %s (%s) %s in %d ms (attempt %d of %d)%s", args, fields, exc if failed else None)


class JobLog(Middleware):
    """The job lines as middleware: every worker runs it before the app's own, so the lines go through the
    same hooks users write (and a hook of theirs that raises does not cost a line).

    A start waits, unwritten, until the job ends (then only its end line is written) or has run
    :data:`START_LINE_AFTER` seconds (then its start line is, stamped with its start): one timer per worker
    writes the starts that came due. At DEBUG, and off an event loop, every start is written at once."""

    def __init__(self) -> None:
        #: The unwritten starts in the order they came: job id -> (job, wall time, loop time).
        self._starts: dict[str, tuple[Job, float, float]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def before_run(self, job: Job) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        loop = running_loop()
        if loop is None or log.isEnabledFor(logging.DEBUG):
            started(job)
            return
        at = loop.time()
        self._starts[job.id] = (job, time.time(), at)
        if self._timer is None:
            self._timer = loop.call_at(at + START_LINE_AFTER, self._write_due)

    def after_attempt(self, job: Job, outcome: str, seconds: float, error: BaseException | None) -> None:
        if self._starts:
            self._starts.pop(job.id, None)
        ended(job, outcome, seconds, error)

    def _write_due(self) -> None:
        """Write the starts of the jobs still running :data:`START_LINE_AFTER` seconds after they began, oldest
        first, and wait for the next one's."""
        self._timer = None
        loop = asyncio.get_running_loop()
        due = loop.time() - START_LINE_AFTER
        written = []
        for job_id, (_, _, at) in self._starts.items():
            if at > due:
                self._timer = loop.call_at(at + START_LINE_AFTER, self._write_due)
                break
            written.append(job_id)
        for job_id in written:
            job, wall, _ = self._starts.pop(job_id)
            started(job, wall)


def start_block(
    worker_id: str,
    queues: Sequence[str],
    setup: Sequence[tuple[str, str]],
    concurrency: int,
    tasks: Sequence[str],
    packs: Sequence[str],
) -> None:
    """The worker's start-up lines: one record, so that a JSON line holds all of it."""
    about = [*setup, ("queues", ", ".join(queues)), ("concurrency", str(concurrency)),
             ("tasks", ", ".join(tasks) or "-"), ("packs", ", ".join(packs) or "-")]  # fmt: skip
    width = max(len(label) for label, _ in about)
    lines = "".join(f"\n  {label:<{width}}  {value}" for label, value in about)
    fields: dict[str, object] = dict(setup)
    fields.update(worker_id=worker_id, queues=list(queues), concurrency=concurrency, tasks=list(tasks),
                  packs=list(packs))  # fmt: skip
    logging.getLogger("jobengine.worker").info(
        "worker %s started on queues %s%s", worker_id, ",".join(queues), lines, extra=fields
    )
