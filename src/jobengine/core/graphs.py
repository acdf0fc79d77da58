"""Graphs of jobs: a DAG of named nodes, each an ordinary job, submitted as one unit.

A graph's edges are its nodes' ``depends_on``: a node waits for its parents and receives their results by
node name. Its state is derived from its nodes::

    pending ──▶ running ──▶ succeeded      (every node succeeded)
                   │  ├───▶ failed         (every node ended, one did not succeed)
                   │  └───▶ cancelled      (a user cancelled it and every node ended)

A node's failure policy says what its own failure (dead or cancelled) does to the nodes after it:
``cancel`` (the default, what ``depends_on`` does) cancels them; ``continue`` lets them run as if it had
succeeded (its result is then absent from their parents' results). An ``always`` node runs once its
parents ended, whatever they ended as (a cleanup step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final, Protocol, TypeVar

from jobengine.core.ids import GraphId, JobId, new_job_id
from jobengine.core.models import AddedNode, Job, NewJob, check_name
from jobengine.core.states import JobState
from jobengine.errors import InvalidJob

#: The most nodes one graph may have.
MAX_NODES: Final = 10_000
#: The most bytes (as JSON) of parents' results a node receives; past it the node fails at once with
#: :class:`~jobengine.errors.ResultsTooLarge`.
MAX_PARENT_RESULTS: Final = 4 * 1024 * 1024
#: The most nodes one completion may add to its graph (dynamic fan-out); the graph keeps its own limit.
MAX_ADDED: Final = 1_000

GRAPH_COMPLETED: Final = "graph.completed"
GRAPH_FAILED: Final = "graph.failed"
GRAPH_CANCELLED: Final = "graph.cancelled"
#: The events a graph appends to the event log when it ends (its ``data`` holds ``graph_id``, ``name``,
#: ``state``, ``done``, ``total`` and ``duration``: seconds from its submission).
GRAPH_EVENTS: Final = (GRAPH_COMPLETED, GRAPH_FAILED, GRAPH_CANCELLED)


class GraphState(StrEnum):
    """A graph's state, derived from its nodes (see the module's docstring)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ENDED: Final = frozenset({GraphState.SUCCEEDED, GraphState.FAILED, GraphState.CANCELLED})


class Policy(StrEnum):
    """What a node's failure does to the nodes after it, or (``always``) what this node waits for."""

    CANCEL = "cancel"
    CONTINUE = "continue"
    ALWAYS = "always"


def policy_of(value: Policy | str) -> Policy:
    """The policy named ``value``; InvalidJob (``policy``) naming the ones that exist."""
    try:
        return Policy(value)
    except ValueError:
        raise InvalidJob("policy", f"must be one of {', '.join(p.value for p in Policy)} (got {value!r})") from None


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node before it is stored: its name, the job that runs it and the names of its parents."""

    name: str
    job: NewJob
    parents: tuple[str, ...] = ()
    policy: Policy = Policy.CANCEL


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """A graph to submit. Validates in its constructor: node names, unknown parents, cycles, the node
    limit; each raises :class:`InvalidJob` naming the field (``nodes``, ``edges``)."""

    name: str
    tenant: str
    nodes: tuple[NodeSpec, ...]
    id: GraphId = field(default_factory=lambda: GraphId(_new_id()))

    def __post_init__(self) -> None:
        check_name("name", self.name)
        check_name("tenant", self.tenant)
        if not self.nodes:
            raise InvalidJob("nodes", "a graph needs at least one node")
        if len(self.nodes) > MAX_NODES:
            raise InvalidJob("nodes", f"a graph has at most {MAX_NODES} nodes (got {len(self.nodes)})")
        names: set[str] = set()
        for node in self.nodes:
            check_name("nodes.name", node.name)
            if node.name in names:
                raise InvalidJob("nodes", f"node {node.name!r} is named twice")
            names.add(node.name)
            if node.job.tenant != self.tenant:
                raise InvalidJob("tenant", f"node {node.name!r} belongs to another tenant")
        for node in self.nodes:
            for parent in node.parents:
                if parent not in names:
                    raise InvalidJob("edges", f"node {node.name!r} depends on unknown node {parent!r}")
                if parent == node.name:
                    raise InvalidJob("edges", f"node {node.name!r} depends on itself")
        order(self.nodes)  # raises on a cycle

    def jobs(self) -> list[NewJob]:
        """The node jobs in an order where every parent comes before its children, with ``depends_on`` set
        to their parents' job ids."""
        ids = {n.name: n.job.id for n in self.nodes}
        out = []
        for node in order(self.nodes):
            deps = tuple(dict.fromkeys(ids[p] for p in node.parents))
            out.append(_with_deps(node.job, deps))
        return out


def _with_deps(job: NewJob, deps: tuple[JobId, ...]) -> NewJob:
    return replace(job, depends_on=deps) if deps else job


def _new_id() -> str:
    return str(new_job_id())


class _Linked(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def parents(self) -> tuple[str, ...]: ...


L = TypeVar("L", bound=_Linked)


def order(nodes: Sequence[L]) -> list[L]:
    """The nodes parents first (Kahn's algorithm, stable in the given order). InvalidJob (``edges``) naming a
    node on a cycle."""
    by_name = {n.name: n for n in nodes}
    children: dict[str, list[str]] = {n.name: [] for n in nodes}
    waiting = {n.name: len(set(n.parents)) for n in nodes}
    for n in nodes:
        for p in set(n.parents):
            children[p].append(n.name)
    ready = [n.name for n in nodes if waiting[n.name] == 0]
    out: list[L] = []
    while ready:
        name = ready.pop()
        out.append(by_name[name])
        for child in children[name]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(out) != len(nodes):
        stuck = sorted(name for name, n in waiting.items() if n > 0)
        raise InvalidJob("edges", f"the graph has a cycle through node {stuck[0]!r}")
    return out


@dataclass(frozen=True, slots=True)
class Node:
    """A stored node: its name, policy, parents' names, and its job as it is now."""

    name: str
    policy: Policy
    parents: tuple[str, ...]
    job: Job
    #: A retry of the graph runs it again once its parents succeeded.
    pending: bool = False


@dataclass(frozen=True, slots=True)
class GraphRecord:
    """A graph's row: what does not change with its nodes, and its outcome once written."""

    id: GraphId
    tenant: str
    name: str
    total: int
    cancelled: bool
    state: GraphState | None
    created_at: float
    updated_at: float
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class GraphStatus:
    """A graph as it is now: its ``state`` derived from its nodes' states (:func:`derive`), ``done`` of
    ``total`` nodes ended, ``progress`` (0..1, phases of running nodes included)."""

    id: GraphId
    tenant: str
    name: str
    state: GraphState
    total: int
    done: int
    progress: float
    created_at: float
    updated_at: float
    started_at: float | None
    completed_at: float | None
    #: Node counts by job state.
    counts: Mapping[str, int]
    #: The nodes, when read with them (one graph), else empty.
    nodes: tuple[Node, ...] = ()

    @property
    def ended(self) -> bool:
        """Succeeded, failed or cancelled: its outcome is written and no node runs."""
        return self.state in ENDED


def derive(record: GraphRecord, counts: Mapping[str, int], progress_sum: float) -> tuple[GraphState, int]:
    """The state of a graph from its node counts by state, and how many nodes ended. ``progress_sum``:
    the sum of the unfinished nodes' progress."""
    total = sum(counts.values())
    ended = {JobState.SUCCEEDED.value, JobState.DEAD.value, JobState.CANCELLED.value, JobState.STALE.value}
    done = sum(n for s, n in counts.items() if s in ended)
    if total and done == total:
        if record.cancelled:
            return GraphState.CANCELLED, done
        ok = counts.get(JobState.SUCCEEDED.value, 0) + counts.get(JobState.STALE.value, 0)
        return (GraphState.SUCCEEDED if ok == total else GraphState.FAILED), done
    waiting = {JobState.BLOCKED.value, JobState.QUEUED.value, JobState.SCHEDULED.value}
    if done == 0 and progress_sum == 0 and all(s in waiting for s, n in counts.items() if n):
        return GraphState.PENDING, done
    return GraphState.RUNNING, done


_UNFINISHED: Final = frozenset(
    {JobState.BLOCKED, JobState.SCHEDULED, JobState.QUEUED, JobState.RUNNING, JobState.FAILED}
)


def settle(nodes: Sequence[Node], cancelled: bool) -> tuple[list[Node], list[Node]]:
    """What to do, as nodes ended, beyond what the store did: the nodes to run again now (cancelled by a
    parent's failure that a policy tolerates, or waiting on a retry of the graph, whose parents all
    ended in a way that lets them run), and the nodes a retry waited on that can no longer run (a parent
    failed again). Nothing runs again in a cancelled graph; its waiting nodes are dropped.

    Parents first: a node that runs again is not ended for its children, so an ``always`` node waits for
    a parent that runs again instead of running beside it."""
    revive: list[Node] = []
    drop: list[Node] = []
    ended: dict[str, JobState | None] = {}
    by_name = {n.name: n for n in nodes}
    for n in order(nodes):
        state = n.job.final_state
        waiting = n.pending and state in (JobState.DEAD, JobState.CANCELLED)
        tolerated = state is JobState.CANCELLED and (n.job.reason or "").startswith("dependency ")
        if state in _UNFINISHED:
            ended[n.name] = None
            continue
        if cancelled or not (waiting or tolerated):
            if waiting:
                drop.append(n)
            ended[n.name] = state
            continue
        edges = [_edge(ended[p], by_name[p], n) for p in n.parents]
        if all(e is True for e in edges):
            revive.append(n)
            ended[n.name] = None
        elif any(e is False for e in edges):
            if waiting:
                drop.append(n)
            ended[n.name] = state
        else:
            ended[n.name] = None  # a parent has not ended (or runs again): decided when it has
    return revive, drop


def _edge(parent_state: JobState | None, parent: Node, child: Node) -> bool | None:
    """Whether ``child`` may run as far as ``parent`` goes: True (it succeeded, or its failure is
    tolerated), False (its failure cancels ``child``), None (it has not ended)."""
    if parent_state is None:
        return None
    if parent_state is JobState.SUCCEEDED:
        return True
    return parent.policy is Policy.CONTINUE or child.policy is Policy.ALWAYS


@dataclass(frozen=True, slots=True)
class _Link:
    name: str
    parents: tuple[str, ...]


def check_added(adding: str, nodes: Sequence[AddedNode]) -> list[AddedNode]:
    """The nodes that node ``adding`` adds, parents first, each ``after`` filled in (the adding node when
    empty). InvalidJob naming the field for too many nodes, a bad or repeated name, a policy that does not
    exist, an ``after`` outside the adding node and the nodes added with it, a cycle, or a ``before`` that
    names a node added with it. What the stored graph must allow is checked by :func:`check_in_graph`."""
    if len(nodes) > MAX_ADDED:
        raise InvalidJob("nodes", f"a node adds at most {MAX_ADDED} nodes at once (got {len(nodes)})")
    names: set[str] = set()
    for node in nodes:
        check_name("nodes.name", node.name)
        if node.name in names or node.name == adding:
            raise InvalidJob("nodes", f"node {node.name!r} is named twice")
        names.add(node.name)
        policy_of(node.policy)
    filled: list[AddedNode] = []
    for node in nodes:
        after = tuple(dict.fromkeys(node.after)) or (adding,)
        for parent in after:
            if parent != adding and parent not in names:
                raise InvalidJob(
                    "nodes.after",
                    f"node {node.name!r} may run after {adding!r} or a node added with it, not {parent!r}",
                )
            if parent == node.name:
                raise InvalidJob("nodes.after", f"node {node.name!r} depends on itself")
        for child in node.before:
            if child in names or child == adding:
                raise InvalidJob(
                    "nodes.before",
                    f"node {node.name!r}: before names a node already in the graph, not {child!r}, one added with it",
                )
        filled.append(replace(node, after=after, before=tuple(dict.fromkeys(node.before))))
    seen = {adding}
    for node in filled:
        if not seen.issuperset(node.after):
            break
        seen.add(node.name)
    else:
        return filled  # parents first already: kept in the order they were added
    by_name = {n.name: n for n in filled}
    links = [_Link(n.name, tuple(p for p in n.after if p != adding)) for n in filled]
    return [by_name[link.name] for link in order(links)]


def check_in_graph(
    adding: str, nodes: Sequence[AddedNode], total: int, taken: set[str], before: Mapping[str, Node]
) -> None:
    """What the stored graph must allow for ``nodes`` (from :func:`check_added`): names not taken (``taken``:
    the names among theirs that the graph has), room under :data:`MAX_NODES` (``total``: its nodes now),
    and each ``before`` node (``before``: those the graph has, by name) waiting on the adding node, so it
    has not started. InvalidJob naming the field."""
    if taken:
        raise InvalidJob("nodes", f"node {sorted(taken)[0]!r} is already in the graph")
    if total + len(nodes) > MAX_NODES:
        raise InvalidJob("nodes", f"a graph has at most {MAX_NODES} nodes ({total} + {len(nodes)} added)")
    for node in nodes:
        for child in node.before:
            found = before.get(child)
            if found is None:
                raise InvalidJob("nodes.before", f"node {node.name!r}: the graph has no node {child!r}")
            if adding not in found.parents or found.job.state is not JobState.BLOCKED:
                raise InvalidJob(
                    "nodes.before", f"node {child!r} must wait on {adding!r} to wait on node {node.name!r} too"
                )
