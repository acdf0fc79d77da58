"""The command line's logging: one handler on stderr, text or JSON lines, configured in one place.

Every command configures it as it starts (:func:`configure_logging`, from ``--log-level`` / ``--log-format``,
else ``JOBENGINE_LOG_LEVEL`` / ``JOBENGINE_LOG_FORMAT``, else info and text); a command that loads settings
(a worker, the server, the scheduler) then applies the file's ``log_level`` / ``log_format`` unless a flag or
a variable chose already (:func:`apply_settings`).

- ``text``: ``2026-11-28 16:20:01 INFO    jobengine.worker.jobs: job 4ce9.000 (report) succeeded in 12 ms``,
  a job's id shortened as in listings; a traceback follows its line.
- ``json``: one object per line: ``time`` (ISO 8601 UTC), ``level``, ``logger``, ``message``, the record's
  own fields (a job's ``job_id``, ``task``, ``attempt``, ``outcome``, ``duration_ms``; a worker's start-up
  ``store``, ``transport``, ``queues``, ...) and ``exc_info``, the traceback as one string.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from jobengine.aio import TurnBatch
from jobengine.core.ids import short_id
from jobengine.settings import Settings

#: The attributes every LogRecord has; the others are the fields a caller gave in ``extra``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        out = self._object(record.created, record.levelname, record.name, record.getMessage(), fields)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc_info"] = record.exc_text
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)

    def line(self, created: float, levelname: str, name: str, message: str, fields: Mapping[str, object]) -> str:
        """The line of a record without a traceback, made from its parts (see :meth:`_StderrHandler.write_line`)."""
        return json.dumps(self._object(created, levelname, name, message, fields), default=str, ensure_ascii=False)

    @staticmethod
    def _object(
        created: float, levelname: str, name: str, message: str, fields: Mapping[str, object]
    ) -> dict[str, Any]:
        time_ = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
        return {"time": time_, "level": levelname, "logger": name, "message": message, **fields}


class TextFormatter(logging.Formatter):
    """``time level logger: message``; a job's id in the message shortened (:func:`short_id`)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S")
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self._stamp_of(record.created)

    def _stamp_of(self, created: float) -> str:
        """The stamp of the second, made once per second: a busy worker writes thousands of lines in one."""
        second = int(created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime(self.datefmt or "", self.converter(second))
        return self._stamp

    def formatMessage(self, record: logging.LogRecord) -> str:
        fields = {"job_id": getattr(record, "job_id", None)}
        return self.line(record.created, record.levelname, record.name, record.message, fields)

    def line(self, created: float, levelname: str, name: str, message: str, fields: Mapping[str, object]) -> str:
        """The line of a record without a traceback, made from its parts (see :meth:`_StderrHandler.write_line`)."""
        text = f"{self._stamp_of(created)} {levelname:<7} {name}: {message}"
        job_id = fields.get("job_id")
        return text.replace(job_id, short_id(job_id)) if isinstance(job_id, str) and job_id else text


#: A line of :meth:`_StderrHandler.write_line` as its parts: created, level, logger, msg, args, fields.
_Line = tuple[float, int, str, str, tuple[object, ...], Mapping[str, object]]


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a record comes (a test's capture, a redirected stream),
    not to the stream there was when the handler was made. ``chosen``: the level and format a flag or a
    variable chose (None: not chosen), which a settings file does not change."""

    def __init__(self, chosen: tuple[str | None, str | None]) -> None:
        super().__init__()
        self.chosen = chosen
        #: Lines of :meth:`write_line`, as their parts, made and written at the running event loop's next turn.
        self._lines: TurnBatch[_Line] = TurnBatch(
            self._write_lines,
            self.lock,  # an RLock, made in Handler.__init__
            # A failed write at the loop's turn is reported as a record's would be, never raised into the loop.
            on_error=lambda: self.handleError(_JOB_LINES),
        )

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""

    def write_line(
        self,
        level: int,
        name: str,
        msg: str,
        args: tuple[object, ...],
        fields: Mapping[str, object],
        created: float | None = None,
    ) -> None:
        """A record's line without the record: what :meth:`emit` writes for a record of ``level`` from the
        logger ``name`` with the message ``msg % args`` and the extra ``fields``, made at ``created`` (default:
        now), and no traceback. A worker writes a line or two per job; a :class:`logging.LogRecord` and its
        trip through the logger cost more than the job itself when the job is short. The caller makes sure no
        other handler or filter would have seen it.

        In a running event loop the line waits for the loop's next turn, so that the lines of one turn go
        out in one write: a write per line costs a busy worker a system call per line, and blocks its loop
        for each. The line is kept as its parts and made then, with the turn's other lines, one after the other
        rather than each between the steps of its job. A record and a flush (``logging.shutdown``'s at exit)
        write the waiting lines first, in order."""
        self._lines.add((time.time() if created is None else created, level, name, msg, args, fields))

    def _write_lines(self, entries: list[_Line]) -> None:
        """Makes and writes lines in one call. A line that cannot be made is reported as a record that cannot
        be, and the others are written; lines whose write fails are not tried again (as a record's that
        fails)."""
        formatter = self.formatter
        assert isinstance(formatter, JsonFormatter | TextFormatter)
        name_of = logging.getLevelName
        lines = []
        for created, level, name, msg, args, fields in entries:
            try:
                lines.append(formatter.line(created, name_of(level), name, msg % args, fields))
            except Exception:
                self.handleError(logging.makeLogRecord({"name": name, "msg": msg, "args": args}))
        if lines:
            stream = self.stream
            stream.write(self.terminator.join(lines) + self.terminator)
            stream.flush()  # as emit() does: a replaced stderr (a capture, a pipe's wrapper) may buffer

    def flush(self) -> None:
        self._lines.flush()
        super().flush()

    def emit(self, record: logging.LogRecord) -> None:
        if self._lines:  # the waiting lines first, in order
            try:
                self._lines.flush()
            except Exception:
                self.handleError(record)
        super().emit(record)


#: What a failed write of waiting lines is reported as (logging's report names a record).
_JOB_LINES = logging.makeLogRecord({"msg": "lines written by write_line", "args": ()})


def check(level: str, fmt: str) -> tuple[str, str]:
    """``(level, format)`` validated; ConfigError naming ``log_level`` or ``log_format``."""
    # Settings validates both fields; built on the defaults, it checks only these two.
    Settings(log_level=level, log_format=fmt)
    return level.lower(), fmt


def configure_logging(
    level: str = "info", fmt: str = "text", *, chosen: tuple[str | None, str | None] = (None, None)
) -> None:
    """Send jobengine's records at ``level`` and above, and every other library's warnings, to stderr as
    ``fmt`` lines, replacing an earlier call's handler (the root logger's other handlers stay)."""
    level, fmt = check(level, fmt)
    handler = _StderrHandler(chosen)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    number = logging.getLevelNamesMapping()[level.upper()]
    root.setLevel(max(number, logging.WARNING))
    logging.getLogger("jobengine").setLevel(number)
    logging.getLogger("jobengine.worker.jobs").setLevel(logging.NOTSET)  # as jobengine's, unless live_view


def configure_from(level: str | None, fmt: str | None, env: Mapping[str, str]) -> None:
    """The command line's first configuration: the flags, else the variables, else the defaults."""
    level = level or env.get("JOBENGINE_LOG_LEVEL") or None
    fmt = fmt or env.get("JOBENGINE_LOG_FORMAT") or None
    configure_logging(level or "info", fmt or "text", chosen=(level, fmt))


def apply_settings(settings: Settings, *, live_view: bool = False) -> None:
    """Use ``settings.log_level`` / ``log_format`` where no flag or variable chose already.

    ``live_view``: the command shows every job's events itself (``jobengine up``), so the job lines below
    ERROR (starts, ends, retried failures) would repeat them; they stay off unless a flag or variable chose
    the level. A dead job's line, with its traceback, still shows."""
    current = [h for h in logging.getLogger().handlers if isinstance(h, _StderrHandler)]
    level, fmt = current[-1].chosen if current else (None, None)
    configure_logging(level or settings.log_level, fmt or settings.log_format, chosen=(level, fmt))
    if live_view and level is None:
        logging.getLogger("jobengine.worker.jobs").setLevel(logging.ERROR)
