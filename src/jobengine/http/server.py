"""Serving the app: :class:`ApiService` (uvicorn as a Service of ``jobengine serve`` / ``up``) and
:class:`ApiMaintenance` (what a server must run even without local workers: rescuing the jobs of remote
workers whose lease expired, pruning idempotency records, sessions, old events and inbound event ids)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator

import uvicorn
from fastapi import FastAPI

from jobengine.engine import Engine
from jobengine.errors import ConfigError
from jobengine.http.app import create_app
from jobengine.http.context import ApiContext
from jobengine.settings import Settings

log = logging.getLogger("jobengine.http")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The command owns SIGINT / SIGTERM and stops this service in its turn.
        yield


class ApiService:
    """The HTTP API on ``host:port`` (port 0: any free port; see :attr:`port`). ``start()`` returns once the
    server accepts connections; ``stop()`` ends open streams and long-polls, lets requests in progress
    finish (a few seconds at most) and returns when the server is down."""

    name = "api"

    def __init__(
        self, engine: Engine, settings: Settings, *, host: str | None = None, port: int | None = None,
        app: FastAPI | None = None,
    ) -> None:  # fmt: skip
        self.engine = engine
        self.app = app or create_app(engine, settings)
        self.host = host or settings.api_host
        self.port = settings.api_port if port is None else port
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def check_keys(self) -> None:
        """A server reachable from other hosts refuses to start without an API key to check requests against."""
        if not is_loopback(self.host) and not await self.engine.keys.any_active():
            raise ConfigError(
                f"api_host: {self.host} is not a loopback address and no API key exists; create one first "
                "(jobengine keys create --tenant NAME --scope admin), or listen on 127.0.0.1"
            )

    async def start(self) -> None:
        if self._task is not None:
            return
        await self.check_keys()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP, not 0: accepted sockets inherit the protocol, and asyncio sets TCP_NODELAY only on
        # sockets that say they are TCP. Without it, a response written as headers then body waits for the
        # client's delayed ACK (Nagle) on every request of a kept-alive connection.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(f"api_port: cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        self.port = sock.getsockname()[1]
        # log_config=None: uvicorn's records go to the process's own handlers (the command line's text or JSON
        # lines) rather than to handlers and a format of uvicorn's.
        config = uvicorn.Config(
            self.app, lifespan="on", log_level="warning", access_log=False, timeout_graceful_shutdown=3,
            log_config=None,
        )  # fmt: skip
        self._server = server = _Server(config)

        async def serve() -> None:
            try:
                await server.serve(sockets=[sock])
            except SystemExit as exc:  # uvicorn exits the process when the app's startup fails
                raise ConfigError(f"api: the server failed to start (exit status {exc.code})") from None

        self._task = task = asyncio.create_task(serve(), name="jobengine-api")
        while not server.started:
            if task.done():
                self._task = None
                task.result()  # raises what stopped it
                raise ConfigError("api: the server stopped while starting")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        server, task, self._task = self._server, self._task, None
        if server is None or task is None:
            return
        ctx = self.app.state.jobengine
        if isinstance(ctx, ApiContext):
            ctx.closing = True
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


class ApiMaintenance:
    """Every ``rescue_interval``: jobs whose lease expired run again (remote workers do not rescue, so the
    server does; the rescue is fenced, so running it beside local workers is safe). Every
    ``retention_interval``: expired idempotency records, ended dashboard sessions, events past
    ``event_retention`` and the ids of inbound events past ``inbound_replay_window`` are deleted.
    Failure policy: a failed pass is logged and tried again next interval."""

    name = "api-maintenance"

    def __init__(self, engine: Engine, *, rescue: bool = True) -> None:
        self.engine = engine
        self.rescue = rescue  # False beside a local worker, which runs its own rescuer
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        if not self._tasks:
            s = self.engine.settings
            self._tasks = [
                asyncio.create_task(self._every(s.retention_interval, self._prune), name="jobengine-api-prune")
            ]
            if self.rescue:
                self._tasks.append(
                    asyncio.create_task(self._every(s.rescue_interval, self._rescue), name="jobengine-rescue")
                )

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _rescue(self) -> None:
        changed = await self.engine.transitions.rescue_jobs()
        if changed.jobs:
            log.warning("rescued %d jobs whose lease expired", len(changed.jobs))

    async def _prune(self) -> None:
        await self.engine.requests.prune()
        await self.engine.keys.prune_sessions()
        await self.engine.event_log.prune()
        await self.engine.webhooks.prune_inbound()

    @staticmethod
    async def _every(interval: float, fn: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await fn()
            except Exception:
                log.exception("api maintenance failed; trying again in %gs", interval)
            await asyncio.sleep(interval)
