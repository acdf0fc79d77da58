"""Building graphs in Python: task calls (``task.s(...)``), and ``chain``, ``group``, ``chord`` or a
:class:`Graph` with named nodes and edges. Usage::

    g = chain(extract.s("2024-05-01"), group(clean.s(), enrich.s()), load.s())
    handle = await engine.graphs.submit(g)

    g = Graph("nightly")
    day = g.add("extract", extract.s("2024-05-01"))
    g.add("load", load.s(), after=[day])
    g.add("cleanup", cleanup.s(), after=[day], policy="always")

A task call holds the arguments of one call, checked against the task's parameters when it is made
(:meth:`jobengine.engine.handles.Task.s`). A node receives its parents' results by node name through
``await ctx.parent_results()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobengine.core.graph_template import GraphTemplate, NodeTemplate
from jobengine.core.graphs import NodeSpec, Policy, policy_of
from jobengine.core.models import Json
from jobengine.errors import InvalidJob


@dataclass(frozen=True, slots=True)
class TaskCall:
    """One call of a task, not yet enqueued: its name, its payload (the arguments by parameter name) and
    its enqueue options (``queue``, ``priority``, ``max_attempts``, ``timeout``; None: the task's own).
    Usage::

        sig = send_welcome.s("ada@example.com", lang="en")
    """

    task: str
    payload: Json = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None


@dataclass(slots=True)
class _Draft:
    sig: TaskCall
    #: An ordered set (a dict): a fan-in of many parents adds each in constant time.
    parents: dict[str, None] = field(default_factory=dict)
    policy: Policy = Policy.CANCEL


class Graph:
    """A graph of named nodes, each a :class:`TaskCall`, and edges between them. Usage::

    g = Graph("report")
    a = g.add("fetch", fetch.s(url))
    g.add("parse", parse.s(), after=[a], policy="continue")
    handle = await engine.graphs.submit(g)
    """

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._nodes: dict[str, _Draft] = {}
        self._suffixes: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._nodes)} nodes)"

    def __len__(self) -> int:
        return len(self._nodes)

    def add(self, name: str, sig: TaskCall, *, after: Iterable[str] = (), policy: Policy | str = Policy.CANCEL) -> str:
        """Add node ``name`` running ``sig`` after the nodes ``after``; return its name. ``policy``: what
        its failure does to the nodes after it (``cancel``, ``continue``), or ``always`` to run it whatever
        its parents ended as. InvalidJob for a name used twice or a policy that does not exist."""
        if name in self._nodes:
            raise InvalidJob("nodes", f"node {name!r} is named twice")
        self._nodes[name] = _Draft(sig, dict.fromkeys(after), policy_of(policy))
        return name

    def edge(self, parent: str, child: str) -> None:
        """``child`` runs after ``parent``."""
        if child not in self._nodes:
            raise InvalidJob("edges", f"unknown node {child!r}")
        self._nodes[child].parents[parent] = None

    def heads(self) -> list[str]:
        """The nodes without parents."""
        return [n for n, d in self._nodes.items() if not d.parents]

    def tails(self) -> list[str]:
        """The nodes no other node runs after."""
        parents = {p for d in self._nodes.values() for p in d.parents}
        return [n for n in self._nodes if n not in parents]

    def _merge(self, other: Graph) -> dict[str, str]:
        """Add ``other``'s nodes (renamed where a name is taken); the new name of each."""
        renamed: dict[str, str] = {}
        taken: set[str] = set()
        for name in other._nodes:
            new = name
            while new in taken or new in self._nodes:
                # The next free suffix of this name: a group of many calls of one task is named in one pass.
                n = self._suffixes.get(name, 1) + 1
                self._suffixes[name] = n
                new = f"{name}-{n}"
            taken.add(new)
            renamed[name] = new
        for name, draft in other._nodes.items():
            self._nodes[renamed[name]] = _Draft(draft.sig, {renamed[p]: None for p in draft.parents}, draft.policy)
        return renamed

    def as_template(self) -> GraphTemplate:
        """The graph as a schedule's template: each tick fires a graph of these nodes. InvalidSchedule
        naming the field for a graph a schedule cannot fire (an edge to an unknown node, a cycle). Usage::

            await engine.schedules.create(ScheduleSpec(name="nightly", cron="0 2 * * *",
                                                       template=chain(fetch.s(url), parse.s()).as_template()))
        """
        nodes = tuple(
            NodeTemplate(
                name=name,
                task=d.sig.task,
                payload=d.sig.payload,
                queue=d.sig.queue,
                priority=d.sig.priority,
                max_attempts=d.sig.max_attempts,
                timeout=d.sig.timeout,
                policy=d.policy,
                after=tuple(d.parents),
            )
            for name, d in self._nodes.items()
        )
        return GraphTemplate(nodes=nodes, name=self.name)

    def node_specs(self, make_job: Any) -> tuple[NodeSpec, ...]:
        """The nodes as :class:`NodeSpec`, their jobs built by ``make_job(signature)``."""
        return tuple(NodeSpec(name, make_job(d.sig), tuple(d.parents), d.policy) for name, d in self._nodes.items())


Part = TaskCall | Graph


def _as_graph(part: Part, name: str) -> Graph:
    if isinstance(part, Graph):
        return part
    if not isinstance(part, TaskCall):
        raise TypeError(f"expected a task call (task.s(...)) or a graph, got {part!r}")
    g = Graph(name)
    g.add(part.task, part)
    return g


def chain(*parts: Part, name: str = "chain") -> Graph:
    """Each part runs after the one before it (after every last node of a group). Usage::

    g = chain(fetch.s(url), parse.s(), store.s())
    """
    out = Graph(name)
    tails: list[str] = []
    for part in parts:
        sub = _as_graph(part, name)
        renamed = out._merge(sub)
        for head in sub.heads():
            for tail in tails:
                out.edge(tail, renamed[head])
        tails = [renamed[t] for t in sub.tails()]
    return out


def group(*parts: Part | Sequence[Part], name: str = "group") -> Graph:
    """The parts side by side, none waiting for another. Usage::

    g = group(resize.s(img, 64), resize.s(img, 128))
    g = group([resize.s(img, w) for w in widths])
    """
    flat: list[Part] = []
    for part in parts:
        if isinstance(part, TaskCall | Graph):
            flat.append(part)
        else:
            flat.extend(part)
    out = Graph(name)
    for part in flat:
        out._merge(_as_graph(part, name))
    return out


def chord(header: Part | Sequence[Part], callback: Part, name: str = "chord") -> Graph:
    """``callback`` runs after every part of ``header`` (a group), with all their results. Usage::

    g = chord([square.s(i) for i in range(100)], total.s())
    """
    return chain(header if isinstance(header, Graph | TaskCall) else group(*header), callback, name=name)
