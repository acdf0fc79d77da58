"""Issue 9's acceptance, in a real browser against a real server (see conftest.py): log in; watch a
multi-phase job's progress bar advance on its page without reloading; cancel a job; pause a schedule;
replay a dead job; approve a pack; without a key, the login page and no data."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI, fails) with the reason
    expect = None

from jobengine.core.schedules import JobTemplate, ScheduleSpec
from support.packs import pack_bytes

from .conftest import Server

pytestmark = pytest.mark.timeout(300)


def login(page: Any, server: Server, key: str | None = None, target: str = "/") -> None:
    page.goto(target)
    page.get_by_label("API key").fill(key or server.key)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login" not in url)


def enqueue(server: Server, task: str, payload: Any = None, **fields: Any) -> str:
    with server.api() as api:
        r = api.post("/api/v1/jobs", json={"task": task, "payload": payload, **fields})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def job_state(server: Server, job_id: str) -> str:
    with server.api() as api:
        return str(api.get(f"/api/v1/jobs/{job_id}").json()["state"])


def wait_state(server: Server, job_id: str, *states: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = job_state(server, job_id)
        if state in states or time.monotonic() > deadline:
            assert state in states, f"job {job_id} is {state}, expected one of {states}"
            return state
        time.sleep(0.05)


def test_without_a_key_the_dashboard_shows_the_login_page_and_no_data(page: Any, server: Server) -> None:
    job_id = enqueue(server, "secret-report", {"owner": "top-secret-payload"}, queue="parked")
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead", "/schedules", "/failures", "/queues", "/runs", "/workers"):
        page.goto(path)
        assert "/login" in page.url, path
        body = page.content()  # (the path asked for is kept in the form, to return to after logging in)
        assert "top-secret-payload" not in body and "secret-report" not in body and "parked" not in body
        assert job_id not in page.locator("body").inner_text()
        assert page.get_by_label("API key").is_visible()
    # The live streams answer no data either (a redirect to the login page, not events).
    response = page.request.get(f"/ui/stream/job/{job_id}", max_redirects=0)
    assert response.status == 303 and "/login" in response.headers["location"]
    # A wrong key: still the login page, with the field named.
    page.get_by_label("API key").fill("je_000000000000_not-a-key")
    page.get_by_role("button", name="Log in").click()
    assert page.get_by_role("alert").inner_text().startswith("key:")
    assert "top-secret-payload" not in page.content()


def test_log_in_sets_a_strict_http_only_cookie_and_shows_the_overview(page: Any, server: Server) -> None:
    login(page, server, target="/jobs")
    assert page.url.endswith("/jobs")
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "jobengine_session"]
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # scripts cannot read the key
    page.get_by_role("link", name="Overview").click()
    page.get_by_role("heading", name="Jobs by state").wait_for()
    assert page.get_by_text("tenant default").is_visible()
    # The overview is live: a job enqueued now appears in its counts without a reload.
    page.evaluate("window.__notReloaded = true")
    # uPlot drew the chart (under the CSP); it draws after the heading is in place, so wait for it.
    expect(page.locator("#chart canvas").first).to_be_attached()
    before = int(page.locator("#overview-live dd a[href='/jobs?state=queued']").inner_text())
    enqueue(server, "later", queue="parked")
    expect(page.locator("#overview-live dd a[href='/jobs?state=queued']")).to_have_text(str(before + 1))
    assert page.evaluate("window.__notReloaded") is True
    assert page.console_errors == []  # no script error, nothing refused by the Content-Security-Policy


def test_progress_bar_advances_live_on_the_job_page(page: Any, server: Server) -> None:
    login(page, server)
    job_id = enqueue(server, "steps", {"rows": 3})
    wait_state(server, job_id, "running")
    page.goto(f"/jobs/{job_id}")
    page.evaluate("window.__notReloaded = true")
    bar = page.get_by_label("progress of phase download")
    assert float(bar.get_attribute("value")) == 0.0
    for fraction in (0.25, 0.6):
        server.controls.progress(job_id, fraction)
        expect(bar).to_have_attribute("value", f"{fraction:.3f}")  # ({{:.3f}}: as the page writes it)
    server.controls.next_phase(job_id)  # download done; transform starts
    expect(bar).to_have_attribute("value", "1.000")
    server.controls.progress(job_id, 0.5)
    expect(page.get_by_label("progress of phase transform")).to_have_attribute("value", "0.500")
    overall = float(page.get_by_label("overall progress").get_attribute("value"))
    assert 0.45 < overall < 0.55  # (1 + 0.5 + 0) / 3
    server.controls.next_phase(job_id)
    server.controls.next_phase(job_id)
    page.locator("#job-state").get_by_text("succeeded").wait_for()
    assert page.evaluate("window.__notReloaded") is True  # all of it without a reload
    assert job_state(server, job_id) == "succeeded"
    assert page.console_errors == []


def test_cancel_a_job_from_its_page(page: Any, server: Server) -> None:
    job_id = enqueue(server, "later", {"n": 1}, queue="parked")  # no worker serves "parked": it waits
    login(page, server, target=f"/jobs/{job_id}")
    page.get_by_role("button", name="Cancel job").click()
    page.get_by_role("status").get_by_text("cancel requested").wait_for()
    page.locator("#job-state").get_by_text("cancelled").wait_for()
    assert job_state(server, job_id) == "cancelled"
    assert page.get_by_role("button", name="Cancel job").count() == 0


def test_pause_a_schedule(page: Any, server: Server) -> None:
    spec = ScheduleSpec(name="nightly-report", template=JobTemplate(task="later", queue="parked"), cron="0 3 * * *")
    schedule = server.call(server.engine.schedules.create(spec, actor="test"))
    login(page, server, target="/schedules")
    row = page.locator("#schedule-nightly-report")
    assert row.locator(".sched-status").inner_text() == "active"
    row.get_by_role("button", name="Pause nightly-report").click()
    page.get_by_role("status").get_by_text("paused").wait_for()
    assert page.locator("#schedule-nightly-report .sched-status").inner_text() == "paused"
    with server.api() as api:
        assert api.get(f"/api/v1/schedules/{schedule.id}").json()["enabled"] is False
    # Its page simulates the next fire times and can resume it.
    page.get_by_role("link", name="nightly-report").click()
    assert page.locator("ol.simulation li").count() == 10
    page.get_by_role("button", name="Resume").click()
    page.get_by_role("status").get_by_text("resumed").wait_for()


def test_replay_a_dead_job(page: Any, server: Server) -> None:
    server.controls.flaky_fails.set()
    job_id = enqueue(server, "flaky", {"n": 7})
    wait_state(server, job_id, "dead")
    server.controls.flaky_fails.clear()
    login(page, server, target="/dead")
    row = page.locator(f"#dead-{job_id}")
    assert "RuntimeError" in row.inner_text()
    row.get_by_role("button", name="Replay").click()
    page.get_by_role("status").get_by_text("replayed").wait_for()
    assert wait_state(server, job_id, "succeeded") == "succeeded"
    assert page.locator(f"#dead-{job_id}").count() == 0
    # The job's page shows the failed attempt with its traceback.
    page.goto(f"/jobs/{job_id}")
    assert "flaky failure of" in page.locator("details").first.inner_text()


def test_approve_a_pack(page: Any, server: Server, tmp_path: Path) -> None:
    # Uploaded through the API by one key, approved from the page by another (four-eyes holds either way).
    _, uploader = server.call(server.engine.keys.create("default", ["packs:write", "packs:read"], "ci"))
    _, reviewer = server.call(
        server.engine.keys.create("default", ["jobs:read", "packs:read", "packs:approve"], "reviewer")
    )
    with server.api(uploader) as api:
        r = api.post("/api/v1/packs", content=pack_bytes(tmp_path, version="1.4.0"),
                     headers={"Content-Type": "application/gzip"})  # fmt: skip
        assert r.status_code == 201 and r.json()["status"] == "pending_approval", r.text
    login(page, server, key=reviewer, target="/packs")
    page.get_by_role("link", name="hello", exact=True).click()
    page.locator("#version-1\\.4\\.0").get_by_role("link", name="1.4.0").click()
    assert page.locator("#pack-status").inner_text() == "pending_approval"
    page.get_by_role("button", name="Approve 1.4.0").click()
    page.get_by_role("status").get_by_text("hello@1.4.0 is now approved").wait_for()
    assert page.locator("#pack-status").inner_text() == "approved"
    assert "pack.approved" in page.locator("main").inner_text()
    with server.api(uploader) as api:
        shown = api.get("/api/v1/packs/hello/versions/1.4.0").json()
    assert shown["status"] == "approved" and shown["approved_by"] == f"key:{reviewer.split('_')[1]}"
    assert page.console_errors == []


def test_forms_need_the_csrf_token_and_other_tenants_jobs_stay_hidden(page: Any, server: Server) -> None:
    job_id = enqueue(server, "later", queue="parked")
    login(page, server)
    # A POST carrying the cookie but not the session's CSRF token changes nothing.
    response = page.request.post(f"/jobs/{job_id}/cancel", form={"csrf": "forged"}, max_redirects=0)
    assert response.status == 403 and "csrf" in response.text()
    assert job_state(server, job_id) == "queued"
    # Logged in as another tenant, the job does not exist.
    page.context.clear_cookies()
    login(page, server, key=server.other_key)
    page.goto(f"/jobs/{job_id}")
    assert page.get_by_role("heading", name="404").is_visible()
    assert "later" not in page.locator("main").inner_text().replace("Back to the overview", "")


def test_narrow_screen_has_no_horizontal_scroll(page: Any, server: Server) -> None:
    page.set_viewport_size({"width": 360, "height": 740})
    login(page, server)
    for path in ("/", "/jobs", "/schedules", "/dead", "/packs"):
        page.goto(path)
        page.locator("main h1").wait_for()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 362, f"{path} is {width}px wide on a 360px screen"


def test_the_workers_page_shows_workers_come_and_go_live(page: Any, server: Server) -> None:
    import asyncio

    login(page, server, target="/workers")
    page.evaluate("window.__notReloaded = true")
    table = page.locator("#workers-table")
    expect(table.locator("tbody tr")).to_have_count(1)  # the server's own worker

    async def start() -> Any:
        worker = server.engine.worker(queues=("reports",), poll_interval=0.2)
        return worker, asyncio.create_task(worker.run())

    worker, task = server.call(start())
    row = table.locator(f"tr[data-worker='{worker.id}']")
    expect(row).to_contain_text("reports")

    async def stop() -> None:
        worker.stop()
        await asyncio.wait_for(task, 10)

    server.call(stop())
    expect(row).to_have_count(0)
    assert page.evaluate("window.__notReloaded") is True
    assert page.console_errors == []
