"""The dashboard kept open all day, in a real browser against a real server (see conftest.py): lists
change without a reload when another process changes the store; the workers page shows real
``jobengine worker`` processes come and go, idle ones counted on the overview too; events read as fields."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI, fails) with the reason
    expect = None

from jobengine.core.states import JobState
from support.processes import Processes

from .conftest import Server

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
LIVE = 30_000  # ms: ceiling for a change to show (a busy machine; it takes a refresh, 0.2 s, when idle)


def login(page: Any, server: Server, target: str) -> None:
    page.goto(target)
    page.get_by_label("API key").fill(server.key)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login" not in url)
    page.evaluate("window.__notReloaded = true")


def not_reloaded(page: Any) -> None:
    assert page.evaluate("window.__notReloaded") is True
    assert page.console_errors == []


@pytest.fixture
def procs(server: Server, tmp_path: Path) -> Iterator[Processes]:
    """Processes on the server's database (CLI commands, workers); all killed at the end."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBENGINE_DATABASE": str(server.engine.settings.database),
           "LEDGER": str(tmp_path / "ledger.txt")}  # fmt: skip
    p = Processes(tmp_path, env, tmp_path)
    yield p
    p.stop_all()


def cli(procs: Processes, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "jobengine", *args], env=procs.env, cwd=procs.cwd,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_queues_schedules_and_runs_change_live_when_another_process_writes(
    page: Any, server: Server, procs: Processes
) -> None:
    login(page, server, "/queues")
    cli(procs, "enqueue", "ledger-export", "--queue", "exports")  # another process, the same database
    row = page.locator("#queues-live tr", has_text="exports")
    expect(row).to_contain_text("Pause exports", timeout=LIVE)
    cli(procs, "enqueue", "ledger-export", "--queue", "exports")
    queued = row.locator("td").nth(1 + [s.value for s in JobState].index("queued"))
    expect(queued).to_have_text("2", timeout=LIVE)
    # Typing in a list's field holds its frames back, then the list catches up.
    field = page.get_by_label("Concurrency limit of exports")
    field.fill("7")
    cli(procs, "enqueue", "ledger-export", "--queue", "exports")
    page.wait_for_timeout(1000)  # frames arrive meanwhile (every 0.2 s): the typed value stays
    expect(field).to_have_value("7")
    page.locator("h1").click()
    expect(queued).to_have_text("3", timeout=LIVE)
    not_reloaded(page)

    page.goto("/schedules")
    page.evaluate("window.__notReloaded = true")
    cli(procs, "schedules", "create", "ledger-close", "--task", "ledger-export", "--every", "1h")
    expect(page.locator("#schedule-ledger-close")).to_contain_text("every", timeout=LIVE)
    not_reloaded(page)

    page.goto("/runs")
    page.evaluate("window.__notReloaded = true")
    cli(procs, "schedules", "trigger", "ledger-close", "--reason", "month end")
    expect(page.locator("#runs-live tbody tr").first).to_contain_text("ledger-close", timeout=LIVE)
    not_reloaded(page)


def test_failures_and_packs_lists_are_live(page: Any, server: Server, tmp_path: Path) -> None:
    login(page, server, "/failures")
    server.controls.flaky_fails.set()
    try:
        with server.api() as api:
            r = api.post("/api/v1/jobs", json={"task": "flaky", "payload": {"n": 1}})
            assert r.status_code == 201, r.text
        expect(page.locator("#failures-live")).to_contain_text("RuntimeError", timeout=LIVE)
    finally:
        server.controls.flaky_fails.clear()
    not_reloaded(page)
    page.goto("/packs")
    page.evaluate("window.__notReloaded = true")
    from support.packs import pack_bytes

    with server.api() as api:
        r = api.post("/api/v1/packs", content=pack_bytes(tmp_path, "livepack"),
                     headers={"Content-Type": "application/gzip"})  # fmt: skip
        assert r.status_code in (200, 201), r.text
    expect(page.locator("#pack-livepack")).to_be_visible(timeout=LIVE)
    not_reloaded(page)


def test_the_workers_page_shows_worker_processes_come_and_go(page: Any, server: Server, procs: Processes) -> None:
    login(page, server, "/workers")
    table = page.locator("#workers-table")
    expect(table.locator("tbody tr[data-worker]")).to_have_count(1)  # the server's own worker
    app = "tests.support.fleet_app:app"
    first = procs.spawn("worker-a", "worker", "--app", app, "--queues", "reports", "--concurrency", "3",
                        env={"FLEET_TASKS": "report,digest"})  # fmt: skip
    procs.wait_output(first, "started on queues", 120)
    row = table.locator("tbody tr", has_text=f"pid {first.pid}")
    expect(row).to_contain_text("reports", timeout=LIVE)
    for text in ("digest, report", "0 of 3", "local", os.uname().nodename):
        expect(row).to_contain_text(text)
    expect(row.locator("td").nth(3)).not_to_have_text("-")  # its version
    with server.api() as api:  # a job in its hand, shown with a link
        r = api.post("/api/v1/jobs", json={"task": "digest", "queue": "reports", "payload": {"sleep": 4}})
        assert r.status_code == 201, r.text
    expect(row.get_by_role("link", name="digest")).to_have_attribute("href", f"/jobs/{r.json()['id']}", timeout=LIVE)
    expect(row).to_contain_text("1 of 3")
    second = procs.spawn("worker-b", "worker", "--app", app, "--queues", "reports",
                         env={"FLEET_TASKS": "report"})  # fmt: skip
    procs.wait_output(second, "started on queues", 120)
    expect(table.locator("tbody tr[data-worker]")).to_have_count(3, timeout=LIVE)
    not_reloaded(page)

    # Idle workers count on the overview too.
    overview = page.context.new_page()
    overview.goto("/")
    expect(overview.locator("#overview-live")).to_contain_text("Workers alive: 3", timeout=LIVE)
    overview.close()

    first.send_signal(signal.SIGTERM)  # a graceful stop unregisters it
    assert first.wait(60) == 0, procs.output(first)
    expect(row).to_have_count(0, timeout=LIVE)
    procs.kill(second)  # a dead process's liveness lock ends with it
    expect(table.locator("tbody tr[data-worker]")).to_have_count(1, timeout=LIVE)
    not_reloaded(page)


def test_job_events_read_as_fields(page: Any, server: Server) -> None:
    with server.api() as api:
        job_id = api.post("/api/v1/jobs", json={"task": "steps"}).json()["id"]
    login(page, server, f"/jobs/{job_id}")
    server.controls.progress(job_id, 2 / 3)
    events = page.locator("section[aria-labelledby='events-title']")
    expect(events).to_contain_text("67%", timeout=LIVE)
    text = events.inner_text()
    assert "0.666" not in text and '\\"' not in text and "{" not in text
    for _ in range(3):
        server.controls.next_phase(job_id)
    expect(events).to_contain_text("job.succeeded", timeout=LIVE)


def test_event_times_show_in_the_readers_time_zone(page: Any, server: Server) -> None:
    server.controls.flaky_fails.set()
    try:
        with server.api() as api:
            r = api.post("/api/v1/jobs", json={"task": "flaky", "max_attempts": 2})
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
        login(page, server, f"/jobs/{job_id}")
        retry_at = page.locator("section[aria-labelledby='events-title'] time[datetime]").first
        expect(retry_at).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$"), timeout=LIVE)
        assert retry_at.get_attribute("data-local") is None  # turned by dashboard.js
        assert retry_at.inner_text() != retry_at.get_attribute("title")
    finally:
        server.controls.flaky_fails.clear()
