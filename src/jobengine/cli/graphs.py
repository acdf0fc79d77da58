"""``jobengine graphs list | show | cancel | retry``: graphs of jobs (:mod:`jobengine.engine.graphs`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, JsonFlag, with_engine
from jobengine.core.graphs import GraphState, GraphStatus
from jobengine.core.ids import short_id
from jobengine.engine import Engine
from jobengine.serialize import graph_to_json

graphs_app = typer.Typer(name="graphs", help="Graphs of jobs: list, show, cancel, retry.", no_args_is_help=True,
                         rich_markup_mode=None)  # fmt: skip

GraphRef = Annotated[str, typer.Argument(metavar="GRAPH", help="The graph's id.", show_default=False)]

GRAPH_STYLES = {
    GraphState.PENDING: "cyan",
    GraphState.RUNNING: "bold yellow",
    GraphState.SUCCEEDED: "green",
    GraphState.FAILED: "bold red",
    GraphState.CANCELLED: "magenta",
}


def graphs_table(graphs: list[GraphStatus]) -> Table:
    """One line per graph: the whole id (what ``graphs show`` takes), state, nodes done of the total."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "STATE", "NODES", "PROGRESS", "CREATED", "TOOK"):
        table.add_column(column, no_wrap=True)
    table.add_column("NAME", no_wrap=True, overflow="ellipsis", max_width=30)
    for g in graphs:
        style = GRAPH_STYLES[g.state]
        took = f"{g.completed_at - g.started_at:.1f}s" if g.completed_at and g.started_at else "-"
        table.add_row(
            g.id, f"[{style}]{g.state.value}[/{style}]", f"{g.done}/{g.total}", output.percent(g.progress),
            output.clock_time(g.created_at, date=True), took, escape(g.name),
        )  # fmt: skip
    return table


def nodes_table(graph: GraphStatus) -> Table:
    """The graph's nodes, parents first: name, task, state, job (short id), parents and failure policy."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NODE", "TASK", "STATE", "JOB", "ATTEMPT", "POLICY", "PARENTS"):
        table.add_column(column, no_wrap=column != "PARENTS")
    for n in graph.nodes:
        table.add_row(
            escape(n.name), escape(n.job.task), output.state_text(n.job.state.value), short_id(n.job.id),
            f"{n.job.attempt}/{n.job.max_attempts}", n.policy.value, escape(", ".join(n.parents)) or "-",
        )  # fmt: skip
    return table


@graphs_app.command("list")
def list_graphs(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.", min=1, max=10_000)] = 50,
    as_json: JsonFlag = False,
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """List graphs, newest first."""
    found = with_engine(config, db, lambda engine: engine.graphs.list(tenant, limit))
    output.emit_list(as_json, found, graph_to_json, graphs_table, "no graphs")


@graphs_app.command("show")
def show_graph(graph_id: GraphRef, as_json: JsonFlag = False, db: DbOption = None, config: ConfigOption = None) -> None:
    """Show a graph, its node counts by state and each node with its job."""

    async def go(engine: Engine) -> GraphStatus:
        return await engine.graphs.get(graph_id, nodes=True)

    graph = with_engine(config, db, go)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(graph.counts.items()) if n)
    output.emit(as_json, graph_to_json(graph), Group(graphs_table([graph]), f"nodes: {counts}", nodes_table(graph)))


@graphs_app.command("cancel")
def cancel_graph(
    graph_id: GraphRef, as_json: JsonFlag = False, db: DbOption = None, config: ConfigOption = None
) -> None:
    """Cancel a graph: its nodes that have not run are cancelled, running ones are asked to stop."""
    graph = with_engine(config, db, lambda engine: engine.graphs.cancel(graph_id))
    output.emit(as_json, graph_to_json(graph), f"cancelled graph {graph.id}: {graph.done}/{graph.total} nodes ended")


@graphs_app.command("retry")
def retry_graph(
    graph_id: GraphRef, as_json: JsonFlag = False, db: DbOption = None, config: ConfigOption = None
) -> None:
    """Run again the dead and cancelled nodes of a failed or cancelled graph; what succeeded is kept."""
    graph = with_engine(config, db, lambda engine: engine.graphs.retry(graph_id))
    kept = graph.counts.get("succeeded", 0)
    text = f"retrying graph {graph.id}: {graph.total - kept} node(s) run again, {kept} succeeded kept"
    output.emit(as_json, graph_to_json(graph), text)
