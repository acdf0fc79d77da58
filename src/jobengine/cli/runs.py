"""``jobengine runs start | list | show | cancel | retry | replay | diff`` and
``jobengine signatures list | update``."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from jobengine.cli import output
from jobengine.cli.common import (
    ActorOption,
    ConfigOption,
    DbOption,
    JsonFlag,
    actor_of,
    json_list,
    with_engine,
)
from jobengine.cli.jobs import parse_time
from jobengine.core import codec
from jobengine.core.clock import iso, to_datetime
from jobengine.core.ids import short_id
from jobengine.core.models import Job
from jobengine.core.run_diff import ItemChange
from jobengine.core.run_requests import RunMode, RunRequest
from jobengine.core.runs import Run, RunFilter, RunState, RunTrigger, Segment
from jobengine.core.signatures import SignatureFilter, SignatureStatus
from jobengine.engine import Engine
from jobengine.errors import InvalidSchedule
from jobengine.serialize import job_to_json, run_to_json, segment_to_json, signature_to_json

runs_app = typer.Typer(name="runs", help="Runs: start one over items; list, show, cancel, retry, replay, diff.",
                       no_args_is_help=True, rich_markup_mode=None)  # fmt: skip
signatures_app = typer.Typer(
    name="signatures", help="Failure signatures: the same bug grouped.", no_args_is_help=True, rich_markup_mode=None
)

RunRef = Annotated[
    str, typer.Argument(metavar="RUN", help="The run's id or a unique prefix of it (its short id).", show_default=False)
]
TenantFilter = Annotated[str | None, typer.Option(help="Only this tenant.")]

RUN_STYLES = {
    RunState.PLANNING: "blue",
    RunState.QUEUED: "cyan",
    RunState.RUNNING: "bold yellow",
    RunState.COMPLETED: "green",
    RunState.CANCELLED: "magenta",
    RunState.ERROR: "bold red",
}


def _enum_list(kind: type[Any], value: str | None, field: str) -> tuple[Any, ...]:
    if not value:
        return ()
    out = []
    for name in value.split(","):
        try:
            out.append(kind(name.strip()))
        except ValueError:
            known = ", ".join(m.value for m in kind)
            raise InvalidSchedule(field, f"unknown {field} {name.strip()!r} (one of {known})") from None
    return tuple(out)


def _time(value: str | None, field: str) -> float | None:
    if value is None:
        return None
    moment: datetime = parse_time(value, field)
    if moment.tzinfo is None:
        raise InvalidSchedule(field, "give a time zone (like 2030-01-31T09:00:00+00:00)")
    return moment.timestamp()


def _when(ts: float | None) -> str:
    moment = to_datetime(ts)
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def runs_table(runs: list[Run]) -> Table:
    """One line per run, within 130 columns: the short id (a prefix ``runs show`` takes) and one time, the
    tick of a scheduled run or the creation of another (``runs show`` and ``--json`` give both); a long
    note is cut short with an ellipsis rather than wrapped onto lines of its own."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "STATE", "TRIGGER", "AT (UTC)", "JOBS", "OK", "DEAD", "CANC"):
        table.add_column(column, no_wrap=True)
    # The columns before it take 91 of 130 columns at most (counts under 10000).
    table.add_column("NOTE", no_wrap=True, overflow="ellipsis", max_width=39)
    for r in runs:
        s = r.summary
        note = "no work" if r.no_work else (r.reason or "")
        style = RUN_STYLES.get(r.state, "")
        table.add_row(
            short_id(r.id), f"[{style}]{r.state.value}[/{style}]", r.trigger.value, _when(r.tick or r.created_at),
            str(s.total), str(s.succeeded), str(s.dead), str(s.cancelled), escape(note[:200]),
        )  # fmt: skip
    return table


@runs_app.command("list")
def list_runs(
    schedule: Annotated[str | None, typer.Option(help="Only runs of this schedule (name or id).")] = None,
    state: Annotated[str | None, typer.Option(help="Only these states (comma-separated).")] = None,
    trigger: Annotated[str | None, typer.Option(help="Only this trigger: schedule, manual, retry or request.")] = None,
    mode: Annotated[
        str | None, typer.Option(help="Only run requests in this mode: full, incremental or simulate.")
    ] = None,
    since: Annotated[str | None, typer.Option(help="Created at or after this ISO 8601 time.")] = None,
    until: Annotated[str | None, typer.Option(help="Created before this ISO 8601 time.")] = None,
    tenant: TenantFilter = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.", min=1, max=10_000)] = 50,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List runs, newest first."""
    triggers = _enum_list(RunTrigger, trigger, "trigger")
    if len(triggers) > 1:
        raise InvalidSchedule("trigger", "give one trigger")
    modes = _enum_list(RunMode, mode, "mode")
    if len(modes) > 1:
        raise InvalidSchedule("mode", "give one mode")
    base = RunFilter(
        tenant=tenant, states=_enum_list(RunState, state, "state"), trigger=triggers[0] if triggers else None,
        created_after=_time(since, "since"), created_before=_time(until, "until"), limit=limit,
        mode=modes[0].value if modes else None,
    )  # fmt: skip

    async def go(engine: Engine) -> list[Run]:
        f = base if schedule is None else replace(base, schedule_id=(await engine.schedules.get(schedule, tenant)).id)
        return await engine.runs.list(f)

    output.emit_list(as_json, with_engine(config, db, go), run_to_json, runs_table, "no runs match")


@runs_app.command("show")
def show_run(
    run_id: RunRef,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show a run, its summary and its jobs."""

    async def go(engine: Engine) -> tuple[Run, list[Segment], list[Job]]:
        found = await engine.runs.get(run_id)
        return found, await engine.runs.segments(found.id), await engine.runs.jobs(found.id)

    found, segments, jobs = with_engine(config, db, go)
    if as_json:
        body = run_to_json(found)
        body["segments"] = [segment_to_json(s) for s in segments]
        body["jobs"] = [job_to_json(j) for j in jobs]
        output.print_json(body)
        return
    console = output.stdout()
    console.print(runs_table([found]))
    s = found.summary
    console.print(f"tick {iso(found.tick) or '-'} · created {iso(found.created_at)}")
    console.print(
        f"items {found.items} · jobs {s.total}: {s.succeeded} succeeded, {s.dead} dead, {s.cancelled} cancelled, "
        f"{s.pending} pending · time {s.duration_total:.3f}s total, {s.duration_max:.3f}s longest"
    )
    if jobs:
        console.print(output.jobs_table(jobs))


ItemsOption = Annotated[str | None, typer.Option("--items", metavar="JSON", help="A JSON list of items.")]
ItemsFile = Annotated[
    Path | None, typer.Option("--items-file", help="A file holding a JSON list of items.", dir_okay=False)
]
EnvOption = Annotated[list[str] | None, typer.Option("--env", help="NAME=VALUE handed to each job (repeat).")]


def _request(task: str, items: str | None, items_file: Path | None, env: list[str] | None,
             **fields: Any) -> RunRequest:  # fmt: skip
    listed = list(json_list(items, "items") or ())
    if items_file is not None:
        try:
            text = items_file.read_text()
        except OSError as exc:
            raise InvalidSchedule("items-file", f"cannot read {items_file}: {exc.strerror}") from None
        listed.extend(json_list(text, "items-file") or ())
    environment: dict[str, str] = {}
    for pair in env or ():
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidSchedule("env", f"give NAME=VALUE, got {pair!r}")
        environment[name] = value
    return RunRequest(task=task, items=tuple(listed), environment=environment, **fields)


@runs_app.command("start")
def start_run(
    task: Annotated[str, typer.Argument(metavar="TASK", help="The task to run over the items.", show_default=False)],
    items: ItemsOption = None,
    items_file: ItemsFile = None,
    mode: Annotated[str, typer.Option(help="full, incremental or simulate.")] = "full",
    priority: Annotated[str, typer.Option(help="normal, high or emergency.")] = "normal",
    version: Annotated[str | None, typer.Option(help="The task's version (kept on the run and jobs).")] = None,
    source: Annotated[str, typer.Option(help="The input source (its cursor is per task and source).")] = "default",
    env: EnvOption = None,
    run_id: Annotated[str | None, typer.Option(help="Makes the request idempotent: once per id.")] = None,
    segment_size: Annotated[int, typer.Option(help="Items per job.")] = 100,
    queue: Annotated[str | None, typer.Option(help="Queue of the jobs (default: the task's).")] = None,
    reason: Annotated[str | None, typer.Option(help="Why (kept on the run).")] = None,
    tenant: Annotated[str, typer.Option(help="Tenant of the run.")] = "default",
    preview: Annotated[bool, typer.Option("--preview", help="Say what the run would take; start nothing.")] = False,
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Run a task over items: full, incremental (after the last successful run's cursor) or simulate."""
    request = _request(
        task, items, items_file, env, mode=mode, priority=priority, version=version, source=source, run_id=run_id,
        segment_size=segment_size, queue=queue, reason=reason,
    )  # fmt: skip
    if preview:
        found = with_engine(config, db, lambda engine: engine.runs.preview(request, tenant=tenant))
        p = found.plan
        output.emit(as_json, found.to_json(), f"{len(p.todo)} item(s) in {found.segments} job(s); left out: "
                    f"{p.before_cursor} at or before the cursor, {p.done} done by earlier runs")  # fmt: skip
        return
    run = with_engine(config, db, lambda engine: engine.runs.start(request, tenant=tenant, actor=actor_of(actor)))
    output.emit(as_json, run_to_json(run), f"run {run.id}: {run.items} item(s) in {run.summary.total} job(s)")


@runs_app.command("cancel")
def cancel_run(
    run_id: RunRef,
    reason: Annotated[str, typer.Option(help="Why (kept on the run and its jobs).")] = "cancelled by user",
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Cancel a run and its jobs that have not ended."""
    done = with_engine(config, db, lambda engine: engine.runs.cancel(run_id, reason=reason, actor=actor_of(actor)))
    output.emit(as_json, run_to_json(done), f"cancelled run {short_id(done.id)}")


@runs_app.command("retry")
def retry_run(
    run_id: RunRef,
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Run the dead and cancelled jobs of an ended run again, as a new run."""
    new = with_engine(config, db, lambda engine: engine.runs.retry(run_id, actor=actor_of(actor)))
    output.emit(as_json, run_to_json(new),
                f"run {short_id(new.id)} retries {new.summary.total} job(s) of {short_id(new.parent_id)}")  # fmt: skip


@runs_app.command("replay")
def replay_run(
    run_id: RunRef,
    reason: Annotated[str | None, typer.Option(help="Why (kept on the new run).")] = None,
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Run an ended run request's run again, as a new run over the same items, version and mode."""
    new = with_engine(config, db, lambda engine: engine.runs.replay(run_id, reason=reason, actor=actor_of(actor)))
    output.emit(
        as_json, run_to_json(new), f"run {short_id(new.id)} replays {short_id(new.parent_id)}: {new.items} item(s)"
    )


@runs_app.command("diff")
def diff_run(
    run_id: RunRef,
    same: Annotated[bool, typer.Option("--same", help="List unchanged items too.")] = False,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Compare an ended simulate run, item by item, with the last full run of its task and source."""
    diff = with_engine(config, db, lambda engine: engine.runs.diff(run_id))
    if as_json:
        output.print_json(diff.to_json(same=same))
        return
    console = output.stdout()
    counts = ", ".join(f"{n} {change}" for change, n in diff.counts.items())
    console.print(f"run {diff.run_id} against {diff.base_run_id or 'no full run'}: {counts}"
                  + (f"; {diff.unfinished} unfinished" if diff.unfinished else ""))  # fmt: skip
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ITEM", "CHANGE", "BEFORE", "AFTER"):
        table.add_column(column, overflow="fold")
    shown = [e for e in diff.entries if same or e.change is not ItemChange.SAME]
    for e in shown:
        table.add_row(*(escape(codec.dumps(v, "result")[:80]) for v in (e.item, e.change.value, e.before, e.after)))
    if shown:
        console.print(table)


@signatures_app.command("list")
def list_signatures(
    tenant: TenantFilter = None,
    status: Annotated[str | None, typer.Option(help="Only these statuses (comma-separated).")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, most recently seen first.", min=1)] = 50,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List failure signatures, most recently seen first."""
    f = SignatureFilter(tenant=tenant, statuses=_enum_list(SignatureStatus, status, "status"), limit=limit)
    found = with_engine(config, db, lambda engine: engine.signatures.list(f))
    if as_json:
        output.print_json([signature_to_json(s) for s in found])
        return
    table = Table(box=None, header_style="bold")
    for column in ("KEY", "TENANT", "COUNT", "LAST SEEN", "STATUS", "RETRY", "TYPE", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for s in found:
        table.add_row(
            s.key, escape(s.tenant), str(s.occurrences), iso(s.last_seen) or "", s.status.value,
            "no" if s.non_retryable else "yes", escape(s.error_type), escape(s.message[:80]),
        )  # fmt: skip
    output.stdout().print(table if found else "no failure signatures")


@signatures_app.command("update")
def update_signature(
    key: Annotated[
        str, typer.Argument(metavar="KEY", help="The signature's key or a unique prefix of it.", show_default=False)
    ],
    status: Annotated[str | None, typer.Option(help="active, resolved or suppressed.")] = None,
    retryable: Annotated[
        bool | None, typer.Option("--retryable/--non-retryable", help="Whether its failures may retry.")
    ] = None,
    tenant: Annotated[str, typer.Option(help="Tenant of the signature.")] = "default",
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Set a signature's status, or mark it non-retryable (its new failures go straight to dead)."""
    non_retryable = None if retryable is None else not retryable
    s = with_engine(config, db, lambda engine: engine.signatures.update(
        key, tenant=tenant, status=status, non_retryable=non_retryable, actor=actor_of(actor)
    ))  # fmt: skip
    flag = "non-" if s.non_retryable else ""
    output.emit(as_json, signature_to_json(s), f"signature {s.key}: {s.status.value}, {flag}retryable")
