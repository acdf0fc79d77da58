"""Runs in their three modes, in a real browser against a real server (see conftest.py): the runs list
filtered by mode, a simulate run's diff against the last full run (counts first, then pages of items),
and manual starts (a run request form, a schedule's trigger) that show their preview before the user
confirms, writing nothing until then."""

from __future__ import annotations

import time
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI, fails) with the reason
    expect = None

from jobengine.core.schedules import JobTemplate, ScheduleSpec

from .conftest import Server
from .test_dashboard import login

pytestmark = pytest.mark.timeout(300)


def start(server: Server, **body: Any) -> dict[str, Any]:
    with server.api() as api:
        r = api.post("/api/v1/runs", json=body)
        assert r.status_code == 201, r.text
        return dict(r.json())


def runs_of(server: Server, schedule_id: str) -> list[dict[str, Any]]:
    """The runs of a schedule or a stream ("<task> <source>"), newest first."""
    with server.api() as api:
        runs = api.get("/api/v1/runs", params={"limit": 500}).json()["items"]
    return [r for r in runs if r["schedule_id"] == schedule_id]


def wait_ended(server: Server, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with server.api() as api:
        while True:
            run = api.get(f"/api/v1/runs/{run_id}").json()
            if run["state"] in ("completed", "error", "cancelled"):
                return dict(run)
            assert time.monotonic() < deadline, f"run {run_id} is still {run['state']}"
            time.sleep(0.1)


def test_the_runs_list_shows_each_runs_mode_and_filters_by_it(page: Any, server: Server) -> None:
    made = {
        mode: start(server, task="score", items=[1, 2], mode=mode, source=f"list-{mode}", queue="parked")["id"]
        for mode in ("full", "incremental", "simulate")
    }
    login(page, server, target="/runs")
    for mode, run_id in made.items():
        expect(page.locator(f'#runs-live tr[data-run="{run_id}"] .run-mode')).to_have_text(mode)
    page.get_by_label("Mode").select_option("simulate")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(lambda url: "mode=simulate" in url)
    expect(page.locator(f'#runs-live tr[data-run="{made["simulate"]}"]')).to_be_visible()
    for mode in ("full", "incremental"):
        expect(page.locator(f'#runs-live tr[data-run="{made[mode]}"]')).to_have_count(0)
    assert set(page.locator("#runs-live .run-mode").all_inner_texts()) == {"simulate"}
    page.goto("/runs?mode=sometimes")
    expect(page.locator("body")).to_contain_text("mode")
    assert "one of full, incremental, simulate" in page.content()


def test_a_simulate_runs_page_shows_its_diff_against_the_last_full_run(page: Any, server: Server) -> None:
    full = start(server, task="score", items=list(range(120)), segment_size=50, source="diff")
    assert wait_ended(server, full["id"])["state"] == "completed"
    # 0-4 gone, 120-129 new, 10, 20, ... 110 changed (the task scores them one higher when simulating).
    sim = start(server, task="score", items=list(range(5, 130)), segment_size=50, source="diff", mode="simulate")
    assert wait_ended(server, sim["id"])["state"] == "completed"
    login(page, server, target=f"/runs/{sim['id']}")
    diff = page.locator("#diff")
    counts = {c: diff.locator(f'.diff-counts a[data-change="{c}"] strong').inner_text() for c in
              ("same", "changed", "new", "gone")}  # fmt: skip
    assert counts == {"same": "104", "changed": "11", "new": "10", "gone": "5"}
    rows = diff.locator("#diff-table tbody tr")
    expect(rows).to_have_count(26)  # every item that differs, in item order
    first = rows.nth(0).locator("td")
    assert first.all_inner_texts() == ["0", "gone", "0", "—"]
    changed = diff.locator('#diff-table tr[data-change="changed"]').first.locator("td")
    assert changed.all_inner_texts() == ["10", "changed", "20", "21"]  # both results side by side
    assert diff.locator('#diff-table tr[data-change="new"]').last.locator("td").all_inner_texts() == [
        "129", "new", "—", "258"
    ]  # fmt: skip
    # The unchanged items, a page at a time.
    diff.locator('.diff-counts a[data-change="same"]').click()
    page.wait_for_url(lambda url: "change=same" in url)
    expect(page.locator("#diff-table tbody tr")).to_have_count(50)
    expect(page.locator("#diff")).to_contain_text("page 1 of 3")
    page.locator("#diff").get_by_role("link", name="Next →").click()
    page.wait_for_url(lambda url: "dpage=2" in url)
    expect(page.locator("#diff")).to_contain_text("page 2 of 3")
    expect(page.locator('#diff-table tbody tr[data-change="same"]')).to_have_count(50)
    # A full run's page has no diff.
    page.goto(f"/runs/{full['id']}")
    expect(page.locator("#run-live")).to_contain_text("full")
    expect(page.locator("#diff")).to_have_count(0)


def test_a_run_request_form_shows_the_preview_and_starts_only_when_confirmed(page: Any, server: Server) -> None:
    first = start(server, task="score", items=[1, 2, 3], source="form")  # a full run: the cursor reaches 3
    wait_ended(server, first["id"])
    login(page, server, target="/runs")
    page.get_by_role("link", name="Run a task over items…").click()
    page.get_by_label("Task").fill("score")
    page.get_by_label("Mode").select_option("incremental")
    page.get_by_label("Input source").fill("form")
    page.get_by_label("Items per job").fill("2")
    page.get_by_label("Items (a JSON array, or one per line)").fill("[1, 2, 3, 4, 5, 6, 7]")
    page.get_by_role("button", name="Preview").click()
    preview = page.locator("#preview")
    counts = {c: preview.locator(f'[data-count="{c}"]').inner_text() for c in
              ("items", "todo", "segments", "before_cursor", "done")}  # fmt: skip
    assert counts == {"items": "7", "todo": "4", "segments": "2", "before_cursor": "3", "done": "0"}
    assert preview.locator("ol.sample li").all_inner_texts() == ["4", "5", "6", "7"]
    assert len(runs_of(server, "score form")) == 1  # a preview writes nothing
    preview.get_by_role("button", name="Start incremental run").click()
    page.get_by_role("status").get_by_text("run started").wait_for()
    runs = runs_of(server, "score form")
    assert len(runs) == 2 and runs[0]["mode"] == "incremental" and runs[0]["items"] == 4
    assert f"/runs/{runs[0]['id']}" in page.url
    expect(page.locator("#run-live .run-mode")).to_have_text("incremental")
    page.locator("#run-live").get_by_role("link", name="score form").click()  # the stream's runs
    expect(page.locator("#runs-live tbody tr")).to_have_count(2)
    # A bad field comes back as the form, naming it.
    page.goto("/runs/new")
    page.get_by_label("Task").fill("score")
    page.get_by_label("Items (a JSON array, or one per line)").fill("[1, 2")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("alert")).to_contain_text("items: not a JSON array")
    expect(page.get_by_label("Task")).to_have_value("score")


def test_triggering_a_schedule_shows_its_preview_before_it_fires(page: Any, server: Server) -> None:
    template = JobTemplate(task="later", queue="parked", items=(1, 2, 3, 4, 5), segment_size=2)
    spec = ScheduleSpec(name="month-close", template=template, cron="0 3 * * *")
    schedule = server.call(server.engine.schedules.create(spec, actor="test"))
    login(page, server, target=f"/schedules/{schedule.id}")
    page.get_by_label("Reason").fill("month end by hand")
    page.get_by_role("button", name="Trigger now…").click()
    page.wait_for_url(lambda url: "/trigger" in url)
    preview = page.locator("#preview")
    assert preview.locator('[data-count="jobs"]').inner_text() == "3"
    assert preview.locator('[data-count="items"]').inner_text() == "5"
    expect(preview.locator("ol.sample li")).to_have_count(3)
    expect(preview.locator("ol.fire-times li")).to_have_count(5)
    assert runs_of(server, schedule.id) == []  # nothing fired yet
    expect(page.get_by_label("Reason")).to_have_value("month end by hand")
    page.get_by_role("button", name="Confirm trigger").click()
    page.get_by_role("status").get_by_text("run triggered").wait_for()
    runs = runs_of(server, schedule.id)
    assert len(runs) == 1 and runs[0]["reason"] == "month end by hand" and runs[0]["trigger"] == "manual"
