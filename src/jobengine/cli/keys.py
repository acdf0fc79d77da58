"""``jobengine keys create | list | revoke``: API keys of the HTTP API (stored hashed; shown once)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, JsonFlag, with_engine
from jobengine.core.clock import iso
from jobengine.core.keys import SCOPES
from jobengine.errors import ConfigError
from jobengine.ports.auth import ApiKey

keys_app = typer.Typer(
    name="keys", help="Manage API keys of the HTTP API.", no_args_is_help=True, rich_markup_mode=None
)


def key_to_json(key: ApiKey) -> dict[str, object]:
    return {"id": key.id, "tenant": key.tenant, "name": key.name, "scopes": list(key.scopes),
            "created_at": iso(key.created_at), "revoked_at": iso(key.revoked_at)}  # fmt: skip


@keys_app.command("create")
def create(
    tenant: Annotated[str, typer.Option(help="The tenant whose data the key reaches.")] = "default",
    scope: Annotated[
        list[str] | None, typer.Option("--scope", help=f"Repeatable: {', '.join(SCOPES)}. Give one, or --admin.")
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Every scope (the admin scope), for this tenant.")] = False,
    name: Annotated[str, typer.Option(help="A label to recognise the key by.")] = "",
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """Create a key and print it. It is shown this once: only its hash is stored."""
    # An admin key reaches everything: it is a choice made on purpose, never what a bare command gives.
    if not scope and not admin:
        raise ConfigError(f"scope: give at least one --scope ({', '.join(SCOPES)}) or --admin")
    if scope and admin:
        raise ConfigError("scope: give --scope or --admin, not both")
    scopes = ["admin"] if admin else list(scope or [])
    key, text = with_engine(config, db, lambda engine: engine.keys.create(tenant, scopes, name), must_exist=False)
    if json_out:
        output.print_json({**key_to_json(key), "key": text})
        return
    console = output.stdout()
    console.print(escape(text))
    console.print(f"[dim]id {key.id} · tenant {escape(key.tenant)} · scopes {', '.join(key.scopes)} · "
                  "shown once: store it now[/dim]")  # fmt: skip


@keys_app.command("list")
def list_keys(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    db: DbOption = None,
    config: ConfigOption = None,
    json_out: JsonFlag = False,
) -> None:
    """List keys (ids, tenants, scopes; never the keys themselves)."""
    keys = with_engine(config, db, lambda engine: engine.keys.list(tenant))
    if json_out:
        output.print_json([key_to_json(k) for k in keys])
        return
    table = Table("id", "tenant", "name", "scopes", "created", "revoked", box=None)
    for k in keys:
        table.add_row(k.id, escape(k.tenant), escape(k.name), ", ".join(k.scopes), iso(k.created_at) or "",
                      iso(k.revoked_at) or "")  # fmt: skip
    output.stdout().print(table)


@keys_app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (the part after je_) or a unique prefix of it.")],
    db: DbOption = None,
    config: ConfigOption = None,
) -> None:
    """Revoke a key: requests with it get 401 (within api_key_cache_seconds on running servers)."""
    key = with_engine(config, db, lambda engine: engine.keys.revoke(key_id))
    output.stdout().print(f"revoked {key.id} (tenant {escape(key.tenant)})")
