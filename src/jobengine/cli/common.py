"""What every command shares: settings from the config file with flags on top, opening an engine, loading
an ``--app``. This is the edge where the environment and the working directory are read."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import importlib
import inspect
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from jobengine.engine import Engine
from jobengine.engine.compose import open_store
from jobengine.errors import ConfigError, InvalidSchedule, StoreUnavailable
from jobengine.settings import Settings

ActorOption = Annotated[str | None, typer.Option(help="Who makes the change (audit) [default: cli:<login>].")]

T = TypeVar("T")


def load_settings(config: Path | None, **flags: Any) -> Settings:
    """``Settings.load(config)`` (``./jobengine.yaml`` and ``JOBENGINE_*``), then every flag that was given
    (not None) on top. Raises ConfigError naming the setting."""
    settings = Settings.load(config)
    given = {k: v for k, v in flags.items() if v is not None}
    return replace(settings, **given) if given else settings


def sqlite_file(database: str) -> Path | None:
    """The file a SQLite ``database`` setting names; None for the other backends."""
    if database == "memory" or "://" in database.removeprefix("sqlite://"):
        return None
    path = database.removeprefix("sqlite:///").removeprefix("sqlite://")
    return Path(path) if path else None


@asynccontextmanager
async def open_engine(settings: Settings, *, must_exist: bool = False) -> AsyncIterator[Engine]:
    """An engine on ``settings``, migrated (idempotent), closed on exit.

    ``must_exist``: refuse a SQLite file that does not exist yet, so a mistyped ``--db`` on a read command
    is an error instead of a new empty database.
    """
    path = sqlite_file(settings.database)
    if must_exist and path is not None and not path.exists():
        raise ConfigError(f"database: {path} does not exist (run `jobengine migrate --db {path}` to create it)")
    engine = Engine.from_settings(settings)
    try:
        await engine.start()
        yield engine
    finally:
        await engine.close()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def with_engine(
    config: Path | None, db: str | None, action: Callable[[Engine], Awaitable[T]], *, must_exist: bool = True
) -> T:
    """What ``action`` returns, run on an engine over ``--config`` with ``--db`` on top (``open_engine``).

    The settings load before anything is opened, so a bad config fails before the database is touched."""
    settings = load_settings(config, database=db)

    async def go() -> T:
        async with open_engine(settings, must_exist=must_exist) as engine:
            return await action(engine)

    return run(go())


def load_app(target: str) -> Engine:
    """Resolve ``module:attr`` to an Engine: the attribute itself, or what calling it returns.

    The working directory is put on ``sys.path`` first, as ``python -m`` would. Raises ConfigError (field
    ``app``) for a malformed target, a module that cannot be imported, a missing attribute or a value that
    is not an Engine; an exception raised by the user's module propagates with its own type.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"app: expected module:attribute (like myapp.jobs:engine), got {target!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigError(f"app: cannot import module {module_name!r} ({exc})") from None
        raise
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"app: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, Engine) and callable(obj):
        if inspect.iscoroutinefunction(obj):
            raise ConfigError(f"app: {target} is an async function; give an Engine or a plain function returning one")
        obj = obj()
    if not isinstance(obj, Engine):
        raise ConfigError(f"app: {target} is a {type(obj).__name__}, expected an Engine or a function returning one")
    return obj


def rebind(engine: Engine, settings: Settings) -> Engine:
    """An engine on other settings (another database) with the same tasks, planners, schedules declared in
    code, event bus, middleware and clock.

    Used when ``--db`` overrides the database of an ``--app`` engine: the app's engine never opened its
    store (``start()`` was not called), so it is simply replaced.
    """
    store = open_store(settings.database, settings)
    bound = Engine(store, settings, engine.clock, tasks=engine.tasks, bus=engine.bus, middleware=engine.middleware)
    bound._planners = engine._planners  # the app's planners (None: it registered none), read on first use
    for spec in engine.periodic.declared:
        bound.periodic.declare(spec)
    return bound


def app_engine(app: str, config: Path | None, db: str | None) -> Engine:
    """The ``--app`` engine (not started), on the settings a worker of that app would use: ``--config``'s
    (with ``--db`` on top) when given, else the app's own with ``--db`` replacing its database."""
    engine = load_app(app)
    if config is not None:
        return rebind(engine, load_settings(config, database=db))
    if db is not None:
        return rebind(engine, replace(engine.settings, database=db))
    return engine


#: How long a service command (worker, scheduler, serve) waits for a store it cannot reach as it starts.
START_WAIT = 60.0


@asynccontextmanager
async def started_when_reachable(engine: Engine, stop: asyncio.Event | None = None) -> AsyncIterator[Engine]:
    """``engine`` started (migrated), closed on exit; for the long-running commands. A database that cannot
    be reached yet (restarting, or started alongside in a deploy) is tried again with backoff for up to
    :data:`START_WAIT` seconds, saying so in the log, instead of ending the process at once; ``stop`` set
    (a signal) ends the wait. Other errors (a wrong password, a schema of a newer release) fail at once."""
    deadline = time.monotonic() + START_WAIT
    delay = 0.25
    retry = False
    while True:
        try:
            # The first attempt runs whatever comes: a signal during start-up is a clean stop once started.
            await (_start_unless_stopped(engine, stop) if retry else engine.start())
            break
        except StoreUnavailable as exc:
            if time.monotonic() + delay > deadline or (stop is not None and stop.is_set()):
                await engine.close()
                raise
            logging.getLogger("jobengine").warning("database unreachable (%s); trying again in %.1fs", exc, delay)
            if stop is None:
                await asyncio.sleep(delay)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop.wait()
            delay, retry = min(delay * 2, 5.0), True
    try:
        yield engine
    finally:
        await engine.close()


async def _start_unless_stopped(engine: Engine, stop: asyncio.Event | None) -> None:
    """``engine.start()``, given up when ``stop`` is set first: one attempt can wait long for a pool's
    connection to a server that is down."""
    if stop is None:
        await engine.start()
        return
    starting = asyncio.ensure_future(engine.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
    if starting.cancelled():
        raise StoreUnavailable("stopped while waiting for the database")
    starting.result()


@asynccontextmanager
async def started(engine: Engine) -> AsyncIterator[Engine]:
    """``engine`` started (migrated, idempotent), closed on exit."""
    try:
        await engine.start()
        yield engine
    finally:
        await engine.close()


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database: a SQLite file, sqlite:///path or 'memory' [default: the config's, else "
        ".jobengine/jobengine.db].",
        show_default=False,
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="YAML settings file [default: ./jobengine.yaml if it exists].", show_default=False),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table or text.")]


def actor_of(actor: str | None) -> str:
    if actor:
        return actor
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a container without passwd entry)
        return "cli"


def json_list(text: str | None, field: str) -> tuple[Any, ...] | None:
    """The JSON list an option gives (None: not given). Raises InvalidSchedule naming ``field``."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSchedule(field, f"not valid JSON ({exc})") from None
    if not isinstance(value, list):
        raise InvalidSchedule(field, "must be a JSON list")
    return tuple(value)
