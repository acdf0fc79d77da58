"""``jobengine enqueue``, ``jobengine jobs list | show | cancel | retry`` and ``jobengine workers``."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
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
from jobengine.core.bounds import check_time
from jobengine.core.models import Job, JobFilter, Json, check_filter
from jobengine.core.selection import MAX_BULK, BulkAction, BulkResult
from jobengine.core.states import JobState
from jobengine.engine import Engine
from jobengine.errors import IllegalState, InvalidJob, NotFound
from jobengine.serialize import bulk_to_json, job_to_json, worker_to_json

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
        list[str] | None,
        typer.Option("--depends-on", metavar="ID", help="Run after this job (id or prefix) succeeded (repeatable)."),
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
            after = [await _dependency(engine, i, tenant) for i in depends_on or ()]
            return await engine.enqueue(
                task, body, queue=queue, priority=priority, delay=delay, run_at=at, max_attempts=max_attempts,
                idempotency_key=idempotency_key, depends_on=after, tenant=tenant,
            )  # fmt: skip

    job = run(go())
    output.emit(as_json, job_to_json(job), job.id)


async def _dependency(engine: Engine, ident: str, tenant: str) -> str:
    """The id of the job ``ident`` names, whole or by a unique prefix; an unknown one as given, which the
    enqueue refuses naming ``depends_on``."""
    try:
        return await engine.jobs.resolve_id(ident, tenant)
    except (NotFound, InvalidJob):
        return ident


StateOption = Annotated[str | None, typer.Option(help="Only these states (comma-separated).")]
QueueOption = Annotated[str | None, typer.Option(help="Only this queue.")]
TaskOption = Annotated[str | None, typer.Option(help="Only this task.")]
TenantOption = Annotated[str | None, typer.Option(help="Only this tenant.")]
IdOption = Annotated[str | None, typer.Option("--id", metavar="PREFIX", help="Only ids starting with this.")]
AfterOption = Annotated[
    str | None, typer.Option("--created-after", metavar="TIME", help="Only jobs created after this ISO 8601 time.")
]
BeforeOption = Annotated[
    str | None, typer.Option("--created-before", metavar="TIME", help="Only jobs created before this ISO 8601 time.")
]
PayloadOption = Annotated[
    str | None, typer.Option("--payload", metavar="TEXT", help="Only jobs whose payload JSON holds this text.")
]
IdsArgument = Annotated[
    list[str] | None,
    typer.Argument(metavar="[ID]...", help="Job ids or unique prefixes; none: the jobs the options select.",
                   show_default=False),
]  # fmt: skip
YesFlag = Annotated[bool, typer.Option("--yes", "-y", help="Act on the jobs the options select without asking.")]


def job_filter(
    *,
    state: str | None = None,
    queue: str | None = None,
    task: str | None = None,
    tenant: str | None = None,
    id_prefix: str | None = None,
    after: str | None = None,
    before: str | None = None,
    payload: str | None = None,
    limit: int = 50,
) -> JobFilter:
    """The filter the options give; InvalidJob naming the option for a bad one."""
    return check_filter(JobFilter(
        tenant=tenant, states=parse_states(state), queue=queue, task=task, limit=limit, id_prefix=id_prefix,
        created_after=check_time("created_after", parse_time(after, "created_after")) if after else None,
        created_before=check_time("created_before", parse_time(before, "created_before")) if before else None,
        payload_text=payload,
    ))  # fmt: skip


@jobs_app.command("list")
def list_jobs(
    state: StateOption = None,
    queue: QueueOption = None,
    task: TaskOption = None,
    tenant: TenantOption = None,
    id_prefix: IdOption = None,
    created_after: AfterOption = None,
    created_before: BeforeOption = None,
    payload: PayloadOption = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.", min=1, max=10_000)] = 50,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List jobs, newest first, with the filters given (every one must hold)."""
    selected = job_filter(state=state, queue=queue, task=task, tenant=tenant, id_prefix=id_prefix,
                          after=created_after, before=created_before, payload=payload, limit=limit)  # fmt: skip
    jobs = with_engine(config, db, lambda engine: engine.list_jobs(selected))
    output.emit_list(as_json, jobs, job_to_json, output.jobs_table, "no jobs match")


@jobs_app.command("show")
def show_job(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job's id or a unique prefix.", show_default=False)],
    events: Annotated[int, typer.Option(help="How many of its latest events to show.", min=0)] = 20,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show one job: its fields, phases with progress, failed attempts and latest events."""

    async def go(engine: Engine) -> tuple[Job, list[Any], str | None]:
        job = await engine.jobs.resolve(job_id)
        history = await engine.events(job_id=job.id, limit=10_000) if events and not as_json else []
        waiting = (await engine.fleet.waiting_reasons([job])).get(job.id)
        return job, history[-events:] if events else [], waiting

    job, history, waiting = with_engine(config, db, go)
    output.emit(as_json, job_to_json(job, waiting), output.job_detail(job, history, waiting))


def bulk(
    action: BulkAction,
    ids: list[str],
    selected: JobFilter,
    *,
    yes: bool,
    as_json: bool,
    db: str | None,
    config: Path | None,
    reason: str = "cancelled by user",
) -> None:
    """Apply ``action`` to the jobs ``ids`` name (prefixes resolved) or, without ids, to those ``selected``
    chooses: their count is shown and confirmed first (``--yes`` skips the question)."""
    if not ids and selected == JobFilter(limit=selected.limit):
        raise InvalidJob(
            "id", f"give job ids, or options that select the jobs to {action.value} (--state, --task, ...)"
        )
    settings = load_settings(config, database=db)

    async def go() -> BulkResult | None:
        async with open_engine(settings) as engine:
            if ids:
                resolved = [await engine.jobs.resolve_id(i) for i in ids]
                return await engine.jobs.apply(action, ids=resolved, reason=reason)
            matching = await engine.list_jobs(replace(selected, limit=MAX_BULK + 1))
            if not matching:
                return BulkResult(action, 0)
            count = f"more than {MAX_BULK}" if len(matching) > MAX_BULK else str(len(matching))
            if not yes:
                if not sys.stdin.isatty():
                    raise InvalidJob("yes", f"{count} jobs match; pass --yes to {action.value} them")
                if not typer.confirm(f"{count} jobs match; {action.value} them?", err=True):
                    return None
            return await engine.jobs.apply(action, filter=selected, reason=reason)

    result = run(go())
    if result is None:
        output.stdout().print("nothing done")
        raise typer.Exit(1)
    output.emit(as_json, bulk_to_json(result), output.bulk_report(result))


def bulk_or_one(ids: list[str] | None, selected: JobFilter) -> bool:
    """Whether a command acts in bulk: without ids, or with more than one, or with a filter beside ids."""
    return not ids or len(ids) > 1 or selected != JobFilter(limit=selected.limit)


@jobs_app.command("cancel")
def cancel_job(
    job_ids: IdsArgument = None,
    reason: Annotated[str, typer.Option(help="Why (kept on the job).")] = "cancelled by user",
    state: StateOption = None,
    queue: QueueOption = None,
    task: TaskOption = None,
    tenant: TenantOption = None,
    id_prefix: IdOption = None,
    created_after: AfterOption = None,
    created_before: BeforeOption = None,
    payload: PayloadOption = None,
    yes: YesFlag = False,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Cancel jobs that have not run yet, or ask the workers of running ones to stop them: the jobs named,
    or every job the options select (``jobs cancel --state queued --task X``)."""
    selected = job_filter(state=state, queue=queue, task=task, tenant=tenant, id_prefix=id_prefix,
                          after=created_after, before=created_before, payload=payload)  # fmt: skip
    if bulk_or_one(job_ids, selected):
        if job_ids and selected != JobFilter(limit=selected.limit):
            raise InvalidJob("id", "give job ids or filter options, not both")
        bulk(BulkAction.CANCEL, job_ids or [], selected, yes=yes, as_json=as_json, db=db, config=config, reason=reason)
        return
    assert job_ids is not None

    async def one(engine: Engine) -> Job:
        return await engine.cancel(await engine.jobs.resolve_id(job_ids[0]), reason)

    job = with_engine(config, db, one)
    if job.state is JobState.CANCELLED:
        message = f"cancelled {job.id}"
    else:
        message = f"cancel requested for {job.id}: it is {job.state.value}; its worker stops it at its next heartbeat"
    output.emit(as_json, job_to_json(job), message)


def _bulk_command(action: BulkAction, summary: str) -> None:
    """Register ``jobs <action>``: one job by id (or prefix), several ids, or the jobs the options select."""

    def command(
        job_ids: IdsArgument = None,
        state: StateOption = None,
        queue: QueueOption = None,
        task: TaskOption = None,
        tenant: TenantOption = None,
        id_prefix: IdOption = None,
        created_after: AfterOption = None,
        created_before: BeforeOption = None,
        payload: PayloadOption = None,
        yes: YesFlag = False,
        as_json: JsonFlag = False,
        db: DbOption = None,
        config: ConfigOption = None,
    ) -> None:
        selected = job_filter(state=state, queue=queue, task=task, tenant=tenant, id_prefix=id_prefix,
                              after=created_after, before=created_before, payload=payload)  # fmt: skip
        if bulk_or_one(job_ids, selected):
            if job_ids and selected != JobFilter(limit=selected.limit):
                raise InvalidJob("id", "give job ids or filter options, not both")
            bulk(action, job_ids or [], selected, yes=yes, as_json=as_json, db=db, config=config)
            return
        assert job_ids is not None

        async def one(engine: Engine) -> Job | None:
            job_id = await engine.jobs.resolve_id(job_ids[0])
            if action is BulkAction.RETRY:
                return await engine.retry(job_id)
            if action is BulkAction.REPLAY:
                return await engine.replay(job_id)
            result = await engine.jobs.apply(action, ids=[job_id])
            if result.refused:
                raise IllegalState(f"job {job_id} is {result.refused[0][1]}")
            return None

        job = with_engine(config, db, one)
        if job is None:
            output.emit(as_json, {"deleted": job_ids[0]}, f"deleted {job_ids[0]}")
        else:
            output.emit(as_json, job_to_json(job), f"queued {job.id} again ({job.max_attempts} attempts)")

    command.__doc__ = summary
    jobs_app.command(action.value)(command)


_bulk_command(BulkAction.RETRY, "Queue dead, cancelled or failed jobs again now, with a fresh attempt budget: the "
              "jobs named, or every job the options select.")  # fmt: skip
_bulk_command(BulkAction.REPLAY, "Queue dead jobs again (the dead letter's replay): the jobs named, or every job "
              "the options select.")  # fmt: skip
_bulk_command(BulkAction.DELETE, "Delete dead jobs now (a job.deleted event each): the jobs named, or every job "
              "the options select.")  # fmt: skip


def workers(
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List the live workers: host, pid, queues, tasks, packs, version, jobs in hand, when seen last."""
    found = with_engine(config, db, lambda engine: engine.fleet.live())
    output.emit_list(as_json, found, worker_to_json, output.workers_table, "no live workers")
