"""``jobengine schedules create | list | show | update | delete | pause | resume | trigger | simulate``.

Every change is audited with an actor: ``--actor`` (default ``cli:<your login>``). Durations take units:
``--every 30s``, ``--jitter 2m``. ``--json`` prints the shapes of :mod:`jobengine.serialize`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
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
    load_settings,
    open_engine,
    run,
    with_engine,
)
from jobengine.cli.jobs import read_payload
from jobengine.core.clock import iso
from jobengine.core.cron import load_zone, parse_duration
from jobengine.core.graph_template import GraphTemplate
from jobengine.core.ids import short_id
from jobengine.core.request_template import RequestTemplate
from jobengine.core.schedules import JobTemplate, Schedule, ScheduleFilter, ScheduleSpec, Template, runs_of
from jobengine.engine import Engine
from jobengine.errors import InvalidSchedule
from jobengine.scheduler.planning import Simulation
from jobengine.serialize import run_to_json, schedule_to_json, simulation_to_json

schedules_app = typer.Typer(
    name="schedules", help="Create and manage CRON and interval schedules.", no_args_is_help=True, rich_markup_mode=None
)

Ref = Annotated[
    str,
    typer.Argument(metavar="SCHEDULE", help="The schedule's name, id or a unique id prefix.", show_default=False),
]
TenantOption = Annotated[str | None, typer.Option(help="Tenant of the schedule [default: default].")]
Cron = Annotated[str | None, typer.Option(help="CRON expression (5 fields) or an alias like @hourly.")]
Every = Annotated[str | None, typer.Option(help="A fixed interval instead of CRON: 30s, 5m, 1h30m.")]
Tz = Annotated[str | None, typer.Option("--tz", help="IANA time zone of the CRON expression [default: UTC].")]
Task = Annotated[str | None, typer.Option(help="The task each run's jobs run.")]
Payload = Annotated[str | None, typer.Option("--payload", "-p", metavar="JSON", help="JSON payload of the jobs.")]
Items = Annotated[
    str | None, typer.Option(metavar="JSON", help="A JSON list of items: each run fans out into segments of them.")
]
Planner = Annotated[str | None, typer.Option(help="A registered planner that returns each run's items.")]
SegmentSize = Annotated[int | None, typer.Option("--segment-size", help="Items per job [default: 1].", min=1)]
Queue = Annotated[str | None, typer.Option(help="Queue of the jobs [default: the task's].")]
Priority = Annotated[int | None, typer.Option(help="Priority of the jobs [default: the task's].")]
Attempts = Annotated[int | None, typer.Option("--max-attempts", help="Attempts per job [default: the task's].")]
Overlap = Annotated[str | None, typer.Option(help="While the previous run is going: allow, skip or queue.")]
Misfire = Annotated[str | None, typer.Option(help="Ticks missed while no scheduler ran: skip, run_once, catch_up.")]
CatchUp = Annotated[int | None, typer.Option("--catch-up", help="How many missed ticks catch_up runs.", min=0)]
Jitter = Annotated[str | None, typer.Option(help="Jobs start up to this long after the tick: 10s.")]
GraphFile = Annotated[
    Path | None,
    typer.Option(
        "--graph", metavar="FILE", help="Each run fires this graph: a JSON file, the body of POST /api/v1/graphs."
    ),
]

RequestFile = Annotated[
    Path | None,
    typer.Option(
        "--request",
        metavar="FILE",
        help="Each run is this run request's: a JSON file, the body of POST /api/v1/runs with a mode and items "
        "or a planner (no run_id).",
    ),
]


def _json_file(path: Path, option: str) -> object:
    """The JSON in the file ``path``; InvalidSchedule naming ``option`` when it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidSchedule(option, f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidSchedule(option, f"{path} is not JSON: {exc}") from None


def _graph_template(path: Path) -> GraphTemplate:
    """The graph template in the JSON file ``path``; InvalidSchedule naming ``graph`` or the bad field."""
    body = _json_file(path, "graph")
    if not isinstance(body, dict) or "nodes" not in body:
        raise InvalidSchedule("graph", f"{path} must hold an object with nodes (the body of POST /api/v1/graphs)")
    return GraphTemplate.from_json(body)


def _request_template(path: Path) -> RequestTemplate:
    """The run request template in the JSON file ``path``; InvalidSchedule naming ``request`` or the bad field."""
    body = _json_file(path, "request")
    if not isinstance(body, dict) or "task" not in body or "mode" not in body:
        raise InvalidSchedule("request", f"{path} must hold an object with a task and a mode (a run request)")
    return RequestTemplate.from_json(body)


def _one_template(fields: dict[str, Any], graph: Path | None, request: Path | None) -> None:
    """Refuse two kinds of template at once, naming the first option that clashes."""
    given = [f"--{k.replace('_', '-')}" for k in fields] + ["--graph"] * (graph is not None)
    given += ["--request"] * (request is not None)
    if len(given) > 1 and (graph is not None or request is not None):
        field = "graph" if graph is not None else "request"
        raise InvalidSchedule(
            field, f"give --graph, --request or --task (and its options), not {' and '.join(given[:2])}"
        )


def _template_fields(
    task: str | None,
    payload: str | None,
    items: str | None,
    planner: str | None,
    segment_size: int | None,
    queue: str | None,
    priority: int | None,
    max_attempts: int | None,
) -> dict[str, Any]:
    given = {
        "task": task,
        "payload": read_payload(payload, None),
        "items": json_list(items, "items"),
        "planner": planner,
        "segment_size": segment_size,
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
    }
    return {k: v for k, v in given.items() if v is not None}


def _spec_fields(
    cron: str | None,
    every: str | None,
    tz: str | None,
    overlap: str | None,
    misfire: str | None,
    catch_up: int | None,
    jitter: str | None,
) -> dict[str, Any]:
    given = {
        "cron": cron,
        "every": parse_duration(every, "every") if every is not None else None,
        "timezone": tz,
        "overlap": overlap,
        "misfire": misfire,
        "catch_up": catch_up,
        "jitter": parse_duration(jitter, "jitter") if jitter is not None else None,
    }
    return {k: v for k, v in given.items() if v is not None}


async def _check_task(engine: Engine, task: str) -> str | None:
    """Refuse (``refuse_unknown_tasks``) a task that neither ``--app`` nor any live worker runs, as an enqueue
    does: a schedule of such a task makes jobs that wait forever. Otherwise the warning to print once the
    schedule is saved; None while no worker is registered (a schedule is often made before its workers)."""
    if "@" in task or engine.tasks.get(task) is not None:  # a pack's task, or one this process knows
        return None
    if task in await engine.fleet.known_tasks():
        return None
    if engine.settings.refuse_unknown_tasks:
        raise InvalidSchedule("task", f"no worker runs task {task!r} (refuse_unknown_tasks is on)")
    return f"no live worker runs task {task!r}" if await engine.fleet.live_cached() else None


def _warn(message: str | None) -> None:
    if message:
        output.stderr().print(f"[yellow]warning:[/yellow] {escape(message)}")


def _cadence(schedule: Schedule) -> str:
    spec = schedule.spec
    if spec.cron is not None:
        return f"{spec.cron} ({spec.timezone})"
    return f"every {spec.every:g}s"


def schedules_table(schedules: list[Schedule]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "TENANT", "WHEN", "TASK", "NEXT", "OVERLAP", "MISFIRE", "STATE", "ID"):
        table.add_column(column, overflow="fold")
    for s in schedules:
        state = "[green]enabled[/green]" if s.enabled else "[magenta]paused[/magenta]"
        misfire = s.spec.misfire.value + (f" {s.spec.catch_up}" if s.spec.misfire.value == "catch_up" else "")
        t = s.spec.template
        task = f"graph {t.name}" if isinstance(t, GraphTemplate) else t.task
        if isinstance(t, RequestTemplate):
            task += f" ({t.mode.value})"
        table.add_row(
            escape(s.name), escape(s.tenant), escape(_cadence(s)), escape(task),
            iso(s.next_fire_at) or "-", s.spec.overlap.value, misfire, state, short_id(s.id),
        )  # fmt: skip
    return table


@schedules_app.command("create")
def create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Unique within the tenant.", show_default=False)],
    task: Task = None,
    cron: Cron = None,
    every: Every = None,
    tz: Tz = None,
    payload: Payload = None,
    items: Items = None,
    planner: Planner = None,
    segment_size: SegmentSize = None,
    queue: Queue = None,
    priority: Priority = None,
    max_attempts: Attempts = None,
    overlap: Overlap = None,
    misfire: Misfire = None,
    catch_up: CatchUp = None,
    jitter: Jitter = None,
    graph: GraphFile = None,
    request: RequestFile = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    tenant: Annotated[str, typer.Option(help="Tenant the schedule and its jobs belong to.")] = "default",
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Create a schedule (--cron or --every) whose runs create jobs of --task, each fire the --graph, or each
    start the run --request."""
    fields = _template_fields(task, payload, items, planner, segment_size, queue, priority, max_attempts)
    _one_template(fields, graph, request)
    if task is None and graph is None and request is None:
        raise InvalidSchedule(
            "task", "give --task (the task each run's jobs run), --graph (a graph's JSON file) or --request"
        )
    if cron is None and every is None:
        raise InvalidSchedule("cron", "give --cron (a CRON expression) or --every (an interval)")
    if cron is not None and every is not None:
        raise InvalidSchedule("cron", "give --cron or --every, not both")
    template: Template
    if graph is not None:
        template = _graph_template(graph)
    elif request is not None:
        template = _request_template(request)
    else:
        template = JobTemplate(**fields)
    spec = ScheduleSpec(
        name=name,
        template=template,
        enabled=not paused,
        tenant=tenant,
        **_spec_fields(cron, every, tz, overlap, misfire, catch_up, jitter),
    )

    async def go(engine: Engine) -> tuple[Schedule, str | None]:
        warning = await _check_task(engine, task) if task is not None else None
        return await engine.schedules.create(spec, actor=actor_of(actor)), warning

    schedule, warning = with_engine(config, db, go, must_exist=False)
    _warn(warning)
    next_at = iso(schedule.next_fire_at) or "never (paused)"
    message = f"created schedule {escape(schedule.name)} ({short_id(schedule.id)}); next run {next_at}"
    output.emit(as_json, schedule_to_json(schedule), message)


@schedules_app.command("list")
def list_schedules(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List schedules by tenant and name."""
    every = ScheduleFilter(tenant=tenant, limit=10_000)
    schedules = with_engine(config, db, lambda engine: engine.schedules.list(every))
    output.emit_list(as_json, schedules, schedule_to_json, schedules_table, "no schedules")


@schedules_app.command("show")
def show(
    ref: Ref,
    runs: Annotated[int, typer.Option(help="How many of its latest runs to show.", min=0)] = 10,
    tenant: TenantOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show a schedule, its next fire times and its latest runs."""

    async def go(engine: Engine) -> tuple[Schedule, Simulation | None, list[Any]]:
        from jobengine.core.runs import RunFilter

        schedule = await engine.schedules.get(ref, tenant)
        preview = await engine.schedules.simulate(schedule.id, count=5) if schedule.enabled else None
        history = await engine.runs.list(RunFilter(schedule_id=runs_of(schedule), limit=runs)) if runs else []
        return schedule, preview, history

    schedule, preview, history = with_engine(config, db, go)
    if as_json:
        output.print_json(schedule_to_json(schedule))
        return
    console = output.stdout()
    console.print(schedules_table([schedule]))
    template = schedule.spec.template
    console.print(f"template: {escape(json.dumps(template.to_json(), sort_keys=True))}")
    if preview is not None:
        console.print("next: " + ", ".join(iso(t) or "" for t in preview.fire_times))
    if history:
        from jobengine.cli.runs import runs_table

        console.print(runs_table(history))


@schedules_app.command("update")
def update(
    ref: Ref,
    task: Task = None,
    cron: Cron = None,
    every: Every = None,
    tz: Tz = None,
    payload: Payload = None,
    items: Items = None,
    planner: Planner = None,
    segment_size: SegmentSize = None,
    queue: Queue = None,
    priority: Priority = None,
    max_attempts: Attempts = None,
    overlap: Overlap = None,
    misfire: Misfire = None,
    catch_up: CatchUp = None,
    jitter: Jitter = None,
    graph: GraphFile = None,
    request: RequestFile = None,
    rename: Annotated[str | None, typer.Option(help="A new name.")] = None,
    tenant: TenantOption = None,
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Change a schedule: only the options given change (a new --cron / --every applies from now)."""
    changes = _spec_fields(cron, every, tz, overlap, misfire, catch_up, jitter)
    template_changes = _template_fields(task, payload, items, planner, segment_size, queue, priority, max_attempts)
    if rename is not None:
        changes["name"] = rename
    _one_template(template_changes, graph, request)
    if graph is not None:
        changes["template"] = _graph_template(graph)
    if request is not None:
        changes["template"] = _request_template(request)

    async def go(engine: Engine) -> tuple[Schedule, str | None]:
        warning = await _check_task(engine, task) if task is not None else None
        if template_changes:
            current = await engine.schedules.get(ref, tenant)
            if not isinstance(current.spec.template, JobTemplate) and "task" not in template_changes:
                first = next(iter(template_changes)).replace("_", "-")
                fires, option = (
                    ("fires a graph", "--graph") if isinstance(current.spec.template, GraphTemplate)
                    else ("starts a run request", "--request")
                )  # fmt: skip
                raise InvalidSchedule(first, f"the schedule {fires}: give {option}, or --task to fire jobs instead")
            base = current.spec.template.to_json() if isinstance(current.spec.template, JobTemplate) else {}
            changes["template"] = {**base, **template_changes}
        return await engine.schedules.update(ref, tenant=tenant, actor=actor_of(actor), **changes), warning

    schedule, warning = with_engine(config, db, go)
    _warn(warning)
    output.emit(as_json, schedule_to_json(schedule), f"updated {escape(schedule.name)} (version {schedule.version})")


def _simple(action: str, verb: str) -> Any:
    def command(
        ref: Ref,
        tenant: TenantOption = None,
        actor: ActorOption = None,
        as_json: JsonFlag = False,
        db: DbOption = None,
        config: ConfigOption = None,
    ) -> None:
        schedule: Schedule = with_engine(
            config, db, lambda engine: getattr(engine.schedules, action)(ref, tenant=tenant, actor=actor_of(actor))
        )
        output.emit(as_json, schedule_to_json(schedule), f"{verb} {escape(schedule.name)}")

    return command


schedules_app.command("pause", help="Stop firing (runs already going continue).")(_simple("pause", "paused"))
schedules_app.command("resume", help="Fire again from the next tick after now.")(_simple("resume", "resumed"))


@schedules_app.command("delete")
def delete(
    ref: Ref, tenant: TenantOption = None, actor: ActorOption = None, db: DbOption = None, config: ConfigOption = None
) -> None:
    """Delete a schedule (its runs and their jobs stay)."""
    with_engine(config, db, lambda engine: engine.schedules.delete(ref, tenant=tenant, actor=actor_of(actor)))
    output.stdout().print(f"deleted {escape(ref)}")


@schedules_app.command("trigger")
def trigger(
    ref: Ref,
    reason: Annotated[str, typer.Option(help="Why (kept on the run and in the audit log).")],
    tenant: TenantOption = None,
    actor: ActorOption = None,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Fire a run now, by hand."""
    fired = with_engine(
        config, db, lambda engine: engine.schedules.trigger(ref, reason=reason, tenant=tenant, actor=actor_of(actor))
    )
    summary = f"run {short_id(fired.id)}: {fired.state.value}, {fired.summary.total} job(s)"
    output.emit(as_json, run_to_json(fired), summary)


@schedules_app.command("simulate")
def simulate(
    ref: Annotated[
        str | None,
        typer.Argument(
            metavar="[SCHEDULE]",
            help="A stored schedule (or give --task and --cron / --every for a proposed one).",
            show_default=False,
        ),
    ] = None,
    count: Annotated[int, typer.Option(help="How many fire times.", min=1, max=1000)] = 10,
    task: Task = None,
    cron: Cron = None,
    every: Every = None,
    tz: Tz = None,
    payload: Payload = None,
    items: Items = None,
    planner: Planner = None,
    segment_size: SegmentSize = None,
    tenant: TenantOption = None,
    utc: Annotated[bool, typer.Option("--utc", help="Fire times in UTC only.")] = False,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Show the next fire times (in the schedule's time zone, with UTC beside) and the jobs each run would
    create. Writes nothing."""
    proposed: ScheduleSpec | None = None
    if ref is None:
        if task is None:
            raise InvalidSchedule("task", "give a SCHEDULE, or --task with --cron / --every for a proposed one")
        fields = _template_fields(task, payload, items, planner, segment_size, None, None, None)
        proposed = ScheduleSpec(
            name="proposed", template=JobTemplate(**fields), tenant=tenant or "default",
            **_spec_fields(cron, every, tz, None, None, None, None),
        )  # fmt: skip
    settings = load_settings(config, database=db)

    if proposed is not None:  # nothing to read: never open (or create) the database for a proposal
        settings = replace(settings, database="memory")

    async def go() -> Simulation:
        async with open_engine(settings, must_exist=True) as engine:
            target: ScheduleSpec | str = proposed if proposed is not None else ref or ""
            return await engine.schedules.simulate(target, count=count, tenant=tenant)

    simulation = run(go())
    if as_json:
        output.print_json(simulation_to_json(simulation))
        return
    # A CRON schedule fires on its zone's wall clock: that is the time to check, the offset shows DST.
    zone_name = simulation.spec.timezone
    zone = None if utc or zone_name.upper() == "UTC" else load_zone(zone_name)
    table = Table(box=None, header_style="bold")
    times = ("FIRES AT (UTC)",) if zone is None else (f"FIRES AT ({zone_name})", "UTC")
    for column in (*times, "JOBS", "ITEMS", "NOTE"):
        table.add_column(escape(column), no_wrap=True)
    for r in simulation.runs:
        note = "no work" if r.no_work else (escape(r.error) if r.error else "")
        at = datetime.fromtimestamp(r.tick, UTC)
        cells = [at.isoformat(sep=" ", timespec="seconds")]
        if zone is not None:
            cells.insert(0, at.astimezone(zone).isoformat(sep=" ", timespec="seconds"))
        table.add_row(*cells, str(len(r.jobs)), str(sum(r.items)), note)
    output.stdout().print(table)
