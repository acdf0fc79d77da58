"""``jobengine migrate``: apply the schema migrations a database lacks."""

from __future__ import annotations

import asyncio

from rich.markup import escape

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, load_settings
from jobengine.engine import Engine


def migrate(db: DbOption = None, config: ConfigOption = None) -> None:
    """Apply pending schema migrations to the database and print the versions applied."""
    settings = load_settings(config, database=db)

    async def go() -> list[int]:
        # Not open_engine(): its start() would apply the migrations without saying which.
        engine = Engine.from_settings(settings)
        try:
            return await engine.store.migrate()
        finally:
            await engine.close()

    applied = asyncio.run(go())
    console = output.stdout()
    if applied:
        console.print(f"applied migrations {', '.join(str(v) for v in applied)} to {escape(settings.database)}")
    else:
        console.print(f"{escape(settings.database)} is up to date: no migrations to apply")
