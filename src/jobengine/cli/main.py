"""The ``jobengine`` command: registers the commands and is the edge where every error becomes one line.

Exit codes: 0 success; 2 a usage or validation error (bad flag, bad payload, bad setting, unknown task or
dependency, a bad schedule, a schedule name already taken); 1 anything else (job not found, an action the
job's state does not allow, the database failing); 130 interrupted. No traceback reaches the user unless
``JOBENGINE_DEBUG=1``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.markup import escape

from jobengine.cli import health, jobs, output, run, scheduler, serve
from jobengine.cli.common import ConfigOption, DbOption, load_settings
from jobengine.cli.flow import flow_app
from jobengine.cli.graphs import graphs_app
from jobengine.cli.keys import keys_app
from jobengine.cli.logs import configure_from
from jobengine.cli.packs import pack_app
from jobengine.cli.runs import runs_app, signatures_app
from jobengine.cli.schedules import schedules_app
from jobengine.cli.secrets import secrets_app
from jobengine.cli.webhooks import webhooks_app
from jobengine.engine import Engine
from jobengine.errors import (
    AlreadyExists,
    AmbiguousId,
    ConfigError,
    IdempotencyConflict,
    InvalidJob,
    JobEngineError,
    UnknownDependency,
    UnknownTask,
)
from jobengine.version import __version__

USAGE_ERRORS = (
    ConfigError, InvalidJob, UnknownTask, UnknownDependency, IdempotencyConflict, AlreadyExists, AmbiguousId,
)  # fmt: skip


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


def _print_version(value: bool) -> None:
    if value:
        output.stdout().print(f"jobengine {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            help="debug, info, warning, error or critical [default: log_level, info].",
            show_default=False,
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="text, or json: one object per line [default: log_format, text].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """A durable job engine: enqueue jobs, run workers, inspect and manage jobs."""
    configure_from(log_level, log_format, os.environ)


def build_app() -> typer.Typer:
    """A new command tree (nothing is registered at import time, so tests can build their own)."""
    app = typer.Typer(
        name="jobengine",
        help="A durable job engine: enqueue jobs, run workers, inspect and manage jobs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    app.command()(run.up)
    app.command()(run.worker)
    app.command()(scheduler.scheduler)
    app.add_typer(schedules_app)
    app.add_typer(runs_app)
    app.add_typer(graphs_app)
    app.add_typer(signatures_app)
    app.command()(serve.serve)
    app.add_typer(keys_app)
    app.add_typer(pack_app)
    app.add_typer(webhooks_app)
    app.add_typer(secrets_app)
    app.add_typer(flow_app)
    app.command()(jobs.enqueue)
    app.add_typer(jobs.jobs_app)
    app.command()(jobs.workers)
    app.command()(migrate)
    app.command()(health.health)
    return app


def _command_line_error(exc: Exception) -> tuple[str, int] | None:
    """Message and exit code of an error of the command line parser itself (unknown option, bad value,
    missing argument). Matched by shape, because typer raises its vendored click's exceptions where older
    versions raise click's own."""
    exit_code = getattr(exc, "exit_code", None)
    format_message = getattr(exc, "format_message", None)
    if not isinstance(exit_code, int) or not callable(format_message):
        return None
    message = str(format_message())
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None)
    if exit_code == 2 and isinstance(path, str):
        message += f" (see `{path} --help`)"
    return message, exit_code


def _exit_code(exc: BaseException) -> int:
    return 2 if isinstance(exc, USAGE_ERRORS) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns (and, as the console script, exits with) the exit code."""
    command = typer.main.get_command(build_app())
    try:
        result = command.main(list(argv) if argv is not None else None, prog_name="jobengine", standalone_mode=False)
    except typer.Abort:
        return 130
    except JobEngineError as exc:
        output.print_error(str(exc))
        return _exit_code(exc)
    except sqlite3.Error as exc:
        output.print_error(f"database: {exc}")
        return 1
    except OSError as exc:
        output.print_error(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}")
        return 1
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `jobengine` or `jobengine jobs`: the help
            sys.stdout.write(str(exc) + "\n")
            return 0
        usage = _command_line_error(exc)
        if usage is not None:
            output.print_error(usage[0])
            return usage[1]
        if os.environ.get("JOBENGINE_DEBUG") == "1":
            traceback.print_exc()
        output.print_error(f"unexpected {type(exc).__name__}: {exc} (JOBENGINE_DEBUG=1 shows the traceback)")
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
