"""Request and response models of ``/api/v1/graphs`` (:mod:`jobengine.http.routes.graphs`): strict like
:mod:`jobengine.http.schemas`, whose field types they reuse."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StrictFloat, StrictInt

from jobengine.core.graphs import MAX_NODES, GraphState, Policy
from jobengine.core.models import MAX_PRIORITY
from jobengine.http.schemas import INTEGRAL, JobOut, Name, Payload, Strict, TaskName


class GraphNodeIn(Strict):
    """One node: its name in the graph, its task and arguments, its options (defaults from the task, if
    this server has it registered) and its failure policy."""

    name: Name
    task: TaskName
    payload: Payload = None
    queue: Name | None = None
    priority: Annotated[StrictInt, Field(ge=-MAX_PRIORITY, le=MAX_PRIORITY), INTEGRAL] | None = None
    max_attempts: Annotated[StrictInt, Field(ge=1, le=1000), INTEGRAL] | None = None
    timeout: Annotated[StrictFloat, Field(gt=0, le=366 * 86400)] | None = None
    policy: Policy = Field(
        Policy.CANCEL,
        description="cancel: its failure cancels the nodes after it; continue: they run anyway; always: it runs "
        "whatever its parents ended as",
    )


class GraphIn(Strict):
    """A graph: nodes, and edges ``[parent, child]`` by node name (the child runs after the parent and
    receives its result)."""

    name: Name = "graph"
    nodes: list[GraphNodeIn] = Field(min_length=1, max_length=MAX_NODES)
    edges: list[Annotated[list[Name], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, max_length=10 * MAX_NODES
    )


class GraphNodeOut(BaseModel):
    name: str
    policy: Policy
    parents: list[str]
    job: JobOut


class GraphOut(BaseModel):
    id: str
    tenant: str
    name: str
    state: GraphState = Field(description="pending, running, then succeeded, failed or cancelled")
    total: int = Field(description="Nodes in the graph")
    done: int = Field(description="Nodes that ended (succeeded, dead or cancelled)")
    progress: float = Field(description="0..1: nodes done, running nodes' phases counted in")
    counts: dict[str, int] = Field(description="Nodes by job state")
    created_at: datetime | None
    updated_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    nodes: list[GraphNodeOut] | None = Field(None, description="The nodes (one graph read alone)")


class GraphPage(BaseModel):
    items: list[GraphOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; null at the end")
