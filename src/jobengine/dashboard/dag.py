"""Where a graph's nodes go on its page: layers by depth, left to right, drawn as server-rendered SVG.

A node's layer is the length of the longest path to it from a node without parents, so every edge points
to the right. Inside a layer, nodes are sorted by the mean row of their parents (one pass, parents first),
which keeps fan-outs and fan-ins untangled without a layout library; each layer is centred on the tallest.
Usage::

    drawing = layout(status.nodes)
    for box in drawing.boxes: ...          # x, y of each node's rectangle
    for edge in drawing.edges: ...         # an SVG path from a parent's right side to a child's left side
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from jobengine.core.graphs import order

#: A node's rectangle and the space around it, in SVG user units (CSS pixels at scale 1).
BOX_WIDTH: Final = 150
BOX_HEIGHT: Final = 40
GAP_X: Final = 60
GAP_Y: Final = 14
MARGIN: Final = 10


class _Linked(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def parents(self) -> tuple[str, ...]: ...


N = TypeVar("N", bound=_Linked)


@dataclass(frozen=True, slots=True)
class Box(Generic[N]):
    """A node placed: its top-left corner, its layer (depth) and its row within the layer."""

    node: N
    x: float
    y: float
    layer: int
    row: int


@dataclass(frozen=True, slots=True)
class Drawing(Generic[N]):
    """A graph laid out: its size, its boxes (layer by layer, top to bottom) and its edges as SVG path data."""

    width: float
    height: float
    boxes: tuple[Box[N], ...]
    edges: tuple[str, ...]


def layout(nodes: Sequence[N]) -> Drawing[N]:
    """The drawing of ``nodes`` (a DAG: parents named by :attr:`parents`). InvalidJob on a cycle, as
    :func:`jobengine.core.graphs.order` raises; an empty graph is an empty drawing."""
    ordered = order(nodes)
    submitted = {n.name: i for i, n in enumerate(nodes)}
    depth: dict[str, int] = {}
    for n in ordered:
        depth[n.name] = 1 + max((depth[p] for p in n.parents), default=-1)
    layers: list[list[N]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n in ordered:
        layers[depth[n.name]].append(n)
    row: dict[str, int] = {}
    for members in layers:
        # Parents sit in earlier layers, so their rows are known here; ties (and roots) keep the submitted order.
        members.sort(key=lambda n: (_mean([row[p] for p in n.parents]) if n.parents else 0.0, submitted[n.name]))
        for i, n in enumerate(members):
            row[n.name] = i
    tallest = max((len(m) for m in layers), default=0)
    boxes: list[Box[N]] = []
    for layer, members in enumerate(layers):
        offset = (tallest - len(members)) * (BOX_HEIGHT + GAP_Y) / 2
        for i, n in enumerate(members):
            x = MARGIN + layer * (BOX_WIDTH + GAP_X)
            boxes.append(Box(n, x, MARGIN + offset + i * (BOX_HEIGHT + GAP_Y), layer, i))
    placed = {b.node.name: b for b in boxes}
    edges = tuple(_edge(placed[p], b) for b in boxes for p in dict.fromkeys(b.node.parents))
    width = MARGIN * 2 + max(len(layers), 1) * BOX_WIDTH + max(len(layers) - 1, 0) * GAP_X
    height = MARGIN * 2 + max(tallest, 1) * BOX_HEIGHT + max(tallest - 1, 0) * GAP_Y
    return Drawing(width, height, tuple(boxes), edges)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _edge(parent: Box[N], child: Box[N]) -> str:
    """A curve from the middle of the parent's right side to the middle of the child's left side."""
    x1, y1 = parent.x + BOX_WIDTH, parent.y + BOX_HEIGHT / 2
    x2, y2 = child.x, child.y + BOX_HEIGHT / 2
    mid = (x1 + x2) / 2
    return f"M{x1:g} {y1:g} C{mid:g} {y1:g} {mid:g} {y2:g} {x2:g} {y2:g}"
