"""``jobengine flow list | show | set | clear | scale``: a queue's flow limits (stored in the database, shared by
every process; the ``flow_limits`` setting gives defaults) and its scale signals."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, JsonFlag, with_engine
from jobengine.core.flow.limits import FlowLimits
from jobengine.errors import NotFound

flow_app = typer.Typer(
    name="flow", help="Flow control: rate, concurrency and depth limits of queues.", no_args_is_help=True,
    rich_markup_mode=None,
)  # fmt: skip


def _print_limits(limits: dict[str, FlowLimits], json_out: bool) -> None:
    if json_out:
        output.print_json({q: lim.to_json() for q, lim in sorted(limits.items())})
        return
    table = Table("queue", "rate", "burst", "per", "concurrency", "key", "soft", "hard", "adaptive", box=None)
    for q, lim in sorted(limits.items()):
        cells = [lim.rate, lim.burst, lim.rate_per, lim.concurrency, lim.concurrency_key, lim.soft_limit,
                 lim.hard_limit, f"{lim.rate_floor}-{lim.rate_ceiling}" if lim.adaptive else "no"]  # fmt: skip
        table.add_row(escape(q), *("-" if c is None else escape(str(c)) for c in cells))
    output.stdout().print(table)


def _limits(db: str | None, config: Path | None) -> dict[str, FlowLimits]:
    return with_engine(config, db, lambda engine: engine.flow.limits(fresh=True))


@flow_app.command("list")
def list_limits(db: DbOption = None, config: ConfigOption = None, json_out: JsonFlag = False) -> None:
    """The flow limits in force, every queue that has some."""
    _print_limits(_limits(db, config), json_out)


@flow_app.command("show")
def show(
    queue: Annotated[str, typer.Argument(help="The queue (`jobengine flow list` shows them all).")],
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """The flow limits in force on one queue."""
    limits = _limits(db, config)
    if queue not in limits:
        raise NotFound("flow limits of queue", queue)
    _print_limits({queue: limits[queue]}, json_out)


@flow_app.command("set")
def set_limits(
    queue: Annotated[str, typer.Argument(help="The queue.")],
    rate: Annotated[float | None, typer.Option(help="Job starts a second (token bucket).")] = None,
    burst: Annotated[int | None, typer.Option(help="Tokens the bucket holds at most.")] = None,
    rate_per: Annotated[str, typer.Option(help="queue, tenant or task: one bucket per ...")] = "queue",
    concurrency: Annotated[int | None, typer.Option(help="Running jobs at most per --concurrency-key.")] = None,
    concurrency_key: Annotated[str | None, typer.Option(help="task, tenant or payload.<field>.")] = None,
    soft_limit: Annotated[int | None, typer.Option(help="Depth past which enqueues are flagged.")] = None,
    hard_limit: Annotated[int | None, typer.Option(help="Depth past which enqueues are refused.")] = None,
    adaptive: Annotated[bool, typer.Option(help="Steer the rate by errors and latency (AIMD).")] = False,
    rate_floor: Annotated[float | None, typer.Option(help="Adaptive: the lowest rate.")] = None,
    rate_ceiling: Annotated[float | None, typer.Option(help="Adaptive: the highest rate.")] = None,
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Replace the queue's flow limits (options left out are unset)."""
    fields: dict[str, Any] = {"rate": rate, "burst": burst, "rate_per": rate_per, "concurrency": concurrency,
                              "concurrency_key": concurrency_key, "soft_limit": soft_limit, "hard_limit": hard_limit,
                              "adaptive": adaptive, "rate_floor": rate_floor, "rate_ceiling": rate_ceiling}  # fmt: skip
    limits = with_engine(config, db, lambda engine: engine.flow.set_limits(queue, **fields), must_exist=False)
    _print_limits({queue: limits}, json_out)


@flow_app.command("clear")
def clear(
    queue: Annotated[str, typer.Argument(help="The queue.")], db: DbOption = None, config: ConfigOption = None
) -> None:
    """Remove the queue's stored flow limits (configured ones, if any, apply again)."""
    with_engine(config, db, lambda engine: engine.flow.clear_limits(queue))
    output.stdout().print(f"flow limits of {escape(queue)} cleared")


@flow_app.command("scale")
def scale(
    queue: Annotated[str, typer.Argument(help="The queue.")],
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Depth and running jobs of the queue (throughput and latencies are a serving process's: see
    ``GET /api/v1/queues/{queue}/scale``)."""
    report = asdict(with_engine(config, db, lambda engine: engine.flow.scale(queue)))
    if json_out:
        output.print_json(report)
        return
    table = Table("signal", "value", box=None)
    for key, value in report.items():
        table.add_row(key, escape(str(value)))
    output.stdout().print(table)
