"""``jobengine enqueue``, ``jobengine jobs list | show | cancel | retry`` and ``jobengine workers``."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Annotated, Any

import typer

from jobengine.cli import output
from jobengine.cli.common import (
    ConfigOption,
    DbOption,
    JsonFlag,
    app_engine,
    load_settings,
    open_engine,
    run,
    started,
    with_engine,
)
from jobengine.core.models import Job, JobFilter, Json
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import InvalidJob
from jobengine.serialize import job_to_json, worker_to_json

jobs_app = typer.Typer(name="jobs", help="Inspect and manage stored jobs.", no_args_is_help=True, rich_markup_mode=None)


def read_payload(payload: str | None, payload_file: str | None) -> Json:
    """The payload from ``--payload`` or ``--payload-file`` (``-``: stdin); None when neither is given.
    Raises InvalidJob naming the option."""
    if payload is not None and payload_file is not None:
        raise InvalidJob("payload", "give --payload or --payload-file, not both")
    if payload_file is not None:
        source = "payload-file"
        try:
            text = sys.stdin.read() if payload_file == "-" else open(payload_file, encoding="utf-8").read()  # noqa: SIM115
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InvalidJob("payload-file", f"cannot read {payload_file}: {reason}") from None
    elif payload is not None:
        source, text = "payload", payload
    else:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidJob(source, f"not valid JSON ({exc})") from None


def parse_time(value: str, field: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InvalidJob(field, f"{value!r} is not an ISO 8601 time (like 2030-01-31T09:00:00+00:00)") from None


def parse_states(value: str | None) -> tuple[JobState, ...]:
    if not value:
        return ()
    states = []
    for name in value.split(","):
        try:
            states.append(JobState(name.strip()))
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise InvalidJob("state", f"unknown state {name.strip()!r} (one of {known})") from None
    return tuple(states)


def enqueue(
    task: Annotated[str, typer.Argument(metavar="TASK", help="Name of the task to run.", show_default=False)],
    payload: Annotated[str | None, typer.Option("--payload", "-p", metavar="JSON", help="JSON payload.")] = None,
    payload_file: Annotated[
        str | None,
        typer.Option("--payload-file", metavar="FILE", help="Read the JSON payload from a file ('-': stdin)."),
    ] = None,
    queue: Annotated[
        str | None, typer.Option(help="Queue [default: the task's (registered by --app), else 'default'].")
    ] = None,
    priority: Annotated[int | None, typer.Option(help="Higher runs first [default: the task's, else 0].")] = None,
    delay: Annotated[float | None, typer.Option(help="Run after this many seconds.", min=0)] = None,
    run_at: Annotated[
        str | None, typer.Option("--run-at", metavar="TIME", help="Run at this ISO 8601 time (with a zone).")
    ] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts", help="Attempts before dead.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Enqueue at most once per key (per tenant).")
    ] = None,
    depends_on: Annotated[
        list[str] | None, typer.Option("--depends-on", metavar="ID", help="Run after this job succeeded (repeatable).")
    ] = None,
    tenant: Annotated[str, typer.Option(help="Tenant the job belongs to.")] = "default",
    app: Annotated[
        str | None,
        typer.Option(
            "--app", help="The Engine whose tasks give the defaults (queue, priority, attempts), module:attr."
        ),
    ] = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Store a job; print its id (or the whole job with --json). With --app, the task's registration gives
    what is not given (its queue, priority, attempts, timeout), on the app's database as its worker uses."""
    at = parse_time(run_at, "run_at") if run_at is not None else None
    body = read_payload(payload, payload_file)
    opened = open_engine(load_settings(config, database=db)) if app is None else started(app_engine(app, config, db))

    async def go() -> Job:
        async with opened as engine:
            return await engine.enqueue(
                task, body, queue=queue, priority=priority, delay=delay, run_at=at, max_attempts=max_attempts,
                idempotency_key=idempotency_key, depends_on=depends_on or (), tenant=tenant,
            )  # fmt: skip

    job = run(go())
    output.emit(as_json, job_to_json(job), job.id)


@jobs_app.command("list")
def list_jobs(
    state: Annotated[str | None, typer.Option(help="Only these states (comma-separated).")] = None,
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.", min=1, max=10_000)] = 50,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List jobs, newest first."""
    job_filter = JobFilter(tenant=tenant, states=parse_states(state), queue=queue, task=task, limit=limit)
    jobs = with_engine(config, db, lambda engine: engine.list_jobs(job_filter))
    output.emit_list(as_json, jobs, job_to_json, output.jobs_table, "no jobs match")


@jobs_app.command("show")
def show_job(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job's id.", show_default=False)],
    events: Annotated[int, typer.Option(help="How many of its latest events to show.", min=0)] = 20,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show one job: its fields, phases with progress, failed attempts and latest events."""

    async def go(engine: Engine) -> tuple[Job, list[Any], str | None]:
        job = await engine.get_job(job_id)
        history = await engine.events(job_id=job.id, limit=10_000) if events and not as_json else []
        waiting = (await engine.fleet.waiting_reasons([job])).get(job.id)
        return job, history[-events:] if events else [], waiting

    job, history, waiting = with_engine(config, db, go)
    output.emit(as_json, job_to_json(job, waiting), output.job_detail(job, history, waiting))


@jobs_app.command("cancel")
def cancel_job(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job's id.", show_default=False)],
    reason: Annotated[str, typer.Option(help="Why (kept on the job).")] = "cancelled by user",
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Cancel a job that has not run yet, or ask its worker to stop a running one."""
    job = with_engine(config, db, lambda engine: engine.cancel(job_id, reason))
    if job.state is JobState.CANCELLED:
        message = f"cancelled {job.id}"
    else:
        message = f"cancel requested for {job.id}: it is {job.state.value}; its worker stops it at its next heartbeat"
    output.emit(as_json, job_to_json(job), message)


@jobs_app.command("retry")
def retry_job(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job's id.", show_default=False)],
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Queue a dead, cancelled or failed job again now, with a fresh attempt budget."""
    job = with_engine(config, db, lambda engine: engine.retry(job_id))
    output.emit(as_json, job_to_json(job), f"queued {job.id} again ({job.max_attempts} attempts)")


def workers(
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List the live workers: host, pid, queues, tasks, packs, version, jobs in hand, when seen last."""
    found = with_engine(config, db, lambda engine: engine.fleet.live())
    output.emit_list(as_json, found, worker_to_json, output.workers_table, "no live workers")
