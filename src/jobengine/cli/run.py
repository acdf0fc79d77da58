"""``jobengine up`` (everything in one process, with a live view) and ``jobengine worker`` (a worker only).

Both stop the same way: the first SIGINT / SIGTERM stops claiming jobs and lets the ones in flight finish
within the grace period (the rest are released back to ``queued`` without spending an attempt); a second
one releases them at once. Either way the process exits 0, also when the signal comes while the process is
still starting (importing the app, loading packs): :class:`EarlySignals` holds it until the
:class:`Supervisor` takes over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from jobengine.cli import output
from jobengine.cli.common import (
    ConfigOption,
    DbOption,
    app_engine,
    load_app,
    load_settings,
    rebind,
    run,
    started_when_reachable,
)
from jobengine.cli.logs import apply_settings
from jobengine.cli.supervise import EarlySignals, Supervisor
from jobengine.core.models import JobFilter, check_name
from jobengine.engine import Engine
from jobengine.errors import ConfigError, InvalidJob
from jobengine.services import RetentionService, SchedulerService, Service, WorkerService
from jobengine.settings import DATABASE_FILE, Settings


async def _up(settings: Settings, early: EarlySignals | None = None, app: Engine | None = None) -> None:
    """Everything in one process: the example tasks (and, on a new database, demo jobs and a schedule), or
    the tasks of ``app``, an ``--app`` engine already on ``settings``."""
    # Imported here, not at the top: `jobengine worker` lives in this module too and needs neither.
    from jobengine.cli.live import LiveView
    from jobengine.examples import DEMO_SCHEDULE, build_engine, enqueue_demo, ensure_demo_schedule

    console = output.stdout()
    engine = app if app is not None else build_engine(settings)
    worker = WorkerService(engine.worker())
    async with Supervisor(worker, early) as supervisor, engine:
        console.print(
            f"[bold]jobengine up[/bold] · database [cyan]{escape(settings.database)}[/cyan] · "
            f"tasks {', '.join(engine.tasks.names())} · concurrency {settings.worker_concurrency}"
        )
        first_start = not await engine.list_jobs(JobFilter(limit=1))

        # Imported here: FastAPI is a large share of start-up that commands without the API should not pay
        # (docs/decisions/0023-lazy-imports.md).
        from jobengine.cli.serve import dev_key
        from jobengine.http.server import ApiMaintenance, ApiService
        from jobengine.webhooks.dispatcher import WebhookDispatcher

        api = ApiService(engine, settings)

        async def ready() -> None:
            key = await dev_key(engine, settings)
            console.print(
                f"API on [cyan]{api.url}[/cyan] (dashboard {api.url}/, docs {api.url}/docs) · "
                f"dev key [bold]{escape(key)}[/bold]"
            )
            if first_start and app is None:
                demo = await enqueue_demo(engine)
                console.print(f"a new database: enqueued {len(demo)} demo jobs; watch them run below")
                if await ensure_demo_schedule(engine) is not None:
                    console.print(f"and a schedule, {DEMO_SCHEDULE}: every minute, 3 greetings (`jobengine schedules`)")
            console.print("[dim]Ctrl-C to stop[/dim]")

        # Services start in this order and stop in reverse, so the live view prints the worker's last
        # outcomes before it goes. The HTTP API (REST, SSE) sits between retention and the worker.
        services: list[Service] = [
            LiveView(engine, console), RetentionService(engine), ApiMaintenance(engine, rescue=False), api,
            SchedulerService(engine), WebhookDispatcher(engine), worker,
        ]  # fmt: skip
        await supervisor.serve(services, ready)
    console.print("stopped")


def up(
    db: DbOption = None,
    concurrency: Annotated[int | None, typer.Option(help="Jobs run at once.", min=1)] = None,
    config: ConfigOption = None,
    app: Annotated[
        str | None,
        typer.Option("--app", help="Your Engine, as module:attribute [default: the examples]."),
    ] = None,
) -> None:
    """Run everything in one process: worker, scheduler, retention, the API and dashboard, with a live view;
    the example tasks on SQLite, or your own with --app."""
    early = EarlySignals.install()
    engine: Engine | None = None
    if app is None:
        settings = load_settings(config, database=db, worker_concurrency=concurrency)
    else:
        engine = app_engine(app, config, db)
        settings = engine.settings
        if concurrency is not None:
            settings = replace(settings, worker_concurrency=concurrency)
            engine = rebind(engine, settings)
    if Path(DATABASE_FILE).is_file() and Path(settings.database) != Path(DATABASE_FILE):
        # A database left where the default used to be, in the working directory, is not opened: say so.
        output.stdout().print(
            f"[yellow]note:[/yellow] ./{DATABASE_FILE} is not used: the database is {escape(settings.database)}; "
            f"move the file there, or run with --db {DATABASE_FILE}"
        )
    apply_settings(settings, live_view=True)
    run(_up(settings, early, engine))


def parse_queues(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    queues = tuple(q.strip() for q in value.split(",") if q.strip())
    if not queues:
        raise InvalidJob("queues", "give at least one queue name")
    for q in queues:
        check_name("queues", q)
    return queues


def worker_metrics(settings: Settings) -> tuple[dict[str, Any], list[Service]]:
    """With ``worker_metrics_port`` set: the worker option that counts into Prometheus metrics, and the
    service that serves them (started before the worker, stopped after it, so a last scrape sees it end)."""
    if not settings.worker_metrics_port:
        return {}, []
    from jobengine.http.metrics import MetricsServer  # only then: prometheus_client's server
    from jobengine.worker.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    server = MetricsServer(
        metrics.registry, settings.worker_metrics_host, settings.worker_metrics_port, setting="worker_metrics_port"
    )
    return {"observer": metrics}, [server]


async def _worker(
    engine: Engine, overrides: dict[str, Any], packs: tuple[str, ...] = (), early: EarlySignals | None = None,
    before: Sequence[Service] = (), pending: bool = False,
) -> None:  # fmt: skip
    async with Supervisor(None, early) as supervisor, started_when_reachable(engine, supervisor.stop_event):
        await engine.periodic.sync()
        if packs:  # before the worker is built: its queues default to those of the registered tasks
            from jobengine.cli.packs import load_local

            await load_local(engine, packs, pending=pending)
            if not overrides.get("queues"):
                overrides = {**overrides, "queues": tuple(engine.tasks.queues())}
            overrides = {**overrides, "packs": packs}
        supervisor.worker = worker = WorkerService(engine.worker(**overrides))
        await supervisor.serve([*before, worker])


def worker(
    app: Annotated[
        str | None, typer.Option("--app", help="The Engine to serve, as module:attribute (an Engine or a function).")
    ] = None,
    remote: Annotated[
        str | None, typer.Option("--remote", help="Reach this server's API over HTTP instead of the database.")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", envvar="JOBENGINE_API_KEY", help="API key with scope worker (--remote).")
    ] = None,
    db: DbOption = None,
    queues: Annotated[str | None, typer.Option(help="Comma-separated queues [default: every task's].")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Jobs run at once.", min=1)] = None,
    lease: Annotated[float | None, typer.Option(help="Lease length in seconds.", min=0.1)] = None,
    grace: Annotated[float | None, typer.Option(help="Seconds jobs may finish in after a stop.", min=0)] = None,
    packs: Annotated[
        str | None, typer.Option("--packs", help="Comma-separated name@version of approved task packs to run too.")
    ] = None,
    pending_packs: Annotated[
        bool,
        typer.Option(
            "--pending-packs",
            help="Load --packs versions awaiting approval too, to run their simulations (`jobengine pack simulate`;"
            " with --remote, the key needs scope packs:simulate).",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            help="Serve Prometheus metrics on this port at /metrics, without a key.",
            min=1,
            max=65535,
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Run a worker (and the rescuer of expired leases) for the tasks of --app until SIGTERM / SIGINT.
    With --remote, the worker claims and reports over the HTTP API (--app may then be an SDK TaskApp).
    With --packs, it also downloads, verifies and runs those approved task packs (see `jobengine pack`);
    with --pending-packs, versions among them that await approval too (only simulate runs name those).
    With --config, the settings come from that file (and ``JOBENGINE_*``), also for an --app engine."""
    early = EarlySignals.install()
    refs = None
    if packs:
        from jobengine.packs.loader import parse_refs  # only then: the packs' schema checks and their imports

        refs = tuple(f"{n}@{r}" for n, r in parse_refs(packs))
    if app is None and not refs and not load_settings(config).worker_packs:
        raise ConfigError("app: give --app module:attribute, --packs name@version, or both")
    if remote is not None:
        _remote_worker(app, remote, key, db, queues, concurrency, lease, grace, refs, config, early, metrics_port,
                       pending_packs)  # fmt: skip
        return
    if app is None:
        engine = Engine.from_settings(load_settings(config, database=db))
    elif config is not None:  # the file's settings replace those the app's engine was built with, as in `serve`
        engine = rebind(load_app(app), load_settings(config, database=db))
    else:
        engine = load_app(app)
        if db is not None:
            engine = rebind(engine, replace(engine.settings, database=db))
    # The flags go through Settings so they are validated together (e.g. the heartbeat against the lease).
    flags: dict[str, Any] = {
        "worker_queues": parse_queues(queues),
        "worker_concurrency": concurrency,
        "lease_seconds": lease,
        "grace_period": grace,
        "worker_metrics_port": metrics_port,
    }
    given = {k: v for k, v in flags.items() if v is not None}
    settings = replace(engine.settings, **given)
    apply_settings(settings)
    overrides = {
        "queues": settings.worker_queues,
        "concurrency": settings.worker_concurrency,
        "lease_seconds": settings.lease_seconds,
        "heartbeat_every": settings.heartbeat_every,
        "grace_period": settings.grace_period,
    }
    observe, metrics = worker_metrics(settings)
    refs = refs if refs is not None else settings.worker_packs
    run(_worker(engine, {**overrides, **observe}, refs, early, metrics, pending=pending_packs))


def _remote_worker(
    app: str | None, url: str, key: str | None, db: str | None, queues: str | None, concurrency: int | None,
    lease: float | None, grace: float | None, packs: tuple[str, ...] | None = None, config: Path | None = None,
    early: EarlySignals | None = None, metrics_port: int | None = None, pending: bool = False,
) -> None:  # fmt: skip
    from jobengine.cli.remote import load_tasks, run_remote

    if db is not None:
        raise ConfigError("db: a remote worker does not open a database (--remote reaches it through the API)")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"remote: expected an http:// or https:// URL, got {url!r}")
    flags = {"worker_queues": parse_queues(queues), "worker_concurrency": concurrency, "lease_seconds": lease,
             "grace_period": grace, "worker_metrics_port": metrics_port}  # fmt: skip
    settings = load_settings(config, **flags)
    from jobengine.tasks import TaskRegistry

    tasks = load_tasks(app) if app is not None else TaskRegistry()
    refs = packs if packs is not None else settings.worker_packs
    apply_settings(settings)
    options = {
        "queues": settings.worker_queues, "concurrency": settings.worker_concurrency,
        "lease_seconds": settings.lease_seconds, "heartbeat_every": settings.heartbeat_every,
        "grace_period": settings.grace_period,
    }  # fmt: skip

    async def go() -> None:
        if refs:
            from jobengine.cli.packs import cache_dir, load_remote

            await load_remote(tasks, url, key, refs, cache_dir(settings), pending=pending)
            if not options["queues"]:
                options["queues"] = tuple(tasks.queues())
        observe, metrics = worker_metrics(settings)
        await run_remote(url, key, tasks, {**options, **observe}, early, metrics)

    run(go())
