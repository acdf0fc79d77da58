"""``jobengine scheduler``: the scheduler alone (fires schedules into runs; no worker), until SIGTERM / SIGINT.

Run one per machine or several for availability: they elect a leader among themselves (a lease row on
SQLite, an advisory lock on PostgreSQL), and every tick fires once whatever happens to them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer
from rich.markup import escape

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, load_app, load_settings, rebind, run, started_when_reachable
from jobengine.core.schedules import ScheduleFilter
from jobengine.engine import Engine
from jobengine.services import SchedulerService


async def _scheduler(engine: Engine) -> None:
    from jobengine.cli.serve import on_signals, serve_until_signal

    console = output.stdout()  # stderr holds the log records only (one JSON object a line under json)
    with on_signals() as stop:
        async with started_when_reachable(engine, stop):
            service = SchedulerService(engine)

            async def ready() -> None:
                count = len(await engine.schedules.list(ScheduleFilter(limit=100_000)))
                database = escape(engine.settings.database)
                console.print(
                    f"[bold]jobengine scheduler[/bold] started · database [cyan]{database}[/cyan]"
                    f" · {count} schedule(s) · instance {escape(service.loop.instance)}"
                )

            await serve_until_signal([service], console, stop, ready)
    console.print("stopped")


def scheduler(
    app: Annotated[
        str | None,
        typer.Option("--app", help="An Engine (module:attribute) whose tasks and planners the runs use."),
    ] = None,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Run the scheduler: fire due schedules into runs, exactly once across every scheduler process."""
    if app is not None:
        engine = load_app(app)
        if db is not None:
            engine = rebind(engine, replace(engine.settings, database=db))
    else:
        engine = Engine.from_settings(load_settings(config, database=db))
    from jobengine.cli.logs import apply_settings

    apply_settings(engine.settings)
    run(_scheduler(engine))
