"""The dashboard's live lists, a run's page and its error pages over the real app (SQLite): each list's
stream sends its fragment and a new one when the store changes; unknown paths answer a page with the layout
while the API keeps problem+json. The browser tests watch the same in Chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.dashboard.session import COOKIE
from jobengine.http.server import ApiService

from .conftest import Api, MakeApi, browser


async def _frames(lines: AsyncIterator[str], count: int) -> list[tuple[str, str]]:
    """The next ``count`` (event, data) frames of an SSE response's lines (fewer if it ends)."""
    out, event, data = [], "", []
    async for line in lines:
        if line.startswith("event:"):
            event = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").removeprefix(" "))
        elif line == "" and event:
            out.append((event, "\n".join(data)))
            event, data = "", []
            if len(out) >= count:
                break
    return out


async def test_every_list_streams_its_fragment_and_a_new_one_when_the_store_changes(make_api: MakeApi) -> None:
    async with make_api(dashboard_refresh_seconds=0.05, sse_keepalive=0.5) as api:
        e = api.engine
        await e.enqueue("invoice", tenant="acme", queue="billing")
        service = ApiService(e, e.settings, host="127.0.0.1", port=0, app=api.app)
        await service.start()
        try:
            cookies = {COOKIE: await api.session(api.keys["acme"])}
            async with httpx.AsyncClient(base_url=service.url, cookies=cookies, timeout=60) as c:
                firsts = {
                    "queues": "billing", "workers": "No worker is running", "schedules": "No schedules",
                    "runs": "No runs yet", "failures": "No failures recorded", "packs": "jobengine pack push",
                }  # fmt: skip
                for name, text in firsts.items():
                    async with c.stream("GET", f"/ui/stream/list/{name}") as s:
                        assert s.headers["content-type"].startswith("text/event-stream")
                        [(event, html)] = await _frames(s.aiter_lines(), 1)
                        assert event == name and text in html, (name, html)
                async with c.stream("GET", "/ui/stream/list/queues") as s:
                    lines = s.aiter_lines()
                    [(_, html)] = await _frames(lines, 1)
                    assert "Resume billing" not in html
                    await e.queues.update("billing", paused=True)  # as another process would, in the store
                    [(event, html)] = await _frames(lines, 1)
                    assert event == "queues" and "Resume billing" in html
                async with c.stream("GET", "/ui/stream/list/schedules") as s:
                    lines = s.aiter_lines()
                    await _frames(lines, 1)
                    spec = ScheduleSpec(name="nightly", template=JobTemplate(task="invoice"), cron="0 3 * * *",
                                        tenant="acme")  # fmt: skip
                    await e.schedules.create(spec)
                    [(event, html)] = await _frames(lines, 1)
                    assert event == "schedules" and "nightly" in html
        finally:
            await service.stop()


async def test_streams_refuse_unknown_lists_bad_filters_and_missing_scopes(api: Api) -> None:
    async with browser(api, api.keys["acme"]) as c:
        r = await c.get("/ui/stream/list/nope")
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
        assert "<strong>name</strong>: no live list" in r.text
        r = await c.get("/ui/stream/list/runs", params={"cursor": "bad cursor!"})
        assert r.status_code == 422 and "<strong>cursor</strong>" in r.text
        r = await c.get("/ui/stream/run/0190aaaa-0000-7000-8000-000000000000")
        assert r.status_code == 404
    reader = await api.key("acme", "jobs:read")
    async with browser(api, reader) as c:
        r = await c.get("/ui/stream/list/runs")
        assert r.status_code == 403 and "schedules:read" in r.text


async def test_a_run_names_its_schedule_and_segments_and_offers_retry_only_after_a_failure(
    api: Api, ) -> None:  # fmt: skip
    e = api.engine
    spec = ScheduleSpec(name="month-end", template=JobTemplate(task="invoice"), cron="0 3 * * *", tenant="acme")
    schedule = await e.schedules.create(spec)
    run = await e.schedules.trigger(schedule.id, reason="test", tenant="acme")
    async with browser(api, api.keys["acme"]) as c:
        html = (await c.get(f"/runs/{run.id}")).text
        assert "Run of month-end" in html and 'sse-connect="/ui/stream/run/' in html
        assert "invoice 1/1" in html  # the segment: its task and place
        assert "Retry failed segments" not in html and "Cancel run" in html
        html = (await c.get("/runs")).text
        assert ">month-end</a>" in html and schedule.id[-12:] + "<" not in html
        html = (await c.get("/runs", params={"schedule": schedule.id})).text
        assert "Runs of schedule <a" in html and ">month-end</a></h1>" in html
        (segment,) = await e.runs.segments(run.id, "acme")
        await e.cancel(segment.job_id, "no", "acme")
        html = (await c.get(f"/runs/{run.id}")).text
        assert "Retry failed segments (1)" in html


async def test_unknown_dashboard_paths_answer_a_page_and_the_api_keeps_problem_json(api: Api) -> None:
    async with browser(api, api.keys["acme"]) as c:
        r = await c.get("/no/such/page")
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
        assert "there is no page at /no/such/page" in r.text and 'aria-label="Main"' in r.text  # the menu
        r = await c.get("/runs/x/retry")  # a form's path, fetched
        assert r.status_code == 405 and "does not take GET" in r.text and "text/html" in r.headers["content-type"]
        r = await c.get("/api/v1/no-such-thing")
        assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
    async with browser(api) as c:  # without a session: the page, without the menu
        r = await c.get("/nope")
        assert r.status_code == 404 and "text/html" in r.headers["content-type"]
        assert 'aria-label="Main"' not in r.text


async def test_a_bug_in_a_page_answers_a_500_page_and_is_logged(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the page")

    monkeypatch.setattr(api.engine.schedules, "list", broken)
    async with browser(api, api.keys["acme"]) as c:
        r = await c.get("/schedules")
    assert r.status_code == 500 and r.headers["content-type"].startswith("text/html")
    assert "the dashboard failed to show this page" in r.text and "a bug in the page" not in r.text
    assert any("GET /schedules failed" in rec.getMessage() and rec.exc_info for rec in caplog.records)
