"""``jobengine worker`` runs on uvloop when it is installed (the dev extra installs it, as the ``uvloop``
extra does for users), and on asyncio's own loop when the ``event_loop`` setting says ``asyncio``: its task
reports the module of the loop it ran on."""

from __future__ import annotations

import signal

import pytest

from acceptance.conftest import Procs
from acceptance.test_worker_logs import procs_cli
from support.waiting import wait_for


@pytest.mark.slow
@pytest.mark.parametrize(("setting", "module"), [("auto", "uvloop"), ("asyncio", "asyncio.unix_events")])
def test_a_worker_runs_on_the_loop_its_setting_names(procs: Procs, setting: str, module: str) -> None:
    job = procs_cli(procs, "enqueue", "loop_kind")
    worker = procs.spawn(
        "worker", "worker", "--app", "tests.support.loop_app:app", env={"JOBENGINE_EVENT_LOOP": setting}
    )
    shown = wait_for(
        lambda: (j := procs_cli(procs, "jobs", "show", job, "--json", parse=True))["state"] == "succeeded" and j,
        120,
        "the job to run",
        every=0.5,
    )
    assert shown["result"] == module
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, procs.output(worker)
