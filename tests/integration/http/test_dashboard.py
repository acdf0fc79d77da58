"""The dashboard over the real app (httpx ASGI transport, SQLite): sessions, CSRF, scopes and tenants, bad
input refused with the field named and nothing written, every page, paging and search. The browser tests
(tests/browser/) cover what needs a browser: live updates, clicks, cookies as a browser keeps them."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import httpx
import pytest

from jobengine.core.clock import ManualClock
from jobengine.core.ids import short_id
from jobengine.core.models import JobFilter
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.core.states import JobState
from jobengine.dashboard.session import COOKIE, csrf_token
from jobengine.http.server import ApiService
from tests.support.ids import shared_prefix

from .conftest import Api, MakeApi, browser, form


@pytest.fixture
async def acme_ui(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with browser(api, api.keys["acme"]) as c:
        yield c


async def test_login_sets_the_cookie_and_a_bad_key_is_refused_naming_the_field(api: Api) -> None:
    async with browser(api) as c:
        r = await c.post("/login", data={"key": "je_nope", "next": "/jobs"})
        assert r.status_code == 401 and "key: this API key is unknown or revoked" in r.text
        assert COOKIE not in r.headers.get("set-cookie", "")
        r = await c.post("/login", data={"key": api.keys["acme"], "next": "/jobs"})
        assert r.status_code == 303 and r.headers["location"] == "/jobs"
        cookie = r.headers["set-cookie"]
        for flag in ("HttpOnly", "Secure", "SameSite=strict", "Path=/", "Max-Age=43200"):
            assert flag in cookie
        token = r.cookies[COOKIE]  # a random session token, never the key
        assert token.startswith("js_") and api.keys["acme"] not in cookie
        # Only paths of this site are followed after logging in.
        for target in ("//evil.example/x", "https://evil.example/", "/\\evil"):
            r = await c.post("/login", data={"key": api.keys["acme"], "next": target})
            assert r.headers["location"] == "/"
        r = await c.get("/login", params={"next": "//evil.example"})
        assert 'name="next" value="/"' in r.text
        # Logging in from another site is refused.
        r = await c.post("/login", data={"key": api.keys["acme"]}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and "Origin" in r.text


async def test_without_a_session_every_page_redirects_to_the_login_page(api: Api) -> None:
    job = await api.engine.enqueue("invoice", {"secret": "s3cr3t"}, tenant="acme")
    async with browser(api) as c:
        for path in ("/", "/jobs", f"/jobs/{job.id}", "/queues", "/schedules", "/runs", "/failures", "/dead",
                     "/dead/purge", "/ui/stream/overview", f"/ui/stream/job/{job.id}"):  # fmt: skip
            r = await c.get(path)
            assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
        r = await c.post(f"/jobs/{job.id}/cancel", data={"csrf": "x"})
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    assert (await api.engine.get_job(job.id)).state is JobState.QUEUED


async def test_every_page_renders_for_a_session(api: Api, acme_ui: httpx.AsyncClient) -> None:
    e = api.engine
    job = await e.enqueue("invoice", {"n": 1}, tenant="acme", queue="billing")
    spec = ScheduleSpec(name="nightly", template=JobTemplate(task="invoice"), cron="0 3 * * *", tenant="acme")
    schedule = await e.schedules.create(spec)
    run = await e.schedules.trigger(schedule.id, reason="test", tenant="acme")
    pages = {
        "/": ["Jobs by state", "billing"],
        "/jobs": [job.id],
        f"/jobs/{job.id}": ["invoice", "job.enqueued"],
        "/queues": ["billing", "Pause billing"],
        "/schedules": ["nightly", "0 3 * * *"],
        f"/schedules/{schedule.id}": ["Simulation: the next 10 fire times", run.id],
        "/runs": [run.id],
        f"/runs/{run.id}": ["Segments (1)"],
        "/failures": ["No failures recorded."],
        "/dead": ["The dead letter is empty."],
        "/dead/purge": ["deletes <strong>0</strong> dead job(s)"],
    }
    for path, texts in pages.items():
        r = await acme_ui.get(path)
        assert r.status_code == 200, (path, r.text[-500:])
        assert r.headers["content-type"].startswith("text/html")
        for text in texts:
            assert text in r.text, (path, text)
    assert (await acme_ui.get("/static/htmx.min.js")).status_code == 200


async def test_runs_and_schedules_show_short_ids_and_take_prefixes(api: Api, acme_ui: httpx.AsyncClient) -> None:
    e = api.engine
    spec = ScheduleSpec(name="nightly", template=JobTemplate(task="invoice"), cron="0 3 * * *", tenant="acme")
    schedule = await e.schedules.create(spec)
    runs = [await e.schedules.trigger(schedule.id, reason="test", tenant="acme") for _ in range(3)]
    r = await acme_ui.get("/runs")
    shown = re.findall(r'<a href="/runs/([0-9a-f-]+)">([^<]+)</a>', r.text)
    assert {(run.id, short_id(run.id)) for run in runs} <= set(shown), r.text
    r = await acme_ui.get(f"/runs/{short_id(runs[0].id)}")
    assert r.status_code == 302 and r.headers["location"] == f"/runs/{runs[0].id}"
    r = await acme_ui.get(f"/runs/{runs[0].id}")
    assert "of nightly" in r.text and f"Run {short_id(runs[0].id)} of nightly" in r.text
    prefix, _ = shared_prefix([run.id for run in runs])
    r = await acme_ui.get(f"/runs/{prefix}")
    assert r.status_code == 409 and r.headers["content-type"].startswith("text/html") and "give more" in r.text
    r = await acme_ui.get(f"/schedules/{short_id(schedule.id)}")
    assert r.status_code == 200 and "nightly" in r.text
    r = await acme_ui.post(f"/runs/{short_id(runs[1].id)}/cancel", data=form(acme_ui))
    assert r.status_code == 303 and (await e.runs.get(runs[1].id)).state.value == "cancelled"


async def test_another_tenants_records_are_not_found(api: Api, acme_ui: httpx.AsyncClient) -> None:
    theirs = await api.engine.enqueue("payroll", {"salary": 1}, tenant="globex")
    r = await acme_ui.get(f"/jobs/{theirs.id}")
    assert r.status_code == 404 and "salary" not in r.text
    r = await acme_ui.get("/jobs")
    assert theirs.id not in r.text
    r = await acme_ui.post(f"/jobs/{theirs.id}/cancel", data=form(acme_ui))
    assert r.status_code == 404
    assert (await api.engine.get_job(theirs.id)).state is JobState.QUEUED
    assert (await acme_ui.get(f"/ui/stream/job/{theirs.id}")).status_code == 404


async def test_actions_need_the_csrf_token_the_origin_and_the_scope(api: Api) -> None:
    job = await api.engine.enqueue("invoice", tenant="acme")
    async with browser(api, api.keys["acme"]) as c:
        assert (await c.post(f"/jobs/{job.id}/cancel", data={})).status_code == 403
        assert (await c.post(f"/jobs/{job.id}/cancel", data={"csrf": "0" * 64})).status_code == 403
        r = await c.post(f"/jobs/{job.id}/cancel", data=form(c), headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
    assert (await api.engine.get_job(job.id)).state is JobState.QUEUED
    reader = await api.key("acme", "jobs:read")
    async with browser(api, reader) as c:
        assert (await c.get(f"/jobs/{job.id}")).status_code == 200
        r = await c.post(f"/jobs/{job.id}/cancel", data=form(c))
        assert r.status_code == 403 and "jobs:write" in r.text
        assert (await c.get("/schedules")).status_code == 403  # schedules:read
    assert (await api.engine.get_job(job.id)).state is JobState.QUEUED
    async with browser(api, api.keys["acme"]) as c:
        r = await c.post(f"/jobs/{job.id}/cancel", data=form(c, reason="not needed"))
        assert r.status_code == 303 and r.headers["location"].startswith(f"/jobs/{job.id}?done=")
    cancelled = await api.engine.get_job(job.id)
    assert cancelled.state is JobState.CANCELLED and cancelled.reason == "not needed"


async def test_bad_input_names_the_field_and_writes_nothing(api: Api, acme_ui: httpx.AsyncClient) -> None:
    e = api.engine
    for params, field in (({"state": "bogus"}, "state"), ({"queue": "bad queue!"}, "queue"),
                          ({"cursor": "x" * 101}, "cursor"), ({"payload": "x" * 201}, "payload"),
                          ({"created_after": "soon"}, "created_after"), ({"id": "a b"}, "id")):  # fmt: skip
        r = await acme_ui.get("/jobs", params=params)
        assert r.status_code == 422 and f"<strong>{field}</strong>" in r.text, (params, r.text[-300:])
    r = await acme_ui.post("/queues/billing/limit", data=form(acme_ui, concurrency="lots"))
    assert r.status_code == 422 and "<strong>concurrency</strong>" in r.text
    r = await acme_ui.post("/queues/billing/limit", data=form(acme_ui, concurrency="0"))
    assert r.status_code == 422 and "<strong>concurrency</strong>" in r.text
    assert "billing" not in await e.queues.settings(fresh=True)
    spec = ScheduleSpec(name="nightly", template=JobTemplate(task="invoice"), cron="0 3 * * *", tenant="acme")
    schedule = await e.schedules.create(spec)
    r = await acme_ui.post(f"/schedules/{schedule.id}/trigger", data=form(acme_ui, reason=" "))
    assert r.status_code == 422 and "<strong>reason</strong>" in r.text
    assert await e.runs.list() == []
    dead = await e.enqueue("invoice", tenant="acme")
    r = await acme_ui.post(f"/jobs/{dead.id}/replay", data=form(acme_ui))
    assert r.status_code == 409 and "only a dead job can be replayed" in r.text
    r = await acme_ui.post(f"/jobs/{dead.id}/explode", data=form(acme_ui))
    assert r.status_code == 404 and "<strong>action</strong>" in r.text
    r = await acme_ui.post("/dead/purge", data=form(acme_ui, confirm="yes"))
    assert r.status_code == 422 and "<strong>confirm</strong>" in r.text


async def test_queue_schedule_and_run_actions(api: Api, acme_ui: httpx.AsyncClient) -> None:
    e = api.engine
    await e.enqueue("invoice", tenant="acme", queue="billing")
    r = await acme_ui.post("/queues/billing/pause", data=form(acme_ui))
    assert r.status_code == 303
    assert (await e.queues.settings(fresh=True))["billing"].paused
    await acme_ui.post("/queues/billing/limit", data=form(acme_ui, concurrency="4"))
    assert (await e.queues.settings(fresh=True))["billing"].concurrency == 4
    await acme_ui.post("/queues/billing/resume", data=form(acme_ui))
    assert not (await e.queues.settings(fresh=True))["billing"].paused
    spec = ScheduleSpec(name="nightly", template=JobTemplate(task="invoice"), cron="0 3 * * *", tenant="acme")
    schedule = await e.schedules.create(spec)
    r = await acme_ui.post(f"/schedules/{schedule.id}/pause", data=form(acme_ui))
    assert r.status_code == 303 and not (await e.schedules.get(schedule.id)).spec.enabled
    r = await acme_ui.post(f"/schedules/{schedule.id}/resume", data=form(acme_ui, back=f"/schedules/{schedule.id}"))
    assert r.headers["location"].startswith(f"/schedules/{schedule.id}?")
    assert (await e.schedules.get(schedule.id)).spec.enabled
    r = await acme_ui.post(f"/schedules/{schedule.id}/trigger", data=form(acme_ui, reason="month end"))
    (run,) = await e.runs.list()
    assert r.headers["location"].startswith(f"/runs/{run.id}") and run.reason == "month end"
    assert run.actor is not None and run.actor.startswith("dashboard:")
    r = await acme_ui.post(f"/runs/{run.id}/cancel", data=form(acme_ui))
    assert r.status_code == 303 and (await e.runs.get(run.id)).state.value == "cancelled"
    r = await acme_ui.post(f"/runs/{run.id}/retry", data=form(acme_ui))
    assert r.status_code == 303
    assert len(await e.runs.list()) == 2


async def test_dead_letter_replay_purge_and_failure_signatures(api: Api, acme_ui: httpx.AsyncClient) -> None:
    e = api.engine

    def broken(ctx: object) -> None:
        raise ValueError("ledger 42 is closed")

    e.add_task("broken", broken, max_attempts=1)
    jobs = [await e.enqueue("broken", {"i": i}, tenant="acme") for i in range(3)]
    worker = e.worker(poll_interval=0.05)
    running = asyncio.create_task(worker.run())
    try:
        for job in jobs:
            assert (await e.wait_for(job.id, timeout=60)).state is JobState.DEAD
    finally:
        worker.stop()
        await running
    r = await acme_ui.get("/failures")
    assert "ValueError" in r.text and "ledger" in r.text and '<svg class="spark"' in r.text
    (key,) = re.findall(r'id="sig-([0-9a-f]+)"', r.text)
    r = await acme_ui.post(f"/failures/{key}/non-retryable", data=form(acme_ui))
    assert r.status_code == 303
    assert (await e.signatures.get(key, tenant="acme")).non_retryable
    await acme_ui.post(f"/failures/{key}/resolve", data=form(acme_ui))
    assert (await e.signatures.get(key, tenant="acme")).status.value == "resolved"
    r = await acme_ui.get("/dead")
    assert all(j.id in r.text for j in jobs) and "ValueError" in r.text
    await acme_ui.post(f"/jobs/{jobs[0].id}/replay", data=form(acme_ui, back="/dead"))
    assert (await e.get_job(jobs[0].id)).state is JobState.QUEUED
    r = await acme_ui.post("/dead/purge", data=form(acme_ui, confirm="purge"))
    assert r.status_code == 303 and "2+dead+job" in r.headers["location"]
    assert await e.list_jobs(JobFilter(tenant="acme", states=(JobState.DEAD,))) == []
    assert (await e.get_job(jobs[0].id)).state is JobState.QUEUED


async def test_jobs_filters_search_and_cursor_paging(api: Api, acme_ui: httpx.AsyncClient) -> None:
    e = api.engine
    batch = [e.new_job("report", {"customer": f"name{i}"}, tenant="acme", queue="q1") for i in range(120)]
    await e.enqueue_many(batch)
    await e.enqueue("other", {"customer": "name7-special"}, tenant="acme", queue="q2")
    ids = re.compile(r'href="/jobs/([0-9a-f-]{36})"')
    r = await acme_ui.get("/jobs", params={"queue": "q1"})
    first = ids.findall(r.text)
    assert len(first) == 50 and first == [j.id for j in reversed(batch)][:50]
    cursor = re.search(r'cursor=([0-9a-f-]{36})"', r.text)
    assert cursor is not None
    r = await acme_ui.get("/jobs", params={"queue": "q1", "cursor": cursor.group(1)})
    assert ids.findall(r.text) == [j.id for j in reversed(batch)][50:100]
    r = await acme_ui.get("/jobs", params={"task": "other"})
    assert len(ids.findall(r.text)) == 1
    r = await acme_ui.get("/jobs", params={"payload": "name7-special"})
    assert len(ids.findall(r.text)) == 1 and "Older" not in r.text
    r = await acme_ui.get("/jobs", params={"payload": "name11", "state": "queued"})
    assert len(ids.findall(r.text)) == 11  # name11, name110..name119
    # an id prefix (the short id shown) finds its job; on a job's URL it redirects to the whole id
    r = await acme_ui.get("/jobs", params={"id": short_id(batch[5].id)})
    assert ids.findall(r.text) == [batch[5].id]
    r = await acme_ui.get(f"/jobs/{short_id(batch[5].id)}")
    assert r.status_code == 302 and r.headers["location"] == f"/jobs/{batch[5].id}"
    r = await acme_ui.get("/jobs", params={"created_after": "2100-01-01T00:00"})
    assert ids.findall(r.text) == []


async def test_the_api_keeps_json_only_and_the_openapi_has_no_dashboard_routes(api: Api) -> None:
    async with api.client() as c:
        r = await c.post(
            "/api/v1/jobs", content=b"task=x", headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        assert r.status_code == 415
        paths = (await c.get("/openapi.json")).json()["paths"]
    assert all(p.startswith(("/api/", "/healthz", "/readyz", "/metrics")) for p in paths)


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


async def test_live_streams_send_rendered_fragments_and_end_when_the_server_stops(make_api: MakeApi) -> None:
    async with make_api(dashboard_refresh_seconds=0.05, sse_keepalive=0.2) as api:
        job = await api.engine.enqueue("invoice", {"n": 1}, tenant="acme")
        service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
        await service.start()
        try:
            cookies = {COOKIE: await api.session(api.keys["acme"])}
            async with (
                httpx.AsyncClient(base_url=service.url, cookies=cookies, timeout=60) as c,
                c.stream("GET", "/ui/stream/overview") as overview,
                c.stream("GET", f"/ui/stream/job/{job.id}") as job_stream,
            ):
                assert overview.headers["content-type"].startswith("text/event-stream")
                job_lines = job_stream.aiter_lines()
                (name, html), (chart_name, chart) = await _frames(overview.aiter_lines(), 2)
                assert (name, chart_name) == ("overview", "chart") and "Queue depths" in html
                assert sum(json.loads(chart)["enqueued"]) == 1
                [(name, html)] = await _frames(job_lines, 1)
                assert name == "job" and 'aria-label="overall progress"' in html
                await api.engine.cancel(job.id, tenant="acme")  # an event of the job: a new frame
                [(name, html)] = await _frames(job_lines, 1)
                assert name == "job" and "state-cancelled" in html
                await service.stop()  # open streams end (the browser would reconnect)
                try:
                    rest = await _frames(job_lines, 1)
                except httpx.RemoteProtocolError:  # cut off mid-stream, as the API's streams are
                    rest = []
                assert rest == []
        finally:
            await service.stop()


async def test_a_job_page_shows_its_newest_events_past_the_first_thousand(make_api: MakeApi) -> None:
    async with make_api(sqlite_synchronous="OFF") as api:
        e = api.engine
        job = await e.enqueue("invoice", tenant="acme")
        for _ in range(520):  # 1 + 2 x 520 events, past one page of the log (1000)
            await e.cancel(job.id, tenant="acme")
            await e.retry(job.id, tenant="acme")
        newest = (await e.events(0, 10_000, job_id=job.id))[-1]
        async with browser(api, api.keys["acme"]) as c:
            r = await c.get(f"/jobs/{job.id}")
        rows = re.findall(r"<tr><td>(\d+)</td><td>", r.text)
        assert len(rows) == 100 and int(rows[0]) == newest.id and int(rows[-1]) == newest.id - 99


async def test_simulate_another_cadence_writes_nothing_and_names_a_bad_field(
    api: Api, acme_ui: httpx.AsyncClient
) -> None:
    spec = ScheduleSpec(name="nightly", template=JobTemplate(task="invoice"), cron="0 3 * * *", tenant="acme")
    schedule = await api.engine.schedules.create(spec)
    r = await acme_ui.get(f"/schedules/{schedule.id}", params={"cron": "30 14 * * *", "timezone": "Europe/Paris"})
    assert r.status_code == 200 and "with <code>30 14 * * *</code> Europe/Paris" in r.text
    times = re.findall(r"<li><time>([^<]+)</time>", r.text)
    assert len(times) == 10 and all(t.endswith(("12:30:00Z", "13:30:00Z")) for t in times)  # 14:30 in Paris
    assert (await api.engine.schedules.get(schedule.id)).spec.cron == "0 3 * * *"
    r = await acme_ui.get(f"/schedules/{schedule.id}", params={"cron": "99 * * * *"})
    assert r.status_code == 422 and "<strong>cron</strong>" in r.text
    r = await acme_ui.get(f"/schedules/{schedule.id}", params={"cron": "0 3 * * *", "timezone": "Mars/Base"})
    assert r.status_code == 422 and "<strong>timezone</strong>" in r.text


async def test_a_key_without_jobs_read_cannot_log_in_and_logout_ends_the_session(api: Api) -> None:
    worker_key = await api.key("acme", "worker")
    async with browser(api) as c:
        r = await c.post("/login", data={"key": worker_key})
        assert r.status_code == 403 and "key: this API key lacks the scope jobs:read" in r.text
        assert COOKIE not in r.headers.get("set-cookie", "")
    async with browser(api, api.keys["acme"]) as c:
        assert (await c.post("/logout", data={"csrf": "wrong"})).status_code == 403
        r = await c.post("/logout", data=form(c))
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert f'{COOKIE}=""' in r.headers["set-cookie"] and "Max-Age=0" in r.headers["set-cookie"]


def _session_cookie(response: httpx.Response) -> str:
    assert response.status_code == 303, response.text
    return response.cookies[COOKIE]


def _use(client: httpx.AsyncClient, token: str) -> None:
    """Send ``token`` as the session cookie (httpx keeps a Secure cookie for https only: set by hand)."""
    client.cookies.clear()
    client.cookies.set(COOKIE, token)


async def test_logout_ends_the_session_and_its_old_cookie_opens_neither_the_dashboard_nor_the_api(api: Api) -> None:
    async with browser(api) as c, api.client("") as anonymous:
        token = _session_cookie(await c.post("/login", data={"key": api.keys["acme"]}))
        other = _session_cookie(await c.post("/login", data={"key": api.keys["acme"]}))  # a second login
        _use(c, token)
        assert (await c.get("/jobs")).status_code == 200
        as_bearer = await anonymous.get("/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
        assert as_bearer.status_code == 401  # the cookie is no API key
        r = await c.post("/logout", data=form(c))
        assert r.status_code == 303 and r.headers["location"] == "/login"
        _use(c, token)  # the old cookie, kept (or stolen) after the logout
        r = await c.get("/jobs")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        assert (await c.post("/logout", data=form(c))).status_code == 303  # ends nothing more: to the login page
        for header in ({"Authorization": f"Bearer {token}"}, {"X-API-Key": token}):
            assert (await anonymous.get("/api/v1/jobs", headers=header)).status_code == 401
        _use(c, other)  # the other login is a session of its own: still open
        assert (await c.get("/jobs")).status_code == 200


async def test_revoking_the_key_ends_its_sessions_at_once(api: Api) -> None:
    key = await api.key("acme", "jobs:read")
    key_id = key.split("_")[1]
    async with browser(api, key) as c:
        assert (await c.get("/")).status_code == 200
        await api.engine.keys.revoke(key_id)
        r = await c.get("/")  # at once, within no cache time
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        assert (await c.post("/login", data={"key": key})).status_code == 401


async def test_a_session_expires_after_dashboard_session_seconds(make_api: MakeApi) -> None:
    clock = ManualClock(time.time())  # the session's times are the engine's: moved by hand here
    async with make_api(clock, dashboard_session_seconds=600.0) as api, browser(api, api.keys["acme"]) as c:
        assert (await c.get("/jobs")).status_code == 200
        found = await api.engine.keys.session(c.cookies[COOKIE])
        assert found is not None and found[0].expires_at == clock.now() + 600.0
        clock.advance(599.0)
        assert (await c.get("/jobs")).status_code == 200
        clock.advance(1.0)
        r = await c.get("/jobs")
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        assert await api.engine.keys.prune_sessions() == 1


async def test_an_open_stream_ends_when_its_session_ends(make_api: MakeApi) -> None:
    async with make_api(dashboard_refresh_seconds=0.05, sse_keepalive=0.2) as api:
        service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
        await service.start()
        token = await api.session(api.keys["acme"])
        try:
            async with (
                httpx.AsyncClient(base_url=service.url, cookies={COOKIE: token}, timeout=60) as c,
                c.stream("GET", "/ui/stream/overview") as overview,
            ):
                lines = overview.aiter_lines()
                assert [name for name, _ in await _frames(lines, 1)] == ["overview"]
                await api.engine.keys.end_session(token)  # a logout, from any process
                async with asyncio.timeout(10):  # the stream ends (within a keep-alive or two)
                    async for _ in lines:
                        pass
        finally:
            await service.stop()


async def post_pairs(client: httpx.AsyncClient, pairs: list[tuple[str, str]]) -> httpx.Response:
    """A form with repeated fields (ticked jobs), urlencoded as a browser sends it."""
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    return await client.post("/jobs/actions", content=urlencode(pairs), headers=headers)


async def test_bulk_actions_by_ticks_and_by_filter(api: Api, acme_ui: httpx.AsyncClient) -> None:
    e = api.engine
    mails = await e.enqueue_many([e.new_job("mail", {"n": i}, tenant="acme") for i in range(30)])
    other = await e.enqueue("other", tenant="acme")
    r = await acme_ui.get("/jobs", params={"task": "mail"})
    assert 'name="all_matching"' in r.text and 'form="bulk"' in r.text
    assert '<input type="hidden" name="task" value="mail">' in r.text  # the filter goes with the form
    ticked = [mails[0].id, mails[1].id]
    data = [("csrf", csrf_token(acme_ui.cookies[COOKIE])), ("action", "cancel"), ("back", "/jobs?task=mail")]
    r = await post_pairs(acme_ui, [*data, *(("id", i) for i in ticked)])
    assert r.status_code == 303 and r.headers["location"].startswith("/jobs?task=mail&done=")
    assert [j.state for j in await e.get_jobs(ticked)] == [JobState.CANCELLED] * 2
    r = await post_pairs(acme_ui, [*data, ("task", "mail"), ("state", "queued"), ("all_matching", "1")])
    assert r.status_code == 303 and "28+of+28" in r.headers["location"]
    assert {j.state for j in await e.get_jobs([m.id for m in mails])} == {JobState.CANCELLED}
    assert (await e.get_job(other.id)).state is JobState.QUEUED
    for bad, field in (([("action", "explode"), ("id", ticked[0])], "action"), ([("action", "retry")], "id")):
        r = await post_pairs(acme_ui, [data[0], *bad])
        assert r.status_code == 422 and f"<strong>{field}</strong>" in r.text, r.text[-300:]
    r = await post_pairs(acme_ui, [("action", "cancel"), ("id", other.id)])  # no CSRF token
    assert r.status_code == 403 and (await e.get_job(other.id)).state is JobState.QUEUED
