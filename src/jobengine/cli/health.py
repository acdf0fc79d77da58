"""``jobengine health``: one round trip to the store and to both queue transports (planner and runner).

Prints one line per part (``--json``: a list of objects, the shape ``/healthz`` will serve) and exits 0
when every part answered, 1 otherwise. It never starts anything: no migration, no relay, no worker.
"""

from __future__ import annotations

import time

import typer
from rich.markup import escape
from rich.table import Table

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, JsonFlag, load_settings, run, sqlite_file
from jobengine.engine import Engine
from jobengine.ports.transport import Health
from jobengine.settings import Settings


async def check(settings: Settings) -> list[Health]:
    """The store's health and each transport's (never raises for a part that is down)."""
    path = sqlite_file(settings.database)
    if path is not None and not path.exists():
        return [Health("store", "-", False, 0.0, f"{path} does not exist (run `jobengine migrate --db {path}`)")]
    engine = Engine.from_settings(settings)
    try:
        started = time.perf_counter()
        try:
            await engine.store.next_run_at(["default"])
            store = Health("store", "-", True, 1000 * (time.perf_counter() - started), settings.database)
        except Exception as exc:
            store = Health("store", "-", False, 1000 * (time.perf_counter() - started), str(exc))
        return [store, *await engine.transports.health()]
    finally:
        await engine.close()


def health(db: DbOption = None, config: ConfigOption = None, json: JsonFlag = False) -> None:
    """Check the store and both queue transports (planner, runner); exit 1 if any is down."""
    settings = load_settings(config, database=db)
    results = run(check(settings))
    if json:
        output.print_json([h.to_json() for h in results])
    else:
        table = Table(box=None, pad_edge=False)
        for column in ("part", "queue", "status", "latency", "detail"):
            table.add_column(column)
        for h in results:
            status = "[green]ok[/green]" if h.ok else "[bold red]down[/bold red]"
            table.add_row(h.transport, h.queue, status, f"{h.latency_ms:.1f} ms", escape(h.detail))
        output.stdout().print(table)
    if not all(h.ok for h in results):
        raise typer.Exit(1)
