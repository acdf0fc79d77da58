"""The GraphStore port: graphs of jobs (:mod:`jobengine.core.graphs`), their node rows and outcomes.

A graph and its node jobs are written in one transaction; its state is derived from its nodes' jobs, which
the Store port moves. Implemented once for both SQL backends (:mod:`jobengine.backends.sql.graphs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jobengine.core.graphs import GraphRecord, GraphSpec, GraphState, Node
from jobengine.core.ids import GraphId, JobId
from jobengine.core.models import AddedNode, Changed, Completion, Event, Inserted, NewEvent, NewJob

#: A graph's row, its node counts by job state, the summed progress of its unfinished nodes, and when
#: its first node started.
GraphRow = tuple[GraphRecord, dict[str, int], float, float | None]


class GraphStore(Protocol):
    """Graphs in the store's database."""

    async def insert_graph(
        self, spec: GraphSpec, jobs: Sequence[NewJob], phases: Sequence[tuple[str, ...]], now: float
    ) -> Inserted:
        """The graph, its node rows and ``jobs`` (parents first) in one transaction: all or nothing."""
        ...

    async def get_graphs(self, ids: Sequence[GraphId], tenant: str | None) -> list[GraphRow]:
        """The graphs among ``ids`` that exist (of ``tenant``; None: any)."""
        ...

    async def list_graphs(self, tenant: str | None, limit: int, before: str | None = None) -> list[GraphRow]:
        """Newest first; ``before``: only graphs whose id sorts before it (the next page)."""
        ...

    async def count_graphs(self) -> dict[GraphState, int]:
        """Graphs of every tenant by state (an open graph is pending until one of its nodes started)."""
        ...

    async def nodes(self, graph_id: GraphId) -> list[Node]:
        """The graph's nodes with their jobs as they are now."""
        ...

    async def expand(
        self,
        completion: Completion,
        adding: str,
        nodes: Sequence[AddedNode],
        jobs: Sequence[NewJob],
        phases: Sequence[tuple[str, ...]],
        now: float,
    ) -> Changed:
        """Complete node ``adding`` and store the nodes it adds (``jobs[i]`` runs ``nodes[i]``, parents
        first; a node named in a ``before`` waits for it too) in one transaction, nodes settled as in the
        store's completion. Empty when the lease is no longer held; InvalidJob when the graph refuses them
        (:func:`jobengine.core.graphs.check_in_graph`): nothing is stored then."""
        ...

    async def node_names(self, job_ids: Sequence[JobId]) -> dict[JobId, str]:
        """The node name of each of ``job_ids`` that is a graph node (one batched read)."""
        ...

    async def parent_results(self, job_id: JobId) -> dict[str, Any]:
        """The results of the node's parents that succeeded, by node name (empty for a plain job)."""
        ...

    async def probe(self, graph_id: GraphId) -> tuple[bool, bool]:
        """(some node is unfinished, some node ended dead or cancelled)."""
        ...

    async def mark_pending(self, graph_id: GraphId, job_ids: Sequence[JobId], pending: bool, now: float) -> None:
        """Set whether the nodes wait on a retry; ``pending`` True also reopens the graph (no outcome, not
        cancelled)."""
        ...

    async def mark_cancelled(self, graph_id: GraphId, now: float) -> None:
        """A user cancelled the graph: none of its nodes runs again until a retry."""
        ...

    async def finish(self, graph_id: GraphId, state: GraphState, now: float, event: NewEvent) -> list[Event]:
        """Write the outcome and append ``event`` unless the graph already has an outcome."""
        ...
