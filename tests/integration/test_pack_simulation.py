"""A pending pack version simulated on the inputs of the last run of the approved version (SQLite, in-process
workers, a real webhook receiver): the diff names exactly the items whose result the new version changes,
no webhook is delivered for the simulation and the stream's cursor does not move."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jobengine.cli.main import main
from jobengine.cli.packs import load_local, load_remote
from jobengine.core.run_requests import RunMode, RunRequest
from jobengine.core.runs import Run, RunState
from jobengine.engine import Engine
from jobengine.errors import ConfigError, IllegalState, InvalidJob, NotFound
from jobengine.http.server import ApiService
from jobengine.packs.archive import build
from jobengine.packs.errors import PackConflict
from jobengine.packs.loader import RegistryFetcher, load_packs
from jobengine.secretbox import new_key
from jobengine.settings import Settings
from jobengine.tasks import TaskRegistry
from jobengine.webhooks.dispatcher import WebhookDispatcher
from tests.support import simulations
from tests.support.packs import write_pack
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.timeout(300)

MANIFEST = """name: scores
version: {version}
description: Scores accounts
tasks:
  score:
    entry: hello.tasks:score
    queue: packs
"""
#: The approved version doubles each item; the new one adds 1 to every hundredth (10 of 1,000 items), and
#: refuses to run for real: a pending version's code only ever runs in a simulation.
APPROVED = """
def score(ctx):
    return [i * 2 for i in ctx.payload["items"]]
"""
PENDING = """
def score(ctx):
    if ctx.mode != "simulate":
        raise RuntimeError("a pending version ran for real")
    return [i * 2 + (1 if i % 100 == 0 else 0) for i in ctx.payload["items"]]
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    settings = Settings(database=str(tmp_path / "jobs.db"), poll_interval=0.05, packs_cache_dir=str(tmp_path / "c"),
                        webhook_allow_hosts=("127.0.0.1/32",), secret_keys=(new_key(),))  # fmt: skip
    async with Engine.from_settings(settings) as e:
        yield e


async def publish(engine: Engine, root: Path, version: str, code: str, *, approve: bool) -> None:
    folder = write_pack(root / version, "scores", version, code=code, manifest=MANIFEST.format(version=version))
    v, _ = await engine.packs.upload(build(folder).data, "key:dev")
    if approve:
        await engine.packs.approve(v.name, v.version, "key:reviewer")
    fetcher = RegistryFetcher(engine.packs, pending=not approve)
    await load_packs(engine.tasks, fetcher, f"scores@{version}", engine.settings.packs_cache_dir or "")


async def run_to_end(engine: Engine, run: Run) -> Run:
    return await simulations.run_to_end(engine, run, queues=("packs",))


async def test_a_pending_version_is_simulated_on_the_last_runs_inputs(
    engine: Engine, tmp_path: Path, receiver: Receiver
) -> None:
    await publish(engine, tmp_path, "1.0.0", APPROVED, approve=True)
    endpoint = await engine.webhooks.create_endpoint("default", receiver.url)
    hooks = WebhookDispatcher(engine)
    await hooks.start()
    try:
        await simulate_and_check(engine, tmp_path, receiver, hooks, endpoint.id)
    finally:
        await hooks.stop()


async def simulate_and_check(
    engine: Engine, tmp_path: Path, receiver: Receiver, hooks: WebhookDispatcher, endpoint: str
) -> None:
    full = simulations.full_request("scores@stable:score", environment={"r": "eu"})
    base = await run_to_end(engine, await engine.runs.start(full))
    assert base.state is RunState.COMPLETED and base.summary.succeeded == 10
    cursor = await engine.store.scheduling().get_cursor("default", "scores@*:score default")
    assert cursor is not None and (cursor.value, cursor.run_id) == (999, base.id)
    await hooks.run_once()  # fans the run's events out
    delivered = len(await engine.webhooks.list_deliveries("default", endpoint, limit=1000))
    assert delivered > 0
    async with asyncio.timeout(60):
        while len(receiver.requests) < delivered:  # noqa: ASYNC110 (a thread fills it)
            await asyncio.sleep(0.05)
    received = len(receiver.requests)

    await publish(engine, tmp_path, "1.1.0", PENDING, approve=False)
    review = await engine.pack_runs.review("scores", "1.1.0")
    assert review.run is None and "jobengine pack simulate scores@1.1.0" in review.hint
    sim = await engine.pack_runs.simulate("scores", "1.1.0", actor="key:reviewer")
    jobs = await engine.runs.jobs(sim.id)
    assert {j.task for j in jobs} == {f"scores@{(await engine.packs.get('scores', '1.1.0')).sha256}:score"}
    assert {j.payload["mode"] for j in jobs} == {"simulate"} and jobs[0].payload["environment"] == {"r": "eu"}
    assert (await run_to_end(engine, sim)).state is RunState.COMPLETED

    review = await engine.pack_runs.review("scores", "1.1.0")
    assert review.run is not None and review.run.id == sim.id and review.diff is not None
    simulations.check_diff(review.diff, base)
    assert [e["item"] for e in review.changed()] == simulations.CHANGED
    assert "990 same, 10 changed, 0 new, 0 gone" in review.hint
    assert [e.type for e in await engine.packs.history("scores", "1.1.0")] == ["pack.uploaded", "pack.simulated"]

    cursor = await engine.store.scheduling().get_cursor("default", "scores@*:score default")
    assert cursor is not None and (cursor.value, cursor.run_id) == (999, base.id)  # not moved
    await hooks.run_once()
    await asyncio.sleep(0.5)  # a delivery on its way would reach the receiver by now
    assert len(await engine.webhooks.list_deliveries("default", endpoint, limit=1000)) == delivered
    assert len(receiver.requests) == received


async def test_what_cannot_be_simulated_is_refused_naming_why(engine: Engine, tmp_path: Path) -> None:
    await publish(engine, tmp_path, "1.0.0", APPROVED, approve=True)
    await publish(engine, tmp_path, "1.1.0", PENDING, approve=False)
    with pytest.raises(IllegalState, match="no completed full run"):
        await engine.pack_runs.simulate("scores", "1.1.0")
    with pytest.raises(PackConflict, match="approved; only a version awaiting approval"):
        await engine.pack_runs.simulate("scores", "1.0.0")
    with pytest.raises(InvalidJob) as info:
        await engine.pack_runs.simulate("scores", "1.1.0", task="nope")
    assert info.value.field == "task"
    with pytest.raises(NotFound):
        await engine.pack_runs.review("scores", "9.9.9")
    # A pending version runs only as a simulation: a full run or an enqueue naming it is refused.
    with pytest.raises(InvalidJob, match="pending_approval"):
        await engine.runs.start(RunRequest(task="scores@1.1.0:score", items=(1, 2)))
    with pytest.raises(InvalidJob, match="pending_approval"):
        await engine.enqueue("scores@1.1.0:score", {"items": [1]})
    sim = await engine.runs.start(RunRequest(task="scores@1.1.0:score", items=(1, 2), mode=RunMode.SIMULATE))
    assert sim.schedule_id == "scores@*:score default"
    # A worker loads a pending version only when told to.
    with pytest.raises(PackConflict, match="pending_approval"):
        await load_local(engine, ("scores@1.1.0",))
    await load_local(engine, ("scores@1.1.0",), pending=True)


async def test_a_remote_worker_with_pending_packs_runs_the_simulation(engine: Engine, tmp_path: Path) -> None:
    await publish(engine, tmp_path, "1.0.0", APPROVED, approve=True)
    full = RunRequest(task="scores@1.0.0:score", items=tuple(range(200)), segment_size=50)
    await run_to_end(engine, await engine.runs.start(full))
    await publish(engine, tmp_path, "1.1.0", PENDING, approve=False)
    sim = await engine.pack_runs.simulate("scores", "1.1.0", actor="key:reviewer")
    _, reader = await engine.keys.create("default", ["worker", "packs:read"], "worker")
    _, simulator = await engine.keys.create("default", ["worker", "packs:read", "packs:simulate"], "simulator")
    api = ApiService(engine, engine.settings, host="127.0.0.1", port=0)
    await api.start()
    try:
        # Approved versions only unless asked; pending code only for a key that may simulate it.
        with pytest.raises(ConfigError, match="pending_approval: only approved versions run"):
            await load_remote(TaskRegistry(), api.url, simulator, ("scores@1.1.0",), tmp_path / "r0")
        with pytest.raises(ConfigError, match=r"409: .*packs:simulate"):
            await load_remote(TaskRegistry(), api.url, reader, ("scores@1.1.0",), tmp_path / "r1", pending=True)
        # The command a remote simulating worker runs, in its own process (the server runs on this loop).
        env = {**os.environ, "JOBENGINE_STATE_DIR": str(tmp_path / "remote"), "JOBENGINE_API_KEY": simulator}
        argv = ["-m", "jobengine", "worker", "--remote", api.url, "--packs", "scores@1.1.0", "--pending-packs"]
        worker = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            async with asyncio.timeout(90):
                while not (sim := await engine.runs.get(sim.id)).ended:
                    assert worker.returncode is None
                    await asyncio.sleep(0.1)
        finally:
            if worker.returncode is None:
                worker.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(worker.communicate(), 60)
    finally:
        await api.stop()
    assert worker.returncode == 0, output.decode(errors="replace")
    assert sim.state is RunState.COMPLETED
    review = await engine.pack_runs.review("scores", "1.1.0")
    assert review.diff is not None and review.diff.counts == {"same": 198, "changed": 2, "new": 0, "gone": 0}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_pack_approve_shows_the_simulation_before_approving(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await publish(engine, tmp_path, "1.0.0", APPROVED, approve=True)
    full = RunRequest(task="scores@1.0.0:score", items=tuple(range(200)), segment_size=50)
    await run_to_end(engine, await engine.runs.start(full))
    await publish(engine, tmp_path, "1.1.0", PENDING, approve=False)
    _, key = await engine.keys.create("default", ["packs:approve", "packs:read"], "reviewer")
    api = ApiService(engine, engine.settings, host="127.0.0.1", port=0)
    await api.start()
    try:
        common = ("--url", api.url, "--key", key)
        # The CLI is a blocking HTTP client of the server on this loop: it runs in a thread.
        code, out, err = await asyncio.to_thread(cli, capsys, "pack", "approve", "scores@1.1.0", *common)
        assert code == 2 and "error: yes: pass --yes to approve scores@1.1.0" in err
        assert "no simulation" in out and "jobengine pack simulate scores@1.1.0" in out

        code, out, err = await asyncio.to_thread(cli, capsys, "pack", "simulate", "scores@1.1.0", *common, "--json")
        assert code == 0, err
        sim = await run_to_end(engine, await engine.runs.get(json.loads(out)["id"]))
        code, out, err = await asyncio.to_thread(cli, capsys, "pack", "approve", "scores@1.1.0", *common, "--yes")
        assert code == 0, err
        assert f"simulate run {sim.id} against run" in out and "198 same, 2 changed, 0 new, 0 gone" in out
        rows = [line.split() for line in out.splitlines() if line.split()[:2] in (["0", "changed"], ["100", "changed"])]
        assert rows == [["0", "changed", "0", "1"], ["100", "changed", "200", "201"]]
        assert out.rstrip().endswith("scores@1.1.0 is approved")
        assert (await engine.packs.get("scores", "1.1.0")).status.value == "approved"

        code, out, err = await asyncio.to_thread(cli, capsys, "pack", "simulate", "scores@1.1.0", *common)
        assert code == 2 and "only a version awaiting approval" in err
    finally:
        await api.stop()
