"""The job list in a real browser: a job enqueued by another process appears and changes state without a
reload; 500 queued jobs are cancelled with one bulk action (all matching the filter), checked in the store."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI, fails) with the reason
    expect = None

from jobengine.core.ids import short_id
from jobengine.core.models import JobFilter
from jobengine.core.states import JobState
from support.waiting import wait_for

from .conftest import Server
from .test_dashboard import login

pytestmark = pytest.mark.timeout(300)


def jobengine(server: Server, *args: str) -> str:
    """Run ``jobengine`` in a process of its own on the server's database; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBENGINE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "jobengine", *args, "--db", server.engine.settings.database],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_job_of_another_process_appears_and_changes_state_without_a_reload(page: Any, server: Server) -> None:
    login(page, server, target="/jobs?queue=elsewhere")
    expect(page.get_by_text("No jobs match.")).to_be_visible()
    page.evaluate("window.notReloaded = true")  # gone if the page reloads
    job_id = jobengine(server, "enqueue", "visitor", "--queue", "elsewhere", "--payload", '{"from": "cli"}')
    row = page.locator(f"#job-{job_id}")
    expect(row).to_be_visible(timeout=30_000)
    expect(row).to_contain_text(short_id(job_id))
    expect(row.locator(".state")).to_have_text("queued")
    jobengine(server, "jobs", "cancel", short_id(job_id), "--reason", "from another process")
    expect(row.locator(".state")).to_have_text("cancelled", timeout=30_000)
    assert page.evaluate("window.notReloaded") is True
    assert page.console_errors == []


def test_five_hundred_queued_jobs_are_cancelled_with_one_bulk_action(page: Any, server: Server) -> None:
    eng = server.engine
    jobs = server.call(eng.enqueue_many([eng.new_job("bulk-mail", {"n": i}, queue="parked") for i in range(500)]))
    keep = server.call(eng.enqueue("bulk-keep", queue="parked"))
    login(page, server, target="/jobs?task=bulk-mail&state=queued")
    expect(page.locator("#jobs-rows tr")).to_have_count(50)  # the first page of the 500
    page.get_by_label("all jobs matching the filter").check()
    page.get_by_role("button", name="Cancel", exact=True).click()
    expect(page.locator(".notice, [role=status]").first).to_contain_text("500 of 500", timeout=60_000)
    stored = server.call(eng.list_jobs(JobFilter(task="bulk-mail", limit=1000)))
    assert len(stored) == 500 and {j.state for j in stored} == {JobState.CANCELLED}
    assert {j.id for j in stored} == {j.id for j in jobs}
    assert server.call(eng.get_job(keep.id)).state is JobState.QUEUED
    assert page.console_errors == []


def test_a_live_list_holds_still_while_jobs_are_ticked(page: Any, server: Server) -> None:
    eng = server.engine
    first = server.call(eng.enqueue("ticked", queue="held"))
    login(page, server, target="/jobs?queue=held")
    box = page.locator(f"#job-{first.id} input[name=id]")
    box.check()
    later = eng.new_job("ticked", queue="held")
    page.evaluate(
        "id => document.addEventListener('htmx:sseBeforeMessage', function (e) {"
        "  if (e.detail.data.indexOf(id) >= 0) window.sawLater = true; })",
        later.id,
    )
    server.call(eng.enqueue_many([later]))
    # (not wait_for_function: it evaluates a string, which the dashboard's CSP refuses)
    wait_for(lambda: page.evaluate("window.sawLater === true"), 30, "the frame with the new job")
    assert page.locator(f"#job-{later.id}").count() == 0  # and was not swapped in
    assert box.is_checked()
    box.uncheck()
    expect(page.locator(f"#job-{later.id}")).to_be_visible(timeout=30_000)
