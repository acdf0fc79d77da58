"""Graphs without I/O: what chain, group and chord build, the checks of a GraphSpec, the derived state,
and which nodes run again as others end (core.graphs.settle)."""

from __future__ import annotations

import pytest

from jobengine.core.graphs import (
    MAX_ADDED,
    MAX_NODES,
    GraphRecord,
    GraphSpec,
    GraphState,
    Node,
    NodeSpec,
    Policy,
    check_added,
    check_in_graph,
    derive,
    settle,
)
from jobengine.core.ids import GraphId, JobId
from jobengine.core.models import AddedNode, Job, NewJob
from jobengine.core.states import JobState
from jobengine.engine.canvas import Graph, TaskCall, chain, chord, group
from jobengine.errors import InvalidJob


def call(task: str) -> TaskCall:
    return TaskCall(task, {})


def edges(g: Graph) -> dict[str, list[str]]:
    return {s.name: list(s.parents) for s in g.node_specs(lambda sig: NewJob(sig.task))}


def test_chain_group_and_chord_wire_heads_to_tails() -> None:
    g = chain(call("a"), group(call("b"), call("b")), call("c"), chord([call("d"), call("d")], call("e")))
    assert edges(g) == {
        "a": [], "b": ["a"], "b-2": ["a"], "c": ["b", "b-2"], "d": ["c"], "d-2": ["c"], "e": ["d", "d-2"],
    }  # fmt: skip
    assert g.heads() == ["a"] and g.tails() == ["e"]


def test_a_graph_with_named_nodes_and_policies() -> None:
    g = Graph("etl")
    x = g.add("extract", call("extract"))
    g.add("load", call("load"), after=[x], policy="continue")
    g.add("cleanup", call("cleanup"), after=[x, "load"], policy=Policy.ALWAYS)
    specs = {s.name: s for s in g.node_specs(lambda sig: NewJob(sig.task))}
    assert specs["cleanup"].parents == ("extract", "load") and specs["load"].policy is Policy.CONTINUE
    with pytest.raises(InvalidJob, match="nodes: node 'load' is named twice"):
        g.add("load", call("load"))
    with pytest.raises(InvalidJob, match="policy: must be one of cancel, continue, always"):
        g.add("x", call("x"), policy="later")


def spec(*nodes: tuple[str, tuple[str, ...]]) -> GraphSpec:
    return GraphSpec("g", "default", tuple(NodeSpec(n, NewJob("t"), p) for n, p in nodes))


def test_a_spec_refuses_cycles_unknown_nodes_and_too_many() -> None:
    with pytest.raises(InvalidJob, match="edges: the graph has a cycle through node 'a'"):
        spec(("a", ("c",)), ("b", ("a",)), ("c", ("b",)))
    with pytest.raises(InvalidJob, match="edges: node 'a' depends on unknown node 'z'"):
        spec(("a", ("z",)))
    with pytest.raises(InvalidJob, match="nodes: a graph needs at least one node"):
        spec()
    with pytest.raises(InvalidJob, match=f"at most {MAX_NODES} nodes"):
        spec(*((f"n{i}", ()) for i in range(MAX_NODES + 1)))
    with pytest.raises(InvalidJob, match="tenant: node 'a' belongs to another tenant"):
        GraphSpec("g", "acme", (NodeSpec("a", NewJob("t")),))


def test_a_specs_jobs_come_parents_first_with_their_dependencies() -> None:
    s = spec(("last", ("mid",)), ("mid", ("first",)), ("first", ()))
    jobs = s.jobs()
    ids = {n.name: n.job.id for n in s.nodes}
    assert [j.id for j in jobs] == [ids["first"], ids["mid"], ids["last"]]
    assert jobs[2].depends_on == (ids["mid"],) and jobs[0].depends_on == ()


RECORD = GraphRecord(GraphId("g"), "default", "g", 3, False, None, 0.0, 0.0, None)


def test_the_state_is_derived_from_the_nodes() -> None:
    assert derive(RECORD, {"queued": 1, "blocked": 2}, 0.0) == (GraphState.PENDING, 0)
    assert derive(RECORD, {"running": 1, "blocked": 2}, 0.0) == (GraphState.RUNNING, 0)
    assert derive(RECORD, {"succeeded": 1, "queued": 2}, 0.0) == (GraphState.RUNNING, 1)
    assert derive(RECORD, {"succeeded": 3}, 0.0) == (GraphState.SUCCEEDED, 3)
    assert derive(RECORD, {"succeeded": 2, "dead": 1}, 0.0) == (GraphState.FAILED, 3)
    cancelled = GraphRecord(GraphId("g"), "default", "g", 3, True, None, 0.0, 0.0, None)
    assert derive(cancelled, {"succeeded": 1, "cancelled": 2}, 0.0) == (GraphState.CANCELLED, 3)


def node(name: str, state: JobState, parents: tuple[str, ...] = (), policy: Policy = Policy.CANCEL,
         *, reason: str | None = None, pending: bool = False) -> Node:  # fmt: skip
    job = Job(JobId(name), "default", "default", "t", None, 0, 0.0, state, 1, 3, 0.0, 0.0, reason=reason)
    return Node(name, policy, parents, job, pending)


DEP = "dependency x ended dead"


def test_settle_runs_again_what_a_policy_tolerates_parents_first() -> None:
    nodes = [
        node("a", JobState.DEAD, policy=Policy.CONTINUE),
        node("b", JobState.CANCELLED, ("a",), reason=DEP),
        node("c", JobState.CANCELLED, ("b",), policy=Policy.ALWAYS, reason=DEP),
        node("x", JobState.DEAD),
        node("y", JobState.CANCELLED, ("x",), reason=DEP),
    ]
    revive, drop = settle(nodes, cancelled=False)
    # b runs (a continues); c waits for b, which runs again; y stays cancelled (x cancels).
    assert [n.name for n in revive] == ["b"] and drop == []
    assert settle(nodes, cancelled=True) == ([], [])


def test_settle_after_a_retry_waits_for_parents_and_drops_what_cannot_run() -> None:
    nodes = [
        node("a", JobState.SUCCEEDED),
        node("f", JobState.DEAD, ("a",), pending=True),
        node("s", JobState.CANCELLED, ("a", "f"), reason=DEP, pending=True),
    ]
    revive, drop = settle(nodes, cancelled=False)
    assert [n.name for n in revive] == ["f"] and drop == []
    nodes[1] = node("f", JobState.DEAD, ("a",))  # it failed again
    revive, drop = settle(nodes, cancelled=False)
    assert revive == [] and [n.name for n in drop] == ["s"]
    nodes[1] = node("f", JobState.SUCCEEDED, ("a",))
    assert [n.name for n in settle(nodes, cancelled=False)[0]] == ["s"]


# -- dynamic fan-out: what a node may add (core.graphs.check_added / check_in_graph) -------------------


def test_added_nodes_run_after_the_adding_node_by_default_and_keep_their_order() -> None:
    added = check_added("split", [AddedNode("w1", "t"), AddedNode("w2", "t"), AddedNode("z", "t", after=("w2", "w1"))])
    assert [(n.name, n.after) for n in added] == [("w1", ("split",)), ("w2", ("split",)), ("z", ("w2", "w1"))]
    # Given children first, they are put parents first.
    added = check_added("split", [AddedNode("z", "t", after=("w",)), AddedNode("w", "t")])
    assert [n.name for n in added] == ["w", "z"]


@pytest.mark.parametrize(
    ("nodes", "field", "text"),
    [
        ([AddedNode("x", "t", after=("elsewhere",))], "nodes.after", "not 'elsewhere'"),
        ([AddedNode("x", "t", after=("x",))], "nodes.after", "depends on itself"),
        ([AddedNode("x", "t", after=("y",)), AddedNode("y", "t", after=("x",))], "edges", "cycle"),
        ([AddedNode("x", "t"), AddedNode("x", "t")], "nodes", "named twice"),
        ([AddedNode("split", "t")], "nodes", "named twice"),
        ([AddedNode("x y", "t")], "nodes.name", ""),
        ([AddedNode("x", "t", policy="sometimes")], "policy", "must be one of"),
        ([AddedNode("x", "t", before=("y",)), AddedNode("y", "t")], "nodes.before", "one added with it"),
        ([AddedNode(f"n{i}", "t") for i in range(MAX_ADDED + 1)], "nodes", "at most 1000"),
    ],
)
def test_what_a_node_adds_is_checked_naming_the_field(nodes: list[AddedNode], field: str, text: str) -> None:
    with pytest.raises(InvalidJob) as caught:
        check_added("split", nodes)
    assert caught.value.field == field and text in str(caught.value)


def test_the_stored_graph_must_have_room_free_names_and_before_nodes_waiting_on_the_adder() -> None:
    added = check_added("split", [AddedNode("w", "t", before=("join",))])
    join = node("join", JobState.BLOCKED, ("split",))
    check_in_graph("split", added, 2, set(), {"join": join})  # fine
    with pytest.raises(InvalidJob, match="already in the graph"):
        check_in_graph("split", added, 2, {"w"}, {"join": join})
    with pytest.raises(InvalidJob, match="at most"):
        check_in_graph("split", added, MAX_NODES, set(), {"join": join})
    with pytest.raises(InvalidJob, match="has no node 'join'"):
        check_in_graph("split", added, 2, set(), {})
    for other in (node("join", JobState.BLOCKED, ("other",)), node("join", JobState.QUEUED, ("split",))):
        with pytest.raises(InvalidJob, match="must wait on 'split'"):
            check_in_graph("split", added, 2, set(), {"join": other})
