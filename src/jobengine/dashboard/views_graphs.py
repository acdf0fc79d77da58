"""Graphs of jobs: the list (live, newest first) and a graph's page, which draws its DAG with each node's
state (:mod:`jobengine.dashboard.dag`) and re-renders live, with cancel and retry of the whole graph."""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from jobengine.core.graphs import GraphState
from jobengine.core.models import ID_CHARS
from jobengine.dashboard import session as sess
from jobengine.dashboard.base import HtmlRoute, engine, render, see_other
from jobengine.dashboard.dag import BOX_HEIGHT, BOX_WIDTH, layout
from jobengine.dashboard.session import DashboardError, Session

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

PAGE: Final = 50
#: The most nodes a graph's page draws: a larger graph shows its counts by state only, so a page kept open
#: on a huge graph does not read and render every node on each refresh.
DRAWN: Final = 500


def graph_id_param(value: str) -> str:
    """A graph id from a URL; a 404 page for text no id holds."""
    if not 1 <= len(value) <= 100 or not set(value) <= ID_CHARS:
        raise DashboardError(404, f"no graph {value!r}", "graph_id")
    return value


async def graphs_values(request: Request, session: Session) -> dict[str, Any]:
    """The graphs page (``?cursor=`` older ones) and its live stream."""
    cursor = request.query_params.get("cursor", "").strip() or None
    if cursor is not None and (len(cursor) > 100 or not set(cursor) <= ID_CHARS):
        raise DashboardError(422, "not a cursor of this page", "cursor")
    graphs = await engine(request).graphs.list(session.tenant, PAGE, cursor)
    return {"graphs": graphs, "query": request.url.query, "next_cursor": graphs[-1].id if len(graphs) >= PAGE else None}


@router.get("/graphs")
async def graphs_page(request: Request) -> Response:
    session = await sess.require(request, "graph:read")
    return render(request, "graphs.html", session, await graphs_values(request, session))


async def graph_values(request: Request, session: Session, graph_id: str) -> dict[str, Any]:
    """A graph's page and its live stream: the graph, and its drawing when it has at most DRAWN nodes."""
    graphs = engine(request).graphs
    graph = await graphs.get(graph_id_param(graph_id), session.tenant)
    if graph.total <= DRAWN:
        graph = await graphs.get(graph.id, session.tenant, nodes=True)
    return {
        "graph": graph, "drawing": layout(graph.nodes) if graph.nodes else None, "drawn": DRAWN,
        "box": (BOX_WIDTH, BOX_HEIGHT), "can_retry": graph.state in (GraphState.FAILED, GraphState.CANCELLED),
        "session": session, "csrf": session.csrf,
    }  # fmt: skip


@router.get("/graphs/{graph_id}")
async def graph_page(request: Request, graph_id: str) -> Response:
    session = await sess.require(request, "graph:read")
    return render(request, "graph.html", session, await graph_values(request, session, graph_id))


@router.post("/graphs/{graph_id}/{verb}")
async def graph_action(request: Request, graph_id: str, verb: str) -> Response:
    session, _ = await sess.action(request, "graph:write")
    graphs = engine(request).graphs
    graph_id = graph_id_param(graph_id)
    if verb == "cancel":
        graph = await graphs.cancel(graph_id, session.tenant)
        return see_other(f"/graphs/{graph.id}", "graph cancelled")
    if verb == "retry":
        graph = await graphs.retry(graph_id, session.tenant)
        return see_other(f"/graphs/{graph.id}", "failed and cancelled nodes queued again")
    raise DashboardError(404, f"no action {verb!r} (cancel, retry)", "action")
