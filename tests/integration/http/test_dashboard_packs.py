"""The dashboard's packs pages over the real app (httpx ASGI transport, SQLite): the list, a pack's versions
in semver order, a version with its history, the workflow actions with their scope, CSRF, Origin and
four-eyes checks (refused → nothing changed), and the escaped manifest diff."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from jobengine.ports.packs import PackStatus
from support.packs import pack_bytes

from .conftest import Api, MakeApi, browser, form

P = "/api/v1/packs"
GZ = {"Content-Type": "application/gzip"}
UI = ("jobs:read", "packs:read")


async def upload(api: Api, key: str, data: bytes) -> None:
    async with api.client(key) as c:
        r = await c.post(P, content=data, headers=GZ)
        assert r.status_code == 201, r.text


async def status(api: Api, version: str, name: str = "hello") -> PackStatus:
    return (await api.engine.packs.get(name, version)).status


async def test_pages_show_versions_in_semver_order_history_and_an_escaped_diff(
    make_api: MakeApi, tmp_path: Path
) -> None:
    async with make_api(packs_four_eyes="on") as api:
        dev = await api.key("acme", "packs:write", *UI)
        for version, extra in (("1.0.0", ""), ("1.10.0", " <script>alert(1)</script>"), ("1.2.0", " v2")):
            await upload(api, dev, pack_bytes(tmp_path, version=version, extra=extra))
        await upload(api, dev, pack_bytes(tmp_path, name="other", version="0.1.0"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://dash") as anon:
            for path in ("/packs", "/packs/hello", "/packs/hello/versions/1.0.0", "/packs/hello/diff"):
                r = await anon.get(path)  # no session: the login page, no data
                assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
            r = await anon.post("/packs/hello/versions/1.0.0/approve", data={"csrf": "x"})
            assert r.status_code == 303 and r.headers["location"].startswith("/login")
        async with browser(api, api.keys["acme"]) as c:
            r = await c.get("/packs")
            assert r.status_code == 200 and 'href="/packs/hello"' in r.text and 'href="/packs/other"' in r.text
            assert '<a href="/packs"' in r.text  # the navigation entry
            r = await c.get("/packs", params={"q": "oth"})
            assert 'href="/packs/other"' in r.text and 'href="/packs/hello"' not in r.text

            r = await c.get("/packs/hello")
            assert r.status_code == 200
            assert re.findall(r'id="version-([0-9.]+)"', r.text) == [
                "1.10.0",
                "1.2.0",
                "1.0.0",
            ]  # semver, highest first
            assert "pending_approval" in r.text and "key:" in r.text

            r = await c.get("/packs/hello/versions/1.10.0")
            assert r.status_code == 200 and "pack.uploaded" in r.text and "sha256:" in r.text
            assert "<script>alert(1)</script>" not in r.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
            assert 'action="/packs/hello/versions/1.10.0/approve"' in r.text

            r = await c.get("/packs/hello/diff", params={"from": "1.2.0", "to": "1.10.0"})
            assert r.status_code == 200
            assert '<span class="diff-del">-  &#34;description&#34;: &#34;Greets people v2&#34;' in r.text
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text and "<script>alert" not in r.text
            assert re.search(r'<span class="diff-add">\+  &#34;version&#34;: &#34;1.10.0&#34;', r.text)
            r = await c.get("/packs/hello/diff", params={"from": "1.0.0", "to": "1.0.0"})
            assert "The manifests are identical." in r.text
            r = await c.get("/packs/hello/diff", params={"from": "9.9.9", "to": "1.0.0"})
            assert r.status_code == 422 and "<strong>from</strong>" in r.text
            assert (await c.get("/packs/nope")).status_code == 404
            assert (await c.get("/packs/hello/versions/7.0.0")).status_code == 404


async def test_workflow_actions_with_reasons_scopes_and_four_eyes(make_api: MakeApi, tmp_path: Path) -> None:
    async with make_api(packs_four_eyes="on") as api:
        both = await api.key("acme", "packs:write", "packs:approve", *UI)  # uploads, so cannot approve (four-eyes)
        reviewer = await api.key("acme", "packs:approve", *UI)
        reader = await api.key("acme", *UI)
        for version in ("1.0.0", "2.0.0"):
            await upload(api, both, pack_bytes(tmp_path, version=version))
        approve = "/packs/hello/versions/1.0.0/approve"

        async with browser(api, reader) as c:  # no packs:approve: 403, nothing changed
            r = await c.get("/packs/hello/versions/1.0.0")
            assert r.status_code == 200 and "lacks the scope <code>packs:approve</code>" in r.text
            r = await c.post(approve, data=form(c))
            assert r.status_code == 403 and "packs:approve" in r.text
        async with browser(api, await api.key("acme", "jobs:read")) as c:  # no packs:read: cannot even look
            assert (await c.get("/packs")).status_code == 403
        async with browser(api, both) as c:  # the uploader: four-eyes, with a clear message
            r = await c.get("/packs/hello/versions/1.0.0")
            assert 'id="four-eyes"' in r.text and 'action="/packs/hello/versions/1.0.0/approve"' not in r.text
            r = await c.post(approve, data=form(c))
            assert r.status_code == 403 and "four-eyes: your key uploaded hello@1.0.0" in r.text
        assert await status(api, "1.0.0") is PackStatus.PENDING

        async with browser(api, reviewer) as c:
            token = form(c)["csrf"]
            assert (await c.post(approve, data={"csrf": "0" * 64})).status_code == 403  # CSRF
            r = await c.post(approve, data={"csrf": token}, headers={"Origin": "http://evil.example"})
            assert r.status_code == 403  # another site
            assert await status(api, "1.0.0") is PackStatus.PENDING
            r = await c.post("/packs/hello/versions/2.0.0/reject", data={"csrf": token, "reason": "  "})
            assert r.status_code == 422 and "<strong>reason</strong>" in r.text
            assert await status(api, "2.0.0") is PackStatus.PENDING
            assert len(await api.engine.packs.history("hello", "2.0.0")) == 1  # only the upload
            r = await c.post("/packs/hello/versions/2.0.0/explode", data={"csrf": token})
            assert r.status_code == 404 and "<strong>action</strong>" in r.text

            r = await c.post(approve, data={"csrf": token})
            assert r.status_code == 303 and r.headers["location"].startswith("/packs/hello/versions/1.0.0?done=")
            r = await c.post(approve, data={"csrf": token})  # approved already: a conflict
            assert r.status_code == 409
            r = await c.post("/packs/hello/versions/2.0.0/reject", data={"csrf": token, "reason": "uses eval"})
            assert r.status_code == 303
            r = await c.post("/packs/hello/versions/1.0.0/deprecate", data={"csrf": token, "reason": ""})
            assert r.status_code == 422 and "<strong>reason</strong>" in r.text
            await c.post("/packs/hello/versions/1.0.0/deprecate", data={"csrf": token, "reason": "use 2.x"})
            await c.post("/packs/hello/versions/1.0.0/archive", data={"csrf": token})
            r = await c.get("/packs/hello/versions/1.0.0")
            assert "pack.approved" in r.text and "use 2.x" in r.text and "pack.archived" in r.text
        one = await api.engine.packs.get("hello", "1.0.0")
        assert one.status is PackStatus.ARCHIVED and one.approved_by == f"key:{reviewer.split('_')[1]}"
        two = await api.engine.packs.get("hello", "2.0.0")
        assert two.status is PackStatus.REJECTED and two.status_reason == "uses eval"


async def test_a_version_page_says_it_was_never_simulated_and_refuses_bad_simulations(
    make_api: MakeApi, tmp_path: Path
) -> None:
    async with make_api() as api:
        reviewer = await api.key("acme", "packs:write", "packs:approve", *UI)
        await upload(api, reviewer, pack_bytes(tmp_path))
        simulate = "/packs/hello/versions/1.0.0/simulate"
        async with browser(api, reviewer) as c:
            r = await c.get("/packs/hello/versions/1.0.0")
            assert 'id="no-simulation"' in r.text and "jobengine pack simulate hello@1.0.0" in r.text
            assert "<option>greet</option><option>shout</option>" in r.text  # the pack has two tasks
            token = form(c)["csrf"]
            r = await c.post(simulate, data={"csrf": token, "task": "greet", "source": "default"})
            assert r.status_code == 409 and "no completed full run" in r.text
            r = await c.post(simulate, data={"csrf": token, "task": "nope"})
            assert r.status_code == 422 and "<strong>task</strong>" in r.text
            r = await c.post(simulate, data={"csrf": token, "task": "greet", "source": "bad source!"})
            assert r.status_code == 422 and "<strong>source</strong>" in r.text
        assert await api.engine.packs.simulations("hello", "1.0.0") == []
