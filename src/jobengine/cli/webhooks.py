"""``jobengine webhooks create | list | show | disable | enable | delete | rotate-secret | deliveries | resend``:
webhook endpoints of a tenant and their deliveries (the same checks as the API: SSRF, filters, limits)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, JsonFlag, with_engine
from jobengine.core.ids import short_id
from jobengine.core.webhooks.jsonshape import attempt_to_json, delivery_to_json, endpoint_to_json
from jobengine.core.webhooks.model import InvalidWebhook, check_filter
from jobengine.engine import Engine

webhooks_app = typer.Typer(
    name="webhooks", help="Manage webhook endpoints and deliveries.", no_args_is_help=True, rich_markup_mode=None
)

Tenant = Annotated[str, typer.Option(help="The tenant the endpoint belongs to.")]
EndpointId = Annotated[str, typer.Argument(help="The endpoint's id (we_…) or a unique prefix of it.")]


def filter_text(flt: dict[str, list[str]]) -> str:
    """The filter as people read it: ``types job.dead, job.failed · queues any · tasks any``."""
    return " · ".join(f"{key} {', '.join(flt.get(key) or []) or 'any'}" for key in ("types", "queues", "tasks"))


def _print_endpoint(data: dict[str, Any], json_out: bool) -> None:
    if json_out:
        output.print_json(data)
        return
    table = Table(box=None, show_header=False)
    for key, value in data.items():
        text = filter_text(value) if key == "filter" else str(value) if value is not None else ""
        table.add_row(key, escape(text))
    output.stdout().print(table)


@webhooks_app.command("create")
def create(
    url: Annotated[str, typer.Option(help="Where deliveries are POSTed (http or https; checked against SSRF).")],
    tenant: Tenant = "default",
    event_type: Annotated[
        list[str] | None,
        typer.Option("--type", help="Repeatable: an event type (job.dead), a family (job.*) or * [default: all]."),
    ] = None,
    queue: Annotated[list[str] | None, typer.Option("--queue", help="Repeatable: only events of these queues.")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Repeatable: only events of these tasks.")] = None,
    secret: Annotated[str | None, typer.Option(help="whsec_<base64> [default: a new random one].")] = None,
    rate_limit: Annotated[int | None, typer.Option(help="Deliveries per window [default: webhook_rate_limit].")] = None,
    rate_window: Annotated[float | None, typer.Option(help="Seconds [default: webhook_rate_window].")] = None,
    description: Annotated[str, typer.Option(help="A label.")] = "",
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Register an endpoint and print it with its signing secret (shown this once)."""
    flt = {"types": event_type or [], "queues": queue or [], "tasks": task or []}
    try:
        check_filter(flt)  # before opening the database, and naming the option that was given
    except InvalidWebhook as exc:
        raise InvalidWebhook(exc.field.removeprefix("filter.").removesuffix("s"), exc.message) from None

    async def go(engine: Engine) -> dict[str, Any]:
        endpoint = await engine.webhooks.create_endpoint(
            tenant, url, secret=secret, filter=flt, description=description, rate_limit=rate_limit,
            rate_window=rate_window,
        )  # fmt: skip
        return endpoint_to_json(endpoint, with_secret=True)

    _print_endpoint(with_engine(config, db, go, must_exist=False), json_out)


@webhooks_app.command("list")
def list_endpoints(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's endpoints [default: all].")] = None,
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """List endpoints (never their secrets)."""

    async def go(engine: Engine) -> list[dict[str, Any]]:
        return [endpoint_to_json(e) for e in await engine.webhooks.list_endpoints(tenant)]

    items = with_engine(config, db, go)
    if json_out:
        output.print_json(items)
        return
    table = Table("id", "tenant", "url", "enabled", "filter", "failing since", box=None)
    for e in items:
        table.add_row(short_id(e["id"]), escape(e["tenant"]), escape(e["url"]), "yes" if e["enabled"] else "no",
                      escape(filter_text(e["filter"])), e["failing_since"] or "")  # fmt: skip
    output.stdout().print(table)


def _one(
    endpoint_id: str, tenant: str, db: str | None, config: Any, json_out: bool,
    act: Callable[[Engine], Awaitable[Any]],
) -> None:  # fmt: skip
    async def go(engine: Engine) -> dict[str, Any]:
        result = await act(engine)
        return endpoint_to_json(result if result is not None else
                                await engine.webhooks.get_endpoint(endpoint_id, tenant))  # fmt: skip

    _print_endpoint(with_engine(config, db, go), json_out)


@webhooks_app.command("show")
def show(endpoint_id: EndpointId, tenant: Tenant = "default", db: DbOption = None, config: ConfigOption = None,
         json_out: JsonFlag = False) -> None:  # fmt: skip
    """One endpoint."""
    _one(endpoint_id, tenant, db, config, json_out, lambda e: e.webhooks.get_endpoint(endpoint_id, tenant))


@webhooks_app.command("disable")
def disable(endpoint_id: EndpointId, tenant: Tenant = "default", db: DbOption = None, config: ConfigOption = None,
            json_out: JsonFlag = False) -> None:  # fmt: skip
    """Stop sending to it (its deliveries wait)."""
    _one(endpoint_id, tenant, db, config, json_out, lambda e: e.webhooks.set_enabled(endpoint_id, tenant, False))


@webhooks_app.command("enable")
def enable(endpoint_id: EndpointId, tenant: Tenant = "default", db: DbOption = None, config: ConfigOption = None,
           json_out: JsonFlag = False) -> None:  # fmt: skip
    """Send to it again (clears why it was disabled)."""
    _one(endpoint_id, tenant, db, config, json_out, lambda e: e.webhooks.set_enabled(endpoint_id, tenant, True))


@webhooks_app.command("rotate-secret")
def rotate(endpoint_id: EndpointId, tenant: Tenant = "default",
           overlap: Annotated[float | None, typer.Option(help="Seconds the old secret still signs.")] = None,
           db: DbOption = None, config: ConfigOption = None, json_out: JsonFlag = False) -> None:  # fmt: skip
    """A new secret (printed once); the old one also signs for the overlap."""

    async def go(engine: Engine) -> dict[str, Any]:
        endpoint = await engine.webhooks.rotate_secret(endpoint_id, tenant, overlap=overlap)
        return endpoint_to_json(endpoint, with_secret=True)

    _print_endpoint(with_engine(config, db, go), json_out)


@webhooks_app.command("delete")
def delete(endpoint_id: EndpointId, tenant: Tenant = "default", db: DbOption = None,
           config: ConfigOption = None) -> None:  # fmt: skip
    """Delete the endpoint with its deliveries."""
    with_engine(config, db, lambda e: e.webhooks.delete_endpoint(endpoint_id, tenant))
    output.stdout().print(f"deleted {escape(endpoint_id)}")


@webhooks_app.command("deliveries")
def deliveries(
    tenant: Tenant = "default",
    endpoint: Annotated[str | None, typer.Option(help="Only this endpoint's.")] = None,
    state: Annotated[str | None, typer.Option(help="pending, succeeded or failed.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    attempts: Annotated[bool, typer.Option("--attempts", help="With every attempt.")] = False,
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Deliveries, newest first (with --attempts: status, latency and error of each attempt)."""

    async def go(engine: Engine) -> list[dict[str, Any]]:
        found = await engine.webhooks.list_deliveries(tenant, endpoint, state, limit)
        out = []
        for d in found:
            item = delivery_to_json(d)
            if attempts:
                item["attempts_made"] = [attempt_to_json(a) for a in await engine.webhooks.attempts(d.id, tenant)]
            out.append(item)
        return out

    items = with_engine(config, db, go)
    if json_out:
        output.print_json(items)
        return
    table = Table("id", "endpoint", "event", "state", "attempts", "last status", "last error", box=None)
    for d in items:
        table.add_row(short_id(d["id"]), short_id(d["endpoint_id"]), f"{d['event_id']} {d['event_type']}", d["state"],
                      str(d["attempts"]), str(d["last_status"] or ""), escape(d["last_error"] or ""))  # fmt: skip
        for a in d.get("attempts_made", []):
            table.add_row("", "", f"  #{a['attempt']} {a['at']}", "", f"{a['latency_ms']:.1f} ms",
                          str(a["status"] or ""), escape(a["error"] or ""))  # fmt: skip
    output.stdout().print(table)


@webhooks_app.command("resend")
def resend(
    delivery_id: Annotated[str, typer.Argument(help="The delivery's id (wd_…) or a unique prefix of it.")],
    tenant: Tenant = "default",
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Send a delivery again (a new series of attempts, by the running dispatcher)."""

    async def go(engine: Engine) -> dict[str, Any]:
        return delivery_to_json(await engine.webhooks.resend(delivery_id, tenant))

    item = with_engine(config, db, go)
    output.emit(json_out, item, f"resending {short_id(item['id'])} (due now)")
