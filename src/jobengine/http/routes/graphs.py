"""``/api/v1/graphs``: submit a graph of jobs, list and read graphs, cancel and retry one. Scoped to the
key's tenant; reads take ``graph:read``, the rest ``graph:write``. A bad graph (a cycle, an edge naming an
unknown node, too many nodes, an unknown task when the server refuses those) is a 422 problem naming the
field."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from jobengine.core.graphs import GraphSpec, NodeSpec
from jobengine.errors import InvalidJob
from jobengine.http.auth import Principal, require
from jobengine.http.context import context
from jobengine.http.graph_schemas import GraphIn, GraphNodeIn, GraphOut, GraphPage
from jobengine.http.responses import ENQUEUE, READ, READ_ONE, WRITE_ONE, json_response
from jobengine.http.routes.jobs import Cursor
from jobengine.serialize import graph_to_json

router = APIRouter(prefix="/api/v1/graphs", tags=["graphs"])

GraphIdPath = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:\-]+$")]
Reader = Annotated[Principal, Depends(require("graph:read"))]
Writer = Annotated[Principal, Depends(require("graph:write"))]


@router.post("", status_code=201, response_model=GraphOut, responses=ENQUEUE)
async def submit_graph(body: GraphIn, request: Request, principal: Writer) -> Response:
    """Store the graph and every node job at once (all or nothing); nodes without parents are queued."""
    engine = context(request).engine
    parents: dict[str, list[str]] = {n.name: [] for n in body.nodes}
    for parent, child in body.edges:
        if child not in parents:
            raise InvalidJob("edges", f"edge [{parent!r}, {child!r}] names unknown node {child!r}")
        parents[child].append(parent)

    def node(n: GraphNodeIn) -> NodeSpec:
        job = engine.new_job(
            n.task, n.payload, queue=n.queue, priority=n.priority, max_attempts=n.max_attempts, timeout=n.timeout,
            tenant=principal.tenant,
        )  # fmt: skip
        return NodeSpec(n.name, job, tuple(parents[n.name]), n.policy)

    nodes = tuple(node(n) for n in body.nodes)
    handle = await engine.graphs.submit_spec(GraphSpec(body.name, principal.tenant, nodes))
    graph = await engine.graphs.get(handle.id, principal.tenant)
    return json_response(graph_to_json(graph), 201, {"Location": f"/api/v1/graphs/{graph.id}"})


@router.get("", response_model=GraphPage, responses=READ)
async def list_graphs(
    request: Request, principal: Reader, limit: Annotated[int, Query(ge=1, le=500)] = 50, cursor: Cursor = None
) -> Response:
    """The tenant's graphs, newest first."""
    graphs = await context(request).engine.graphs.list(principal.tenant, limit, cursor)
    page = {
        "items": [graph_to_json(g) for g in graphs],
        "next_cursor": graphs[-1].id if len(graphs) >= limit else None,
    }
    return json_response(page)


@router.get("/{graph_id}", response_model=GraphOut, responses=READ_ONE)
async def get_graph(graph_id: GraphIdPath, request: Request, principal: Reader) -> Response:
    """The graph with its nodes, each with its job."""
    graph = await context(request).engine.graphs.get(graph_id, principal.tenant, nodes=True)
    return json_response(graph_to_json(graph))


@router.post("/{graph_id}/cancel", response_model=GraphOut, responses=WRITE_ONE)
async def cancel_graph(graph_id: GraphIdPath, request: Request, principal: Writer) -> Response:
    """Cancel the nodes that have not run and ask running ones to stop (409 if the graph already ended)."""
    return json_response(graph_to_json(await context(request).engine.graphs.cancel(graph_id, principal.tenant)))


@router.post("/{graph_id}/retry", response_model=GraphOut, responses=WRITE_ONE)
async def retry_graph(graph_id: GraphIdPath, request: Request, principal: Writer) -> Response:
    """Run again the dead and cancelled nodes, keeping what succeeded (409 unless failed or cancelled)."""
    return json_response(graph_to_json(await context(request).engine.graphs.retry(graph_id, principal.tenant)))
