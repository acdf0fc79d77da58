"""Rendering for the terminal: one-line errors, JSON, job tables, a job's detail and live event lines.

Machine output (``--json``) bypasses rich entirely, so it is never wrapped, coloured or highlighted.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from jobengine.core.clock import to_datetime
from jobengine.core.ids import short_id
from jobengine.core.models import Event, Job, Phase, PhaseState
from jobengine.core.selection import BulkResult
from jobengine.core.states import JobState
from jobengine.ports.workers import WorkerInfo

T = TypeVar("T")

STATE_STYLES: Final[Mapping[str, str]] = {
    JobState.BLOCKED: "magenta",
    JobState.SCHEDULED: "blue",
    JobState.QUEUED: "cyan",
    JobState.RUNNING: "bold yellow",
    JobState.SUCCEEDED: "green",
    JobState.FAILED: "yellow",
    JobState.DEAD: "bold red",
    JobState.CANCELLED: "magenta",
    JobState.STALE: "dim",
    PhaseState.PENDING: "dim",
}

EVENT_STYLES: Final[Mapping[str, str]] = {
    "job.enqueued": "cyan",
    "job.unblocked": "cyan",
    "job.started": "yellow",
    "job.phase": "blue",
    "job.succeeded": "green",
    "job.failed": "yellow",
    "job.dead": "bold red",
    "job.cancelled": "magenta",
    "job.cancel_requested": "magenta",
    "job.released": "cyan",
    "job.retried": "cyan",
    "job.stale": "dim",
    "job.deleted": "dim",
}


STATE_IMPLIED: Final = frozenset(
    {"job.started", "job.phase", "job.succeeded", "job.failed", "job.dead", "job.cancelled"}
)
SHOWS_ATTEMPT: Final = frozenset({"job.started", "job.failed", "job.dead"})


def stdout() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # A pipe or a file: rich would assume 80 columns and cut ids short; whole lines are what grep wants.
        console.width = 200
    return console


def stderr() -> Console:
    # soft_wrap: an error stays one line however narrow the terminal (or a pipe's default 80 columns).
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """The one way a command reports a failure: a single red ``error: ...`` line on stderr."""
    stderr().print(f"[bold red]error:[/bold red] [red]{escape(message)}[/red]")


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n")
    sys.stdout.flush()


def emit(as_json: bool, body: Any, text: RenderableType) -> None:
    """``body`` as JSON under ``--json``, else ``text`` for a person."""
    if as_json:
        print_json(body)
    else:
        stdout().print(text)


def emit_list(
    as_json: bool, items: Sequence[T], to_json: Callable[[T], Any], table: Callable[[list[T]], Table], empty: str
) -> None:
    """A listing: one JSON object per item under ``--json``, else ``empty`` when there are none, else the table."""
    if as_json:
        print_json([to_json(i) for i in items])
    elif not items:
        stdout().print(empty)
    else:
        stdout().print(table(list(items)))


def bulk_report(result: BulkResult) -> Text:
    """``cancelled 120 of 121 jobs; 1 refused`` and a line per refused job (the first ten)."""
    done = {"cancel": "cancelled", "retry": "queued again", "replay": "replayed", "delete": "deleted"}
    text = Text(f"{done[result.action.value]} {len(result.changed)} of {result.matched} jobs")
    if result.refused_count:
        text.append(f"; {result.refused_count} refused", style="yellow")
    if result.more:
        text.append("; more match (run it again for the rest)", style="yellow")
    for job_id, why in result.refused[:10]:
        text.append(f"\n  {short_id(job_id)}  {why}", style="dim")
    return text


def clock_time(ts: float | None, date: bool = False, millis: bool = True) -> str:
    """Local time: ``12:03:04.123``; with ``date`` the whole local date and zone."""
    utc = to_datetime(ts)  # clamped: a stored time out of the bounds still prints
    if utc is None:
        return "-"
    moment = utc.astimezone()
    if date:
        return moment.strftime("%Y-%m-%d %H:%M:%S %Z")
    return moment.strftime("%H:%M:%S.%f")[:-3] if millis else moment.strftime("%H:%M:%S")


def percent(fraction: float) -> str:
    return f"{fraction * 100:.0f}%"


def bar(fraction: float, width: int = 12) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


def jobs_table(jobs: Sequence[Job]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("id", "task", "queue", "state", "attempt", "progress", "created", "updated"):
        table.add_column(column, no_wrap=column == "id")
    for job in jobs:
        table.add_row(
            short_id(job.id),
            job.task,
            job.queue,
            state_text(job.state.value),
            f"{job.attempt}/{job.max_attempts}",
            percent(job.progress),
            clock_time(job.created_at, millis=False),
            clock_time(job.updated_at, millis=False),
        )
    return table


def _fields(job: Job, waiting: str | None = None) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, RenderableType]] = [
        ("id", job.id),
        ("task", job.task),
        ("queue", job.queue),
        ("tenant", job.tenant),
        ("state", state_text(job.state.value + (f" (was {job.outcome.value})" if job.outcome else ""))),
        ("attempt", f"{job.attempt} of {job.max_attempts}"),
        ("priority", str(job.priority)),
        ("progress", f"{bar(job.progress)} {percent(job.progress)}"),
        ("payload", json.dumps(job.payload, ensure_ascii=False)),
        ("run at", clock_time(job.run_at, date=True)),
        ("created", clock_time(job.created_at, date=True)),
        ("started", clock_time(job.started_at, date=True)),
        ("finished", clock_time(job.finished_at, date=True)),
    ]
    if waiting:
        rows.append(("waiting", Text(waiting, style="yellow")))
    if job.idempotency_key:
        rows.append(("idempotency key", job.idempotency_key))
    if job.depends_on:
        rows.append(("depends on", ", ".join(job.depends_on)))
    if job.lease_worker:
        rows.append(("worker", f"{job.lease_worker} (lease until {clock_time(job.lease_expires_at)})"))
    if job.cancel_requested:
        rows.append(("cancel", "requested; the worker stops it at its next heartbeat"))
    if job.reason:
        rows.append(("reason", job.reason))
    if job.result is not None:
        rows.append(("result", json.dumps(job.result, ensure_ascii=False)))
    for name, value in rows:
        grid.add_row(name, value if not isinstance(value, str) else Text(value))
    return grid


def _phases(phases: Sequence[Phase]) -> Table:
    table = Table(title="phases", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in ("#", "phase", "state", "progress", "message", "checkpoint"):
        table.add_column(column)
    for i, p in enumerate(phases, 1):
        table.add_row(
            str(i),
            p.name,
            state_text(p.state.value),
            f"{bar(p.progress)} {percent(p.progress)}",
            Text(p.message or ""),
            Text(json.dumps(p.checkpoint, ensure_ascii=False) if p.checkpoint is not None else ""),
        )
    return table


def _attempts(job: Job) -> Table:
    table = Table(title="failed attempts", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in ("attempt", "at", "error", "worker"):
        table.add_column(column)
    for e in job.errors:
        table.add_row(str(e.attempt), clock_time(e.at), Text(f"{e.type}: {e.message}", style="red"), e.worker or "-")
    return table


def workers_table(workers: Sequence[WorkerInfo]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("worker", "kind", "host", "pid", "version", "queues", "tasks", "packs", "jobs", "started", "seen"):
        table.add_column(column, no_wrap=column == "worker")
    for w in workers:
        table.add_row(
            w.id, w.kind, w.host or "-", str(w.pid or "-"), w.version or "-", ",".join(w.queues),
            Text(", ".join(w.tasks) or "-"), Text(", ".join(w.packs) or "-"), f"{w.in_flight}/{w.concurrency}",
            clock_time(w.started_at, millis=False), clock_time(w.last_seen, millis=False),
        )  # fmt: skip
    return table


def events_table(events: Sequence[Event]) -> Table:
    table = Table(title="recent events", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in ("#", "at", "event", "details"):
        table.add_column(column)
    for e in events:
        table.add_row(str(e.id), clock_time(e.at), Text(e.type, style=EVENT_STYLES.get(e.type, "")), details(e))
    return table


def job_detail(job: Job, events: Sequence[Event], waiting: str | None = None) -> RenderableType:
    parts: list[RenderableType] = [_fields(job, waiting)]
    if job.phases:
        parts += [Text(), _phases(job.phases)]
    if job.errors:
        parts += [Text(), _attempts(job)]
    if events:
        parts += [Text(), events_table(events)]
    return Group(*parts)


def details(event: Event, phase_count: int = 0) -> Text:
    """What an event says beyond its type: state, attempt, phase, error, reason, as short styled text."""
    data = event.data
    out = Text()

    def add(text: str, style: str = "") -> None:
        if out:
            out.append(" · ", style="dim")
        out.append(text, style=style)

    state = data.get("state")
    # The type already names the state it leads to; say the state only where it adds something.
    if isinstance(state, str) and event.type not in STATE_IMPLIED:
        add(state, STATE_STYLES.get(state, ""))
    if isinstance(data.get("attempt"), int) and data["attempt"] and event.type in SHOWS_ATTEMPT:
        add(f"attempt {data['attempt']}")
    if event.type == "job.phase" and isinstance(data.get("phase"), str):
        index = data.get("index")
        step = data.get("phase_event", "").removeprefix("phase.")
        position = f"{index + 1}/{phase_count} " if isinstance(index, int) and phase_count else ""
        fraction = data.get("progress")
        if step == "progress" and isinstance(fraction, int | float):
            add(f"phase {position}{data['phase']} {percent(clamp01(fraction))}", "blue")
        else:
            add(f"phase {position}{data['phase']} {step}", "blue")
        overall = data.get("job_progress")
        if isinstance(overall, int | float):  # the job's own progress, saved with each phase event
            add(f"{bar(overall, 6)} {percent(clamp01(overall))}")
        elif isinstance(index, int) and phase_count:
            done = index + (1 if step == "succeeded" else 0)
            add(f"{bar(done / phase_count, 6)} {percent(done / phase_count)}")
        if step == "progress" and isinstance(data.get("message"), str) and data["message"]:
            add(data["message"], "dim")
    if isinstance(data.get("duration"), int | float):
        add(f"in {data['duration']:.2f}s")
    if data.get("error"):
        add(f"{data.get('error_type', 'error')}: {data['error']}", "red")
    if isinstance(data.get("retry_at"), int | float):
        add(f"retry at {clock_time(data['retry_at'])}")
    if data.get("reason"):
        add(str(data["reason"]))
    if data.get("worker"):
        add(f"on {data['worker']}", "dim")
    return out


#: Widths of the live view's type and task columns; a longer value is cut with an ellipsis, so columns
#: never run into each other.
TYPE_WIDTH: Final = 17
TASK_WIDTH: Final = 14


def column(text: str, width: int) -> str:
    """``text`` in exactly ``width`` characters: padded, or cut to end in an ellipsis."""
    return f"{text:<{width}}" if len(text) <= width else text[: width - 1] + "…"


def clamp01(fraction: float) -> float:
    return max(0.0, min(1.0, fraction))


def event_line(event: Event, phase_count: int = 0) -> Text:
    """One line of the live view: time, event type, task, the short id of its job (else of its run, else of
    its schedule), then the details."""
    line = Text()
    line.append(clock_time(event.at), style="dim")
    line.append("  ")
    line.append(column(event.type.removeprefix("job."), TYPE_WIDTH), style=EVENT_STYLES.get(event.type, ""))
    line.append(" ")
    line.append(column(event.task or "-", TASK_WIDTH), style="bold")
    subject = event.job_id or event.data.get("run_id") or event.data.get("schedule_id")
    line.append(f" {short_id(subject if isinstance(subject, str) else None)}  ", style="dim")
    line.append_text(details(event, phase_count))
    return line
