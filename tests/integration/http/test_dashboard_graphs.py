"""The dashboard's graphs over the real app (SQLite): the live list, a graph's page drawing its DAG with each
node's state, its stream sending a new drawing when a node changes, cancel and retry from the page, and the
refusals (another tenant's graph, a bad id, a missing scope or CSRF token). The browser test watches a
running graph in Chromium (tests/browser/test_graphs.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from jobengine.core.graphs import GraphState
from jobengine.dashboard.session import COOKIE
from jobengine.dashboard.views_graphs import DRAWN
from jobengine.engine import Engine
from jobengine.engine.canvas import Graph, TaskCall
from jobengine.http.server import ApiService

from .conftest import Api, MakeApi, browser, form
from .test_dashboard_live import _frames


def fan(width: int, name: str = "nightly") -> Graph:
    """root → ``width`` nodes → end."""
    g = Graph(name)
    g.add("root", TaskCall("fetch"))
    for i in range(width):
        g.add(f"m{i}", TaskCall("work", {"i": i}), after=["root"])
    g.add("end", TaskCall("total"), after=[f"m{i}" for i in range(width)], policy="always")
    return g


def nodes(html: str) -> dict[str, str]:
    """Each drawn node's state, by node name."""
    return dict(re.findall(r'<g class="node [^"]*" data-node="([^"]+)" data-state="([^"]+)"', html))


@pytest.fixture
async def acme_ui(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with browser(api, api.keys["acme"]) as c:
        yield c


async def submit(engine: Engine, graph: Graph) -> str:
    return (await engine.graphs.submit(graph, tenant="acme")).id


async def test_the_list_and_a_graph_page_draw_every_node_with_its_state(api: Api, acme_ui: httpx.AsyncClient) -> None:
    graph_id = await submit(api.engine, fan(3))
    r = await acme_ui.get("/graphs")
    assert r.status_code == 200 and 'href="/graphs"' in r.text
    row = re.search(rf'<tr data-graph="{graph_id}">.*?</tr>', r.text, re.S)
    assert row is not None and "nightly" in row[0] and "pending" in row[0] and "0 / 5" in row[0]
    assert 'sse-connect="/ui/stream/list/graphs"' in r.text

    r = await acme_ui.get(f"/graphs/{graph_id}")
    assert r.status_code == 200 and f'sse-connect="/ui/stream/graph/{graph_id}"' in r.text
    assert nodes(r.text) == {"root": "queued", "m0": "blocked", "m1": "blocked", "m2": "blocked", "end": "blocked"}
    assert r.text.count('marker-end="url(#arrow)"') == 6  # root → 3, 3 → end
    # Layers left to right: root, the three, end; the root level with the middle of the three.
    at = dict(re.findall(r'data-node="([^"]+)" data-state="[^"]+" transform="translate\(([\d.]+) ', r.text))
    assert float(at["root"]) < float(at["m1"]) == float(at["m0"]) < float(at["end"])
    assert "Cancel graph" in r.text and "policy always" in r.text


async def test_cancel_and_retry_from_the_page(api: Api, acme_ui: httpx.AsyncClient) -> None:
    graph_id = await submit(api.engine, fan(2))
    r = await acme_ui.post(f"/graphs/{graph_id}/retry", data=form(acme_ui))
    assert r.status_code == 409 and "only a failed or cancelled graph can be retried" in r.text
    r = await acme_ui.post(f"/graphs/{graph_id}/cancel", data=form(acme_ui))
    assert r.status_code == 303 and r.headers["location"].startswith(f"/graphs/{graph_id}?done=graph+cancelled")
    assert (await api.engine.graphs.get(graph_id)).state is GraphState.CANCELLED
    page = (await acme_ui.get(f"/graphs/{graph_id}")).text
    assert set(nodes(page).values()) == {"cancelled"} and "Retry failed and cancelled nodes" in page
    r = await acme_ui.post(f"/graphs/{graph_id}/retry", data=form(acme_ui))
    assert r.status_code == 303
    again = await api.engine.graphs.get(graph_id, nodes=True)
    states = {n.name: n.job.state.value for n in again.nodes}
    assert again.state is not GraphState.CANCELLED and states["root"] == "queued"
    r = await acme_ui.post(f"/graphs/{graph_id}/pause", data=form(acme_ui))
    assert r.status_code == 404 and "<strong>action</strong>" in r.text


async def test_another_tenant_bad_ids_scopes_and_csrf_are_refused(api: Api, acme_ui: httpx.AsyncClient) -> None:
    graph_id = await submit(api.engine, fan(1))
    async with browser(api, api.keys["globex"]) as globex:
        assert (await globex.get(f"/graphs/{graph_id}")).status_code == 404
        assert graph_id not in (await globex.get("/graphs")).text
        r = await globex.post(f"/graphs/{graph_id}/cancel", data=form(globex))
        assert r.status_code == 404
    r = await acme_ui.get("/graphs/not a graph!")
    assert r.status_code == 404 and "<strong>graph_id</strong>" in r.text
    r = await acme_ui.get("/graphs", params={"cursor": "bad cursor!"})
    assert r.status_code == 422 and "<strong>cursor</strong>" in r.text
    r = await acme_ui.post(f"/graphs/{graph_id}/cancel", data={"csrf": "wrong"})
    assert r.status_code == 403
    async with browser(api, await api.key("acme", "jobs:read")) as reader:
        assert (await reader.get("/graphs")).status_code == 403
        assert (await reader.get(f"/graphs/{graph_id}")).status_code == 403
        assert (await reader.get(f"/ui/stream/graph/{graph_id}")).status_code == 403
    async with browser(api, await api.key("acme", "jobs:read", "graph:read")) as reader:
        assert (await reader.get(f"/graphs/{graph_id}")).status_code == 200
        r = await reader.post(f"/graphs/{graph_id}/cancel", data=form(reader))
        assert r.status_code == 403
    assert not (await api.engine.graphs.get(graph_id)).ended


async def test_a_graph_larger_than_the_drawing_shows_its_counts(api: Api, acme_ui: httpx.AsyncClient) -> None:
    graph_id = await submit(api.engine, fan(DRAWN, "huge"))
    page = (await acme_ui.get(f"/graphs/{graph_id}")).text
    assert nodes(page) == {} and f"This graph has {DRAWN + 2} nodes" in page
    assert re.search(r"blocked</span> 501", page) and re.search(r"queued</span> 1", page)


async def test_the_streams_send_a_new_frame_when_the_store_changes(make_api: MakeApi) -> None:
    async with make_api(dashboard_refresh_seconds=0.05, sse_keepalive=0.5) as api:
        service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
        await service.start()
        try:
            cookies = {COOKIE: await api.session(api.keys["acme"])}
            async with httpx.AsyncClient(base_url=service.url, cookies=cookies, timeout=60) as c:
                async with c.stream("GET", "/ui/stream/list/graphs") as s:
                    lines = s.aiter_lines()
                    [(event, html)] = await _frames(lines, 1)
                    assert event == "graphs" and "No graphs yet" in html
                    graph_id = await submit(api.engine, fan(2, "streamed"))
                    [(event, html)] = await _frames(lines, 1)
                    assert event == "graphs" and graph_id in html and "streamed" in html
                async with c.stream("GET", f"/ui/stream/graph/{graph_id}") as s:
                    lines = s.aiter_lines()
                    [(event, html)] = await _frames(lines, 1)
                    assert event == "graph" and nodes(html)["root"] == "queued"
                    await api.engine.graphs.cancel(graph_id, "acme")  # the nodes change in the store
                    [(event, html)] = await _frames(lines, 1)
                    assert event == "graph" and set(nodes(html).values()) == {"cancelled"}
                    assert "state-cancelled" in html and "Retry failed and cancelled nodes" in html
                r = await c.get("/ui/stream/graph/01a00000-0000-7000-8000-000000000000")
                assert r.status_code == 404
        finally:
            await service.stop()
