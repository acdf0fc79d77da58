"""Browser tests of the dashboard: Playwright for Python driving Debian's ``chromium`` (never a downloaded
browser) against a real server — the HTTP API service ``jobengine serve`` runs (uvicorn on a free port),
with a worker, in a thread of its own on a SQLite file of the module's own.

Without chromium (or the playwright package) the tests skip locally with the reason, and fail under
``CI=true``, like a missing service (``support/services.unavailable``). ``make test`` installs chromium.

The server's tasks are driven by the tests through :class:`Controls`: ``steps`` is a three-phase task
whose progress moves only when the test says so; ``flaky`` fails while ``controls.flaky_fails`` is set;
``gate`` (payload ``{"gate": name}``) runs until the test opens its gate (``controls.open(name)``);
``score`` is a run request's task (results per item; a simulate run's differ on every tenth item).
Every test saves a screenshot in its output folder: ``test-results/<test name>/`` under the repository.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobengine.engine import Engine
from jobengine.settings import Settings
from jobengine.tasks import PhaseSpec
from support.services import unavailable

CHROMIUM = os.environ.get("JOBENGINE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
RESULTS = Path(__file__).resolve().parents[2] / "test-results"
PHASES = ("download", "transform", "upload")


@dataclass
class Controls:
    """What the tests tell the server's tasks, per job id."""

    commands: dict[str, queue.Queue[Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    flaky_fails: threading.Event = field(default_factory=threading.Event)
    gates: dict[str, threading.Event] = field(default_factory=dict)

    def channel(self, job_id: str) -> queue.Queue[Any]:
        with self.lock:
            return self.commands.setdefault(job_id, queue.Queue())

    def progress(self, job_id: str, fraction: float) -> None:
        self.channel(job_id).put(fraction)

    def next_phase(self, job_id: str) -> None:
        self.channel(job_id).put("next")

    def gate(self, name: str) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def open(self, *names: str) -> None:
        for name in names:
            self.gate(name).set()


@dataclass
class Server:
    url: str
    key: str
    other_key: str  # an admin key of another tenant
    engine: Engine
    controls: Controls
    loop: asyncio.AbstractEventLoop

    def api(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key or self.key}"}, timeout=60)

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (to prepare data through the engine facade)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)


def _phase(controls: Controls) -> Any:
    def run(ctx: Any) -> str:
        channel = controls.channel(ctx.job_id)
        while True:
            command = channel.get(timeout=20)  # a test that never finishes the job fails it (max_attempts 1)
            if command == "next":
                return f"{ctx.phase} done"
            ctx.progress(float(command), f"{ctx.phase}: {float(command):.0%}")

    return run


def _gate(controls: Controls) -> Any:
    def run(ctx: Any, gate: str) -> str:
        if not controls.gate(gate).wait(timeout=60):  # a test that never opens it fails the job
            raise RuntimeError(f"gate {gate} was not opened")
        return gate

    return run


def _score(ctx: Any) -> list[int]:
    """A run request's task: twice each item, one per item in order; a simulate run scores every tenth
    item one higher, so its diff against a full run has changed items."""
    bump = ctx.mode == "simulate"
    return [2 * i + (1 if bump and i % 10 == 0 else 0) for i in ctx.payload["items"]]


def _flaky(controls: Controls) -> Any:
    def run(ctx: Any) -> str:
        if controls.flaky_fails.is_set():
            raise RuntimeError(f"flaky failure of {ctx.job_id}")
        return "ok"

    return run


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("dashboard")
    settings = Settings(
        database=str(folder / "dash.db"), api_port=0, lease_seconds=5.0, heartbeat_interval=0.1,
        poll_interval=0.2, dashboard_refresh_seconds=0.2, sse_poll_interval=0.2, sse_keepalive=1.0,
        grace_period=0.5, api_key_cache_seconds=0.0,
    )  # fmt: skip
    controls = Controls()
    ready: queue.Queue[Server | BaseException] = queue.Queue()
    stop = threading.Event()

    async def main() -> None:
        from jobengine.http.server import ApiMaintenance, ApiService

        engine = Engine.from_settings(settings)
        phases = [PhaseSpec(name, _phase(controls), False) for name in PHASES]
        engine.add_task("steps", phases=phases, max_attempts=1, queue="work")
        engine.add_task("flaky", _flaky(controls), max_attempts=1, queue="work")
        engine.add_task("gate", _gate(controls), max_attempts=1, queue="work")
        engine.add_task("score", _score, max_attempts=1, queue="work")
        async with engine:
            _, key = await engine.keys.create("default", ["admin"], "browser tests")
            _, other = await engine.keys.create("globex", ["admin"], "another tenant")
            api = ApiService(engine, settings, host="127.0.0.1", port=0)
            maintenance = ApiMaintenance(engine, rescue=False)
            worker = engine.worker(queues=("work",))
            await maintenance.start()
            await api.start()
            runner = asyncio.create_task(worker.run())
            url = f"http://localhost:{api.port}"
            ready.put(Server(url, key, other, engine, controls, asyncio.get_running_loop()))
            try:
                await asyncio.to_thread(stop.wait)
            finally:
                worker.stop()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(runner, 5)
                await api.stop()
                await maintenance.stop()

    def thread() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            ready.put(exc)

    t = threading.Thread(target=thread, name="dashboard-server", daemon=True)
    t.start()
    got = ready.get(timeout=120)
    if isinstance(got, BaseException):
        raise got
    yield got
    stop.set()
    t.join(timeout=15)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        unavailable(f"chromium is not installed at {CHROMIUM} (make test installs Debian's chromium package)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (make venv installs the dev extra)")
    with sync_playwright() as pw:
        path = CHROMIUM if os.path.exists(CHROMIUM) else str(shutil.which("chromium"))
        b = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    folder = RESULTS / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser: Any, server: Server, output_dir: Path) -> Iterator[Any]:
    """A fresh browser context (no cookies) on the server; a screenshot is saved when the test ends."""
    context = browser.new_context(base_url=server.url, viewport={"width": 1100, "height": 900})
    context.set_default_timeout(8000)
    p = context.new_page()
    errors: list[str] = []
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    p.console_errors = errors  # type: ignore[attr-defined]
    try:
        yield p
    finally:
        with contextlib.suppress(Exception):
            p.screenshot(path=str(output_dir / "screenshot.png"), full_page=True)
        context.close()
