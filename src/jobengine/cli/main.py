"""The ``jobengine`` command: registers the commands and is the edge where every error becomes one line.

Exit codes: 0 success; 2 a usage or validation error (bad flag, bad payload, bad setting, unknown task or
dependency, a bad schedule, a schedule name already taken); 1 anything else (job not found, an action the
job's state does not allow, the database failing); 130 interrupted. No traceback reaches the user unless
``JOBENGINE_DEBUG=1``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated

import typer
import typer.main

from jobengine.cli import output
from jobengine.cli.lazy import LazyCommand, LazyGroup
from jobengine.cli.logs import configure_from
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

# Every command, in the order `jobengine --help` lists them, with the first sentence of its help. A command
# is imported only when it runs, so a command's start-up pays for its own imports only.
COMMANDS = (
    LazyCommand(
        "up",
        "jobengine.cli.run:up",
        "Run everything in one process: worker, scheduler, retention, the API and dashboard, with a live view; "
        "the example tasks on SQLite, or your own with --app.",
    ),
    LazyCommand(
        "worker",
        "jobengine.cli.run:worker",
        "Run a worker (and the rescuer of expired leases) for the tasks of --app until SIGTERM / SIGINT.",
    ),
    LazyCommand(
        "scheduler",
        "jobengine.cli.scheduler:scheduler",
        "Run the scheduler: fire due schedules into runs, exactly once across every scheduler process.",
    ),
    LazyCommand(
        "serve",
        "jobengine.cli.serve:serve",
        "Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) until SIGTERM / SIGINT.",
    ),
    LazyCommand("enqueue", "jobengine.cli.jobs:enqueue", "Store a job; print its id (or the whole job with --json)."),
    LazyCommand(
        "workers",
        "jobengine.cli.jobs:workers",
        "List the live workers: host, pid, queues, tasks, packs, version, jobs in hand, when seen last.",
    ),
    LazyCommand(
        "migrate",
        "jobengine.cli.migrate:migrate",
        "Apply pending schema migrations to the database and print the versions applied.",
    ),
    LazyCommand(
        "health",
        "jobengine.cli.health:health",
        "Check the store and both queue transports (planner, runner); exit 1 if any is down.",
    ),
    LazyCommand("schedules", "jobengine.cli.schedules:schedules_app", "Create and manage CRON and interval schedules."),
    LazyCommand(
        "runs", "jobengine.cli.runs:runs_app", "Runs: start one over items; list, show, cancel, retry, replay, diff."
    ),
    LazyCommand("graphs", "jobengine.cli.graphs:graphs_app", "Graphs of jobs: list, show, cancel, retry."),
    LazyCommand("signatures", "jobengine.cli.runs:signatures_app", "Failure signatures: the same bug grouped."),
    LazyCommand("keys", "jobengine.cli.keys:keys_app", "Manage API keys of the HTTP API."),
    LazyCommand("pack", "jobengine.cli.packs:pack_app", "Build task packs and manage the pack registry."),
    LazyCommand("webhooks", "jobengine.cli.webhooks:webhooks_app", "Manage webhook endpoints and deliveries."),
    LazyCommand("secrets", "jobengine.cli.secrets:secrets_app", "Manage the keys that encrypt secrets at rest."),
    LazyCommand("flow", "jobengine.cli.flow:flow_app", "Flow control: rate, concurrency and depth limits of queues."),
    LazyCommand("jobs", "jobengine.cli.jobs:jobs_app", "Inspect and manage stored jobs."),
)


class _RootGroup(LazyGroup):
    COMMANDS = COMMANDS


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
    """A new command tree (nothing is registered at import time, so tests can build their own); its
    commands (:data:`COMMANDS`) are imported when one runs."""
    app = typer.Typer(
        name="jobengine",
        help="A durable job engine: enqueue jobs, run workers, inspect and manage jobs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        cls=_RootGroup,
    )
    app.callback()(_root)
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
