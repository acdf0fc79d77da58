"""Graphs of jobs over HTTP (``ApiClient.graphs``): submit a DAG of named nodes as one unit, read it, list,
cancel, retry and wait for it. The JSON is ``/api/v1/graphs``'s (:mod:`jobengine.http.graph_schemas`); the
answers are typed (:class:`GraphInfo`). Needs a key with ``graph:write`` (submit, cancel, retry) and
``graph:read`` (the rest).

Failure policy: the calls retry as every :class:`~jobengine.sdk.ApiClient` call does; a refused call raises
:class:`~jobengine.sdk.ApiError` with the server's problem (422 naming the field for a bad graph, 404 for
an unknown one, 409 to cancel an ended graph or retry one that did not fail). Usage::

    async with ApiClient(url, key) as api:
        info = await api.graphs.submit(
            [GraphNode("extract", "extract", {"day": "2024-05-01"}),
             GraphNode("load", "load", after=["extract"], policy="continue"),
             GraphNode("cleanup", "cleanup", after=["extract", "load"], policy="always")],
            name="nightly",
        )
        done = await api.graphs.wait(info.id, timeout=600)
        if done.state is GraphState.FAILED:
            await api.graphs.retry(done.id)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from jobengine.core.graphs import ENDED, GraphState, Policy

if TYPE_CHECKING:
    from jobengine.sdk.client import ApiClient

#: Seconds between reads while waiting, at first; the gap doubles up to :data:`MAX_POLL`.
FIRST_POLL = 0.1
MAX_POLL = 2.0


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A node to submit: its name in the graph, its task and payload, the nodes it runs ``after`` (edges
    ``[parent, this]``), its options (None: the task's default on the server) and its failure ``policy``
    (``cancel``, ``continue`` or ``always``, see :class:`jobengine.core.graphs.Policy`)."""

    name: str
    task: str
    payload: Any = None
    after: Sequence[str] = ()
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    policy: Policy | str = Policy.CANCEL

    def to_json(self) -> dict[str, Any]:
        """The node as ``POST /api/v1/graphs`` takes it (its ``after`` goes to the graph's edges)."""
        options = {"queue": self.queue, "priority": self.priority, "max_attempts": self.max_attempts,
                   "timeout": self.timeout}  # fmt: skip
        policy = self.policy.value if isinstance(self.policy, Policy) else self.policy
        return {"name": self.name, "task": self.task, "payload": self.payload, "policy": policy,
                **{k: v for k, v in options.items() if v is not None}}  # fmt: skip


@dataclass(frozen=True, slots=True)
class GraphNodeInfo:
    """A stored node: its name, policy, parents' names and its job (the JSON of ``GET /api/v1/jobs/{id}``)."""

    name: str
    policy: Policy
    parents: tuple[str, ...]
    job: Mapping[str, Any]

    @property
    def state(self) -> str:
        """Its job's state (``succeeded``, ``dead``, ``running``...)."""
        return str(self.job["state"])


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """A graph as the API shows it: ``state`` (pending, running, then succeeded, failed or cancelled),
    ``done`` of ``total`` nodes ended, ``progress`` (0..1), node ``counts`` by job state, and its ``nodes``
    when it was read alone (:meth:`Graphs.get`), else empty."""

    id: str
    tenant: str
    name: str
    state: GraphState
    total: int
    done: int
    progress: float
    counts: Mapping[str, int]
    created_at: datetime | None
    updated_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    nodes: tuple[GraphNodeInfo, ...] = field(default=())

    @property
    def ended(self) -> bool:
        """Succeeded, failed or cancelled: its outcome is written and no node runs."""
        return self.state in ENDED

    @property
    def results(self) -> dict[str, Any]:
        """The results of the nodes that succeeded, by node name (empty unless read with its nodes)."""
        return {n.name: n.job.get("result") for n in self.nodes if n.state == "succeeded"}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GraphInfo:
        """From the API's ``GraphOut`` JSON."""
        nodes = tuple(
            GraphNodeInfo(n["name"], Policy(n["policy"]), tuple(n["parents"]), n["job"]) for n in d.get("nodes") or ()
        )
        return cls(
            id=d["id"], tenant=d["tenant"], name=d["name"], state=GraphState(d["state"]), total=int(d["total"]),
            done=int(d["done"]), progress=float(d["progress"]), counts=dict(d.get("counts") or {}),
            created_at=_time(d.get("created_at")), updated_at=_time(d.get("updated_at")),
            started_at=_time(d.get("started_at")), completed_at=_time(d.get("completed_at")), nodes=nodes,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class GraphPage:
    """A page of graphs, newest first; pass ``next_cursor`` to :meth:`Graphs.list` for the next (None at
    the end)."""

    items: list[GraphInfo]
    next_cursor: str | None


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def graph_body(
    nodes: Iterable[GraphNode | Mapping[str, Any]], edges: Iterable[Sequence[str]] = (), name: str = "graph"
) -> dict[str, Any]:
    """The JSON of ``POST /api/v1/graphs``: ``nodes`` as :class:`GraphNode` or as the API's node objects,
    ``edges`` as ``[parent, child]`` pairs added to the nodes' ``after``."""
    out_nodes: list[dict[str, Any]] = []
    out_edges: list[list[str]] = []
    for node in nodes:
        if isinstance(node, GraphNode):
            out_nodes.append(node.to_json())
            out_edges.extend([parent, node.name] for parent in node.after)
        else:
            out_nodes.append(dict(node))
    out_edges.extend(list(edge) for edge in edges)
    return {"name": name, "nodes": out_nodes, "edges": out_edges}


class Graphs:
    """The graph calls of an :class:`~jobengine.sdk.ApiClient` (``api.graphs``); see the module's docstring."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    async def submit(
        self,
        nodes: Iterable[GraphNode | Mapping[str, Any]],
        edges: Iterable[Sequence[str]] = (),
        *,
        name: str = "graph",
        idempotency_key: str | None = None,
    ) -> GraphInfo:
        """``POST /api/v1/graphs``: store the graph and every node job at once (all or nothing); nodes
        without parents are queued. Sent with an ``Idempotency-Key`` (a new random one unless given), so a
        call retried after a lost answer cannot submit twice."""
        body = graph_body(nodes, edges, name)
        key = idempotency_key or uuid.uuid4().hex
        return GraphInfo.from_json(await self._api.post("/api/v1/graphs", body, idempotency_key=key))

    async def get(self, graph_id: str) -> GraphInfo:
        """The graph (by id or a unique prefix of it) with its nodes and their jobs."""
        return GraphInfo.from_json(await self._api.get(_path(graph_id)))

    async def list(self, *, limit: int = 50, cursor: str | None = None) -> GraphPage:
        """The key's tenant's graphs, newest first, without their nodes."""
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        page = await self._api.get("/api/v1/graphs", params)
        return GraphPage([GraphInfo.from_json(g) for g in page["items"]], page.get("next_cursor"))

    async def cancel(self, graph_id: str) -> GraphInfo:
        """Cancel the nodes that have not run and ask running ones to stop; the graph ends ``cancelled``
        once they all ended."""
        return GraphInfo.from_json(await self._api.post(_path(graph_id) + "/cancel"))

    async def retry(self, graph_id: str) -> GraphInfo:
        """Run again the dead and cancelled nodes of a failed or cancelled graph; what succeeded keeps its
        result."""
        return GraphInfo.from_json(await self._api.post(_path(graph_id) + "/retry"))

    async def wait(self, graph_id: str, timeout: float = 30.0) -> GraphInfo:
        """The graph (with its nodes) once it ended, by reads of it at growing gaps (0.1 s up to 2 s);
        TimeoutError after ``timeout`` seconds (the graph goes on), ApiError (404) for an unknown one."""
        if timeout < 0:
            raise ValueError("timeout: must not be negative")
        deadline = time.monotonic() + timeout
        gap = FIRST_POLL
        while True:
            graph = await self.get(graph_id)
            if graph.ended:
                return graph
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"graph {graph_id} is still {graph.state.value} after {timeout:g}s")
            await asyncio.sleep(min(gap, remaining))
            gap = min(MAX_POLL, gap * 2)


def _path(graph_id: str) -> str:
    return f"/api/v1/graphs/{quote(graph_id, safe='')}"
