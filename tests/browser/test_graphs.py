"""Issue 23's acceptance in a real browser against a real server (see conftest.py): the graphs list shows a
new graph without a reload, and the graph page draws a running 1 → 10 → 1 graph whose nodes change state
(and colour) without a reload as the test lets each node finish."""

from __future__ import annotations

from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI, fails) with the reason
    expect = None

from .conftest import Server

pytestmark = pytest.mark.timeout(300)
LIVE = 30_000  # ms: ceiling for a change to show (a busy machine; it takes a refresh, 0.2 s, when idle)
MIDDLE = [f"m{i}" for i in range(10)]
#: The fill of a node's rectangle by state (dashboard.css).
FILLS = {"succeeded": "rgb(220, 243, 227)", "running": "rgb(221, 233, 251)"}


def login(page: Any, server: Server, target: str) -> None:
    page.goto(target)
    page.get_by_label("API key").fill(server.key)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login" not in url)
    page.evaluate("window.__notReloaded = true")


def submit_fan(server: Server, name: str) -> str:
    """root → m0..m9 → end, every node a ``gate`` task that waits for the test to open its gate."""
    nodes = [{"name": n, "task": "gate", "payload": {"gate": f"{name}:{n}"}} for n in ["root", *MIDDLE, "end"]]
    edges = [*(["root", m] for m in MIDDLE), *([m, "end"] for m in MIDDLE)]
    with server.api() as api:
        r = api.post("/api/v1/graphs", json={"name": name, "nodes": nodes, "edges": edges})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def test_the_graph_page_draws_a_running_graph_and_its_nodes_change_state_live(page: Any, server: Server) -> None:
    name = "fan-live"
    gates = [f"{name}:{n}" for n in ["root", *MIDDLE, "end"]]
    try:
        login(page, server, "/graphs")
        graph_id = submit_fan(server, name)
        row = page.locator(f'#graphs-live tr[data-graph="{graph_id}"]')
        expect(row).to_contain_text(name, timeout=LIVE)  # the list is live: no reload
        assert page.evaluate("window.__notReloaded") is True
        row.get_by_role("link").click()
        page.wait_for_url(f"**/graphs/{graph_id}")
        page.evaluate("window.__notReloaded = true")

        svg = page.locator("svg#dag")
        node = lambda n: svg.locator(f'g[data-node="{n}"]')  # noqa: E731
        expect(svg.locator("g.node")).to_have_count(12)
        expect(svg.locator(".edges path")).to_have_count(20)
        expect(node("root")).to_have_attribute("data-state", "running", timeout=LIVE)
        expect(node("m0")).to_have_attribute("data-state", "blocked")
        # Retried: the live refresh redraws the SVG, and a rect read as it is replaced has no computed fill.
        expect(node("root").locator("rect")).to_have_css("fill", FILLS["running"], timeout=LIVE)

        server.controls.open(f"{name}:root")
        expect(node("root")).to_have_attribute("data-state", "succeeded", timeout=LIVE)
        expect(node("m0")).to_have_attribute("data-state", "running", timeout=LIVE)
        # Retried: the live refresh redraws the SVG, and a rect read as it is replaced has no computed fill.
        expect(node("root").locator("rect")).to_have_css("fill", FILLS["succeeded"], timeout=LIVE)

        # Half the fan-out finishes: those nodes turn green, the fan-in still waits on the others.
        server.controls.open(*(f"{name}:{m}" for m in MIDDLE[:5]))
        for m in MIDDLE[:5]:
            expect(node(m)).to_have_attribute("data-state", "succeeded", timeout=LIVE)
        expect(node("end")).to_have_attribute("data-state", "blocked")
        expect(page.locator("#graph-live")).to_contain_text("6 / 12", timeout=LIVE)

        server.controls.open(*(f"{name}:{m}" for m in MIDDLE[5:]))
        expect(node("end")).to_have_attribute("data-state", "running", timeout=LIVE)
        server.controls.open(f"{name}:end")
        expect(node("end")).to_have_attribute("data-state", "succeeded", timeout=LIVE)
        expect(page.locator("#graph-state")).to_have_text("succeeded", timeout=LIVE)
        expect(svg.locator('g.node[data-state="succeeded"]')).to_have_count(12)
        assert page.evaluate("window.__notReloaded") is True
        assert page.console_errors == []
    finally:
        server.controls.open(*gates)  # nothing left waiting on the server's worker
