"""The approval page of a pending pack version, in a real browser against a real server (see conftest.py):
it says the version was never simulated and how to simulate it; its button starts a simulation on the
inputs of the last full run of the approved version; once the run ended the page shows the counts and the
changed items with both results side by side, and the reviewer approves what they saw."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jobengine.core.run_requests import RunRequest
from jobengine.core.runs import Run
from jobengine.packs.archive import build
from jobengine.packs.loader import RegistryFetcher, load_packs
from jobengine.worker.runtime import Worker
from support.packs import write_pack

from .conftest import Server
from .test_dashboard import login

pytestmark = pytest.mark.timeout(300)

MANIFEST = "name: scores\nversion: {version}\ntasks:\n  score:\n    entry: hello.tasks:score\n    queue: packs\n"
APPROVED = "def score(ctx):\n    return [i * 2 for i in ctx.payload['items']]\n"
PENDING = "def score(ctx):\n    return [i * 2 + (1 if i % 100 == 0 else 0) for i in ctx.payload['items']]\n"


def wait_ended(server: Server, run_id: str, timeout: float = 60.0) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        run: Run = server.call(server.engine.runs.get(run_id))
        if run.ended or time.monotonic() > deadline:
            assert run.ended, f"run {run_id} is {run.state.value}"
            return run
        time.sleep(0.05)


def test_the_approval_page_shows_the_simulations_diff(page: Any, server: Server, tmp_path: Path) -> None:
    engine = server.engine
    _, reviewer = server.call(engine.keys.create("default", ["jobs:read", "packs:read", "packs:approve"], "review"))
    for version, code in (("1.0.0", APPROVED), ("1.1.0", PENDING)):
        folder = write_pack(tmp_path, "scores", version, code=code, manifest=MANIFEST.format(version=version))
        server.call(engine.packs.upload(build(folder).data, "key:dev"))
    server.call(engine.packs.approve("scores", "1.0.0", "key:reviewer"))
    server.call(load_packs(engine.tasks, RegistryFetcher(engine.packs, pending=True), "scores@1.0.0,scores@1.1.0",
                           tmp_path / "cache"))  # fmt: skip

    async def start_worker() -> Worker:
        worker = engine.worker(queues=("packs",), concurrency=2)
        asyncio.get_running_loop().create_task(worker.run())
        return worker

    worker: Worker = server.call(start_worker())
    try:
        full = server.call(engine.runs.start(RunRequest(task="scores@1.0.0:score", items=tuple(range(300)),
                                                        segment_size=50)))  # fmt: skip
        base = wait_ended(server, full.id)

        login(page, server, key=reviewer, target="/packs/scores/versions/1.1.0")
        assert "jobengine pack simulate scores@1.1.0" in page.locator("#no-simulation").inner_text()
        page.get_by_role("button", name="Simulate 1.1.0").click()
        page.get_by_role("status").get_by_text("simulate run").wait_for()
        sim_id = server.call(engine.packs.simulations("scores", "1.1.0"))[-1]
        wait_ended(server, sim_id)

        page.reload()
        hint = page.locator("#simulation-hint").inner_text()
        assert sim_id in hint and base.id in hint
        counts = {c: page.locator(f"#simulation-counts [data-change={c}]").inner_text() for c in ("same", "changed")}
        assert counts == {"same": "297", "changed": "3"}
        rows = page.locator("#simulation-diff tbody tr")
        assert rows.count() == 3
        cells = [[td.strip() for td in rows.nth(n).locator("td").all_inner_texts()] for n in range(3)]
        assert cells == [["0", "changed", "0", "1"], ["100", "changed", "200", "201"],
                         ["200", "changed", "400", "401"]]  # fmt: skip
        assert "3 changed, 0 new, 0 gone of 300 items" in page.locator("#approve-simulation").inner_text()
        page.get_by_role("button", name="Approve 1.1.0").click()
        page.get_by_role("status").get_by_text("scores@1.1.0 is now approved").wait_for()
        assert page.locator("#simulation-counts [data-change=changed]").inner_text() == "3"  # kept with the approval
        assert page.console_errors == []
    finally:
        server.loop.call_soon_threadsafe(worker.stop)
