"""``jobengine up`` (everything in one process, with a live view) and ``jobengine worker`` (a worker only).

Both stop the same way: the first SIGINT / SIGTERM stops claiming jobs and lets the ones in flight finish
within the grace period (the rest are released back to ``queued`` without spending an attempt); a second
one releases them at once. Either way the process exits 0, also when the signal comes while the process is
still starting (importing the app, loading packs): :class:`EarlySignals` holds it until the
:class:`Supervisor` takes over.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, load_app, load_settings, rebind, run
from jobengine.cli.live import LiveView
from jobengine.core.models import JobFilter, check_name
from jobengine.engine import Engine
from jobengine.errors import ConfigError, InvalidJob
from jobengine.examples import DEMO_SCHEDULE, build_engine, enqueue_demo, ensure_demo_schedule
from jobengine.services import RetentionService, SchedulerService, Service, WorkerService
from jobengine.settings import Settings


def setup_logging() -> None:
    handler = RichHandler(console=output.stderr(), show_path=False, rich_tracebacks=False, markup=False)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", datefmt="[%X]", handlers=[handler])
    logging.getLogger("jobengine").setLevel(logging.INFO)


class EarlySignals:
    """SIGINT / SIGTERM from the first line of a command until its :class:`Supervisor` takes them over.

    Without it, a signal that comes while the command imports the app or loads packs ends the process the
    default way (killed by SIGTERM, a traceback for SIGINT): a deployment stopping a worker that just started
    would see it fail. The first signal is kept for the Supervisor (which then stops at once, as nothing was
    claimed yet); a second one ends the process with exit code 0 there and then, as nothing is in flight."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @classmethod
    def install(cls) -> EarlySignals:
        """Take SIGINT / SIGTERM over (only the main thread may; elsewhere the handlers stay as they are)."""
        early = cls()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, early._on_signal)
        return early

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.names.append(signal.Signals(signum).name)
        if len(self.names) > 1:
            raise SystemExit(0)


class Supervisor:
    """Owns SIGINT / SIGTERM while entered and runs services until the first one (see :meth:`serve`).

    Enter it before anything slow (migrations, loading packs), so a SIGTERM during start-up is a clean stop
    too; ``worker`` may be given later (before :meth:`serve`). Signals that ``early`` caught before are
    handled as it is entered.
    """

    def __init__(self, worker: WorkerService | None, console: Console, early: EarlySignals | None = None) -> None:
        self.worker = worker
        self.console = console
        self.early = early
        self.signals = 0
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _on_signal(self, name: str) -> None:
        self.signals += 1
        if self.signals == 1:
            grace = f" within {self.worker.worker.options.grace_period:g}s" if self.worker is not None else ""
            self.console.print(
                f"[bold]{name}: stopping[/bold] — jobs in flight may finish{grace}; signal again to release them now"
            )
            self._stop.set()
        elif self.signals == 2:
            self.console.print(f"[bold]{name}: releasing jobs in flight now[/bold]")
            if self.worker is not None:
                self.worker.stop_now()

    async def __aenter__(self) -> Supervisor:
        self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._on_signal, sig.name)
        for name in self.early.names if self.early is not None else ():
            self._on_signal(name)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._loop is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def serve(self, services: Sequence[Service], ready: Callable[[], Awaitable[None]] | None = None) -> None:
        """Start ``services``, call ``ready()``, wait for a stop, then stop every started service (in
        reverse order) whatever happened. Re-raises why the worker stopped on its own, if it crashed."""
        if self.worker is not None and self.signals > 1:
            self.worker.stop_now()  # the second signal came before the worker was given
        started: list[Service] = []
        try:
            for service in services:
                await service.start()
                started.append(service)
            if ready is not None and not self.stopping:
                await ready()
            await self._wait()
        finally:
            while started:
                await started.pop().stop()

    async def _wait(self) -> None:
        assert self.worker is not None, "Supervisor.serve() without a worker"
        stop = asyncio.create_task(self._stop.wait())
        ended = asyncio.create_task(self.worker.wait())
        try:
            await asyncio.wait([stop, ended], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            ended.cancel()
        if ended.done() and not ended.cancelled():
            ended.result()


async def _up(settings: Settings, early: EarlySignals | None = None) -> None:
    console = output.stdout()
    engine = build_engine(settings)
    worker = WorkerService(engine.worker())
    async with Supervisor(worker, console, early) as supervisor, engine:
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
            if first_start:
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
) -> None:
    """Run everything in one process on SQLite: worker, retention and the example tasks, with a live view."""
    early = EarlySignals.install()
    settings = load_settings(config, database=db, worker_concurrency=concurrency)
    setup_logging()
    run(_up(settings, early))


def parse_queues(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    queues = tuple(q.strip() for q in value.split(",") if q.strip())
    if not queues:
        raise InvalidJob("queues", "give at least one queue name")
    for q in queues:
        check_name("queues", q)
    return queues


async def _worker(
    engine: Engine, overrides: dict[str, Any], packs: tuple[str, ...] = (), early: EarlySignals | None = None
) -> None:
    async with Supervisor(None, output.stderr(), early) as supervisor, engine:
        if packs:  # before the worker is built: its queues default to those of the registered tasks
            from jobengine.cli.packs import load_local

            await load_local(engine, packs)
            if not overrides.get("queues"):
                overrides = {**overrides, "queues": tuple(engine.tasks.queues())}
            overrides = {**overrides, "packs": packs}
        supervisor.worker = worker = WorkerService(engine.worker(**overrides))
        await supervisor.serve([worker])


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
    config: ConfigOption = None,
) -> None:
    """Run a worker (and the rescuer of expired leases) for the tasks of --app until SIGTERM / SIGINT.
    With --remote, the worker claims and reports over the HTTP API (--app may then be an SDK TaskApp).
    With --packs, it also downloads, verifies and runs those approved task packs (see `jobengine pack`).
    With --config, the settings come from that file (and ``JOBENGINE_*``), also for an --app engine."""
    from jobengine.packs.loader import parse_refs

    early = EarlySignals.install()
    refs = tuple(f"{n}@{r}" for n, r in parse_refs(packs)) if packs else None
    if app is None and not refs and not load_settings(config).worker_packs:
        raise ConfigError("app: give --app module:attribute, --packs name@version, or both")
    if remote is not None:
        _remote_worker(app, remote, key, db, queues, concurrency, lease, grace, refs, config, early)
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
    }
    given = {k: v for k, v in flags.items() if v is not None}
    settings = replace(engine.settings, **given)
    setup_logging()
    overrides = {
        "queues": settings.worker_queues,
        "concurrency": settings.worker_concurrency,
        "lease_seconds": settings.lease_seconds,
        "heartbeat_every": settings.heartbeat_every,
        "grace_period": settings.grace_period,
    }
    run(_worker(engine, overrides, refs if refs is not None else settings.worker_packs, early))


def _remote_worker(
    app: str | None, url: str, key: str | None, db: str | None, queues: str | None, concurrency: int | None,
    lease: float | None, grace: float | None, packs: tuple[str, ...] | None = None, config: Path | None = None,
    early: EarlySignals | None = None,
) -> None:  # fmt: skip
    from jobengine.cli.remote import load_tasks, run_remote

    if db is not None:
        raise ConfigError("db: a remote worker does not open a database (--remote reaches it through the API)")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"remote: expected an http:// or https:// URL, got {url!r}")
    flags = {"worker_queues": parse_queues(queues), "worker_concurrency": concurrency, "lease_seconds": lease,
             "grace_period": grace}  # fmt: skip
    settings = load_settings(config, **flags)
    from jobengine.tasks import TaskRegistry

    tasks = load_tasks(app) if app is not None else TaskRegistry()
    refs = packs if packs is not None else settings.worker_packs
    setup_logging()
    options = {
        "queues": settings.worker_queues, "concurrency": settings.worker_concurrency,
        "lease_seconds": settings.lease_seconds, "heartbeat_every": settings.heartbeat_every,
        "grace_period": settings.grace_period,
    }  # fmt: skip

    async def go() -> None:
        if refs:
            from jobengine.cli.packs import load_remote

            await load_remote(tasks, url, key, refs, settings.packs_cache_dir)
            if not options["queues"]:
                options["queues"] = tuple(tasks.queues())
        await run_remote(url, key, tasks, options, early)

    run(go())
