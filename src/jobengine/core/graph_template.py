"""A graph as a schedule's template: each tick fires one graph of these nodes (:mod:`jobengine.core.graphs`).

Its JSON is the body of ``POST /api/v1/graphs``: ``name``, ``nodes`` (``name``, ``task``, ``payload``,
``queue``, ``priority``, ``max_attempts``, ``timeout``, ``policy``) and ``edges`` (``[parent, child]`` by
node name). It validates in its constructor like every schedule value: a bad node, an edge naming an unknown
node, a cycle or too many nodes raise :class:`~jobengine.errors.InvalidSchedule` naming the field
(``template.nodes.2.task``, ``template.edges``). Usage::

    template = GraphTemplate.from_json({
        "name": "nightly",
        "nodes": [{"name": "extract", "task": "etl.extract"}, {"name": "load", "task": "etl.load"}],
        "edges": [["extract", "load"]],
    })

In Python, ``chain(...)`` / ``group(...)`` / ``chord(...)`` / ``Graph`` give theirs with ``as_template()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Final

from jobengine.core import bounds
from jobengine.core.graphs import MAX_NODES, Policy, order
from jobengine.core.models import MAX_PRIORITY, NAME_RE, Json
from jobengine.errors import InvalidJob, InvalidSchedule

#: The longest timeout a node may have, as for ``POST /api/v1/graphs``.
MAX_TIMEOUT: Final = 366 * 86400.0


def _name(field: str, value: object) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise InvalidSchedule(
            field,
            f"must be 1-200 characters of letters, digits and _.:-@/, starting with a letter or digit (got {value!r})",
        )
    return value


def _int(field: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidSchedule(field, f"must be an integer from {low} to {high}, got {value!r}")


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """One node of a graph template: its name, its task and payload (the arguments by parameter name), its
    options (None: the task's own) and its failure policy; ``after`` names its parents."""

    name: str
    task: str
    payload: Json = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    policy: Policy = Policy.CANCEL
    after: tuple[str, ...] = ()

    @property
    def parents(self) -> tuple[str, ...]:
        return self.after

    def check(self, at: str) -> None:
        """Raise InvalidSchedule naming ``at.<field>`` for a bad field."""
        _name(f"{at}.name", self.name)
        _name(f"{at}.task", self.task)
        if "@" in self.task:
            # A pack's task is pinned to an approved version when a schedule is stored; a graph's nodes
            # are not, so a tick could run a version nobody approved.
            raise InvalidSchedule(f"{at}.task", "a graph template cannot name a pack's task (name@version:task)")
        if self.queue is not None:
            _name(f"{at}.queue", self.queue)
        if self.priority is not None:
            _int(f"{at}.priority", self.priority, -MAX_PRIORITY, MAX_PRIORITY)
        if self.max_attempts is not None:
            _int(f"{at}.max_attempts", self.max_attempts, 1, 1000)
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not 0 < self.timeout <= MAX_TIMEOUT
        ):
            raise InvalidSchedule(f"{at}.timeout", f"must be seconds above 0, at most {MAX_TIMEOUT:.0f}")
        try:
            bounds.check_json(f"{at}.payload", self.payload)
        except InvalidJob as exc:
            raise InvalidSchedule(exc.field, exc.message) from None


@dataclass(frozen=True, slots=True)
class GraphTemplate:
    """The graph each tick of a schedule fires (see the module's docstring). ``nodes`` in the order given;
    edges are each node's ``after``."""

    nodes: tuple[NodeTemplate, ...]
    name: str = "graph"

    def __post_init__(self) -> None:
        _name("template.name", self.name)
        if isinstance(self.nodes, str | bytes | Mapping) or not isinstance(self.nodes, Sequence):
            raise InvalidSchedule("template.nodes", "must be a list of nodes")
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if not self.nodes:
            raise InvalidSchedule("template.nodes", "a graph needs at least one node")
        if len(self.nodes) > MAX_NODES:
            raise InvalidSchedule("template.nodes", f"a graph has at most {MAX_NODES} nodes (got {len(self.nodes)})")
        names: set[str] = set()
        for i, node in enumerate(self.nodes):
            if not isinstance(node, NodeTemplate):
                raise InvalidSchedule(f"template.nodes.{i}", "must be a NodeTemplate")
            node.check(f"template.nodes.{i}")
            if node.name in names:
                raise InvalidSchedule(f"template.nodes.{i}.name", f"node {node.name!r} is named twice")
            names.add(node.name)
        for node in self.nodes:
            for parent in node.after:
                if parent not in names:
                    raise InvalidSchedule("template.edges", f"node {node.name!r} depends on unknown node {parent!r}")
                if parent == node.name:
                    raise InvalidSchedule("template.edges", f"node {node.name!r} depends on itself")
        try:
            order(self.nodes)
        except InvalidJob as exc:
            raise InvalidSchedule("template.edges", exc.message) from None

    def to_json(self) -> dict[str, Json]:
        """The body of ``POST /api/v1/graphs`` that makes this graph."""
        nodes: list[Json] = []
        for n in self.nodes:
            node: dict[str, Json] = {"name": n.name, "task": n.task, "payload": n.payload}
            for key in ("queue", "priority", "max_attempts", "timeout"):
                if getattr(n, key) is not None:
                    node[key] = getattr(n, key)
            if n.policy is not Policy.CANCEL:
                node["policy"] = n.policy.value
            nodes.append(node)
        edges: list[Json] = [[p, n.name] for n in self.nodes for p in n.after]
        return {"name": self.name, "nodes": nodes, "edges": edges}

    @classmethod
    def from_json(cls, d: object) -> GraphTemplate:
        """From the JSON of ``POST /api/v1/graphs`` (an API body, a stored row). Raises InvalidSchedule
        naming the field."""
        if not isinstance(d, Mapping):
            raise InvalidSchedule("template", "must be an object")
        for key in d:
            if key not in ("name", "nodes", "edges"):
                raise InvalidSchedule(f"template.{key}", "unknown field (known: edges, name, nodes)")
        raw_nodes = d.get("nodes")
        if not isinstance(raw_nodes, list):
            raise InvalidSchedule("template.nodes", "must be a list of nodes")
        known = {f.name for f in fields(NodeTemplate)} - {"after"}
        drafts: list[dict[str, object]] = []
        for i, raw in enumerate(raw_nodes):
            if not isinstance(raw, Mapping):
                raise InvalidSchedule(f"template.nodes.{i}", "must be an object with a name and a task")
            for key in raw:
                if key not in known:
                    raise InvalidSchedule(
                        f"template.nodes.{i}.{key}", f"unknown field (known: {', '.join(sorted(known))})"
                    )
            for key in ("name", "task"):
                if key not in raw:
                    raise InvalidSchedule(f"template.nodes.{i}.{key}", "is required")
            draft = {k: v for k, v in raw.items() if v is not None or k == "payload"}
            if "policy" in draft:
                try:
                    draft["policy"] = Policy(draft["policy"])
                except ValueError:
                    choices = ", ".join(p.value for p in Policy)
                    raise InvalidSchedule(f"template.nodes.{i}.policy", f"must be one of {choices}") from None
            drafts.append(draft)
        by_name = {str(n["name"]): n for n in drafts}
        raw_edges = d.get("edges", [])
        if not isinstance(raw_edges, list):
            raise InvalidSchedule("template.edges", "must be a list of [parent, child] pairs")
        parents: dict[str, list[str]] = {name: [] for name in by_name}
        for i, edge in enumerate(raw_edges):
            if not isinstance(edge, list) or len(edge) != 2 or not all(isinstance(e, str) for e in edge):
                raise InvalidSchedule(f"template.edges.{i}", "must be a [parent, child] pair of node names")
            parent, child = edge
            if child not in parents:
                raise InvalidSchedule(f"template.edges.{i}", f"edge names unknown node {child!r}")
            if parent not in parents[child]:
                parents[child].append(parent)
        nodes = tuple(
            NodeTemplate(**{**draft, "after": tuple(parents.get(str(draft["name"]), ()))})  # type: ignore[arg-type]
            for draft in drafts
        )
        return cls(nodes=nodes, name=d.get("name", "graph"))


def is_graph_json(d: object) -> bool:
    """Whether a template's JSON is a graph's (it has ``nodes``) rather than a job template's."""
    return isinstance(d, Mapping) and "nodes" in d
