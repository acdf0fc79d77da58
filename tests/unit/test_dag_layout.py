"""The layout of a graph's page (``dashboard.dag``): layers by longest path, rows ordered by parents, each
layer centred, every edge from a parent's right side to a child's left side."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jobengine.dashboard.dag import BOX_HEIGHT, BOX_WIDTH, GAP_X, GAP_Y, MARGIN, layout
from jobengine.errors import InvalidJob


@dataclass(frozen=True)
class N:
    name: str
    parents: tuple[str, ...] = ()


def fan(width: int) -> list[N]:
    middle = [N(f"m{i}", ("root",)) for i in range(width)]
    return [N("root"), *middle, N("end", tuple(m.name for m in middle))]


def test_a_fan_out_and_fan_in_is_three_layers_each_centred_on_the_widest() -> None:
    d = layout(fan(10))
    boxes = {b.node.name: b for b in d.boxes}
    assert [b.node.name for b in d.boxes] == ["root", *(f"m{i}" for i in range(10)), "end"]
    assert {b.layer for b in d.boxes if b.node.name.startswith("m")} == {1}
    assert (boxes["root"].layer, boxes["end"].layer) == (0, 2)
    xs = [MARGIN + layer * (BOX_WIDTH + GAP_X) for layer in range(3)]
    assert (boxes["root"].x, boxes["m3"].x, boxes["end"].x) == tuple(xs)
    # The middle layer runs top to bottom in submitted order; root and end sit level with its middle.
    ys = [boxes[f"m{i}"].y for i in range(10)]
    assert ys == sorted(ys) and ys[1] - ys[0] == BOX_HEIGHT + GAP_Y
    centre = (ys[0] + ys[-1]) / 2
    assert boxes["root"].y == boxes["end"].y == centre
    assert len(d.edges) == 20
    assert d.width == xs[2] + BOX_WIDTH + MARGIN and d.height == ys[-1] + BOX_HEIGHT + MARGIN


def test_a_node_goes_to_the_layer_of_its_longest_path_and_edges_point_right() -> None:
    # a → b → c, and a → c: c sits after b, not beside it.
    d = layout([N("c", ("a", "b")), N("b", ("a",)), N("a")])
    layers = {b.node.name: b.layer for b in d.boxes}
    assert layers == {"a": 0, "b": 1, "c": 2}
    for path in d.edges:
        x1, x2 = float(path.split()[0][1:]), float(path.split()[-2])
        assert x2 > x1


def test_children_follow_their_parents_rows_so_two_chains_do_not_cross() -> None:
    # Two chains submitted with the second chain's children first: each child is put level with its parent.
    d = layout([N("a"), N("b"), N("b2", ("b",)), N("a2", ("a",))])
    rows = {b.node.name: b.row for b in d.boxes}
    assert (rows["a"], rows["b"]) == (0, 1) and (rows["a2"], rows["b2"]) == (0, 1)


def test_one_node_and_no_node() -> None:
    one = layout([N("only")])
    assert (one.width, one.height, one.edges) == (MARGIN * 2 + BOX_WIDTH, MARGIN * 2 + BOX_HEIGHT, ())
    assert layout([]).boxes == ()


def test_a_cycle_is_refused_naming_the_edges() -> None:
    with pytest.raises(InvalidJob) as err:
        layout([N("a", ("b",)), N("b", ("a",))])
    assert err.value.field == "edges"
