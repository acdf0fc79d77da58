"""``jobengine serve``: the HTTP API (REST, SSE, the worker protocol) with the rescuer of expired leases
and the pruning of idempotency records and old events, until SIGTERM / SIGINT.

A server bound to an address other than loopback refuses to start while no API key exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, load_app, load_settings, rebind, run, started_when_reachable
from jobengine.engine import Engine
from jobengine.services import Service
from jobengine.settings import Settings


@contextlib.contextmanager
def on_signals() -> Iterator[asyncio.Event]:
    """An event that SIGINT / SIGTERM set while inside. A service command enters it before it waits for its
    database, so a stop during that wait ends the process as one after it does, not by the signal's
    default action."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def serve_until_signal(
    services: Sequence[Service],
    console: Console,
    stop: asyncio.Event,
    ready: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Start ``services`` in order, call ``ready()``, wait for ``stop`` (:func:`on_signals`), stop them in
    reverse order."""
    started: list[Service] = []
    try:
        for service in services:
            await service.start()
            started.append(service)
        if ready is not None:
            await ready()
        await stop.wait()
        console.print("[bold]stopping[/bold]")
    finally:
        while started:
            await started.pop().stop()


async def _serve(engine: Engine, settings: Settings, host: str, port: int) -> None:
    from jobengine.http.server import ApiMaintenance, ApiService  # FastAPI: imported by the commands that serve

    console = output.stdout()
    with on_signals() as stop:
        async with started_when_reachable(engine, stop):
            api = ApiService(engine, settings, host=host, port=port)
            await api.check_keys()
            from jobengine.webhooks.dispatcher import WebhookDispatcher

            services: list[Service] = [ApiMaintenance(engine), api, WebhookDispatcher(engine)]

            async def ready() -> None:
                # The app and the engine are built: what exists now lives as long as the process, so the
                # collector's full passes need not walk it on every few hundred requests.
                from jobengine.worker.runtime import tune_gc

                tune_gc()
                console.print(f"[bold]jobengine serve[/bold] · {api.url} (dashboard; docs {api.url}/docs) · database "
                              f"[cyan]{escape(settings.database)}[/cyan]")  # fmt: skip
                if not await engine.keys.any_active():
                    console.print("[yellow]no API key exists yet: every request gets 401; create one with "
                                  "`jobengine keys create`[/yellow]")  # fmt: skip

            await serve_until_signal(services, console, stop, ready)
    console.print("stopped")


def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on [default: api_host, 127.0.0.1].")] = None,
    port: Annotated[int | None, typer.Option(help="Port [default: api_port, 8080].", min=0, max=65535)] = None,
    app: Annotated[
        str | None, typer.Option("--app", help="An Engine (module:attribute) whose task defaults jobs get.")
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) until SIGTERM / SIGINT."""
    settings = load_settings(config, database=db, api_host=host, api_port=port)
    engine = rebind(load_app(app), settings) if app is not None else Engine.from_settings(settings)
    from jobengine.cli.logs import apply_settings

    apply_settings(settings)
    run(_serve(engine, settings, settings.api_host, settings.api_port))


def dev_key_file(settings: Settings) -> Path | None:
    """Where ``jobengine up`` keeps its dev key: beside the SQLite file (None for other databases)."""
    from jobengine.cli.common import sqlite_file

    path = sqlite_file(settings.database)
    return path.with_name(path.name + ".devkey") if path is not None else None


async def dev_key(engine: Engine, settings: Settings) -> str:
    """The key ``jobengine up`` prints: the one kept in the dev key file if it still works, else a new
    admin key of tenant ``default`` (written there, readable by the owner only)."""
    path = dev_key_file(settings)
    if path is not None and path.exists():
        text = path.read_text().strip()
        if await engine.keys.authenticate(text) is not None:
            return text
    _, text = await engine.keys.create("default", ["admin"], "dev key (jobengine up)")
    if path is not None:
        # Created owner-only before anything is written to it (a file left by an earlier start keeps no
        # wider mode: fchmod).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)
    return text
