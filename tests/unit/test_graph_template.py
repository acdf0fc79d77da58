"""Graph templates (a schedule that fires a graph): their JSON, the canvas's ``as_template()``, the fields
their errors name, ``engine.periodic(graph=...)``, and what planning makes of one tick."""

from __future__ import annotations

import json

import pytest

from jobengine import Engine
from jobengine.core.graph_template import GraphTemplate
from jobengine.core.graphs import Policy
from jobengine.core.ids import RunId, ScheduleId
from jobengine.core.mapping import TriggerMapping
from jobengine.core.runs import RunState, RunTrigger
from jobengine.core.schedules import ScheduleSpec, template_task
from jobengine.engine.canvas import Graph, TaskCall, chain, chord
from jobengine.engine.compose import open_store
from jobengine.errors import InvalidSchedule
from jobengine.scheduler.planning import new_run, plan_graph
from jobengine.tasks import TaskRegistry

BODY = {
    "name": "etl",
    "nodes": [
        {"name": "extract", "task": "extract", "payload": {"day": 1}, "queue": "io", "timeout": 30.0},
        {"name": "load", "task": "load", "priority": 3, "policy": "continue"},
        {"name": "report", "task": "report", "policy": "always"},
    ],
    "edges": [["extract", "load"], ["load", "report"], ["extract", "report"]],
}


def test_the_json_of_post_graphs_round_trips() -> None:
    template = GraphTemplate.from_json(BODY)
    assert [n.after for n in template.nodes] == [(), ("extract",), ("load", "extract")]
    assert template.nodes[1].policy is Policy.CONTINUE and template.nodes[0].timeout == 30.0
    again = GraphTemplate.from_json(json.loads(json.dumps(template.to_json())))
    assert again == template
    spec = ScheduleSpec.from_json({"name": "nightly", "cron": "0 2 * * *", "template": BODY})
    assert spec.template == template and template_task(spec.template) is None
    assert ScheduleSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_a_canvas_graph_becomes_the_same_template() -> None:
    g = Graph("etl")
    g.add("extract", TaskCall("extract", {"day": 1}, queue="io", timeout=30.0))
    g.add("load", TaskCall("load", priority=3), after=["extract"], policy="continue")
    g.add("report", TaskCall("report"), after=["load", "extract"], policy="always")
    assert g.as_template() == GraphTemplate.from_json(BODY)
    fan = chord([TaskCall("part", {"i": i}) for i in range(3)], TaskCall("sum")).as_template()
    assert [(n.name, n.after) for n in fan.nodes][-1] == ("sum", ("part", "part-2", "part-3"))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"nodes": []}, "template.nodes"),
        ({"nodes": "a"}, "template.nodes"),
        ({"nodes": [{"name": "a"}]}, "template.nodes.0.task"),
        ({"nodes": [{"name": "a", "task": "t", "colour": 1}]}, "template.nodes.0.colour"),
        ({"nodes": [{"name": "a", "task": "t"}], "edges": [["a", "b"]]}, "template.edges.0"),
        ({"nodes": [{"name": "a", "task": "t"}], "edges": [["a"]]}, "template.edges.0"),
        ({"nodes": [{"name": "a", "task": "t"}], "edges": [["a", "a"]]}, "template.edges"),
        ({"nodes": [{"name": "a", "task": "t"}, {"name": "b", "task": "t"}], "edges": [["a", "b"], ["b", "a"]]},
         "template.edges"),
        ({"nodes": [{"name": "a", "task": "t"}, {"name": "a", "task": "u"}]}, "template.nodes.1.name"),
        ({"nodes": [{"name": "a", "task": "pack@1.0.0:t"}]}, "template.nodes.0.task"),
        ({"nodes": [{"name": "a", "task": "t", "policy": "maybe"}]}, "template.nodes.0.policy"),
        ({"nodes": [{"name": "a", "task": "t", "timeout": 0}]}, "template.nodes.0.timeout"),
        ({"nodes": [{"name": "a", "task": "t", "max_attempts": 0}]}, "template.nodes.0.max_attempts"),
        ({"nodes": [{"name": "a", "task": "t"}], "name": "no spaces"}, "template.name"),
        ({"nodes": [{"name": "a", "task": "t"}], "owner": "me"}, "template.owner"),
    ],
)  # fmt: skip
def test_a_bad_graph_template_names_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        ScheduleSpec.from_json({"name": "g", "every": 10, "template": body})
    assert caught.value.field == field


def test_an_event_cannot_be_mapped_into_a_graph() -> None:
    template = GraphTemplate.from_json(BODY)
    assert TriggerMapping.from_json(None).apply(template, {"ref": "x"}) is template  # nothing mapped: as it is
    with pytest.raises(InvalidSchedule) as caught:
        TriggerMapping.from_json({"payload": {"ref": "/ref"}}).apply(template, {"ref": "x"})
    assert caught.value.field == "template"


def test_planning_a_tick_makes_the_graph_of_its_run() -> None:
    tasks = TaskRegistry()
    run = new_run(RunId("01900000-0000-7000-8000-000000000001"), ScheduleId("s"), "acme", RunTrigger.SCHEDULE, 100.0,
                  tick=100.0)  # fmt: skip
    planned = plan_graph(tasks, run, GraphTemplate.from_json(BODY), run_at=107.0)
    assert planned.graph is not None and planned.graph.id == run.id and planned.graph.tenant == "acme"
    assert (planned.run.state, planned.run.summary.total, planned.items) == (RunState.QUEUED, 3, (0, 0, 0))
    jobs = {j.task: j for j in planned.jobs}
    assert planned.jobs[0].task == "extract"  # parents first
    assert set(jobs["report"].depends_on) == {jobs["extract"].id, jobs["load"].id}
    assert {(j.run_id, j.schedule_id, j.tenant, j.run_at) for j in planned.jobs} == {(run.id, "s", "acme", 107.0)}
    assert (jobs["extract"].queue, jobs["extract"].timeout, jobs["load"].priority) == ("io", 30.0, 3)
    assert (jobs["load"].queue, jobs["report"].max_attempts) == ("default", 3)  # unregistered: the defaults


@pytest.fixture
def engine() -> Engine:
    return Engine(open_store("memory"))  # never started: declaring writes nothing


def test_periodic_declares_a_schedule_of_a_graph(engine: Engine) -> None:
    spec = engine.periodic("0 2 * * *", graph=chain(TaskCall("extract"), TaskCall("load")), name="nightly-etl")
    assert engine.periodic.declared == (spec,)
    assert isinstance(spec.template, GraphTemplate) and spec.template.name == "chain"
    assert [(n.name, n.after) for n in spec.template.nodes] == [("extract", ()), ("load", ("extract",))]
    assert engine.periodic.declare(spec) is spec  # the same declaration again is no conflict
    with pytest.raises(InvalidSchedule) as caught:
        engine.periodic("0 2 * * *", graph=chain(TaskCall("a")))  # type: ignore[call-overload]
    assert caught.value.field == "name"
    with pytest.raises(InvalidSchedule) as caught:
        engine.periodic("0 2 * * *", graph=chain(TaskCall("a")), name="x", queue="q")  # type: ignore[call-overload]
    assert caught.value.field == "queue"
