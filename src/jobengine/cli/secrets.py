"""``jobengine secrets generate-key | rotate``: the keys that encrypt webhook and inbound hook secrets at
rest (setting ``secret_keys``; on SQLite without it, the key file ``<database>.secretkeys``).

Rotation: put the new key first (``secret_keys: [NEW, OLD]``, or a first line of the key file) in every
process, then ``jobengine secrets rotate`` seals every stored secret with it; then the old key can go."""

from __future__ import annotations

import typer

from jobengine.cli import output
from jobengine.cli.common import ConfigOption, DbOption, JsonFlag, with_engine
from jobengine.secretbox import new_key

secrets_app = typer.Typer(
    name="secrets", help="Manage the keys that encrypt secrets at rest.", no_args_is_help=True, rich_markup_mode=None
)


@secrets_app.command("generate-key")
def generate_key() -> None:
    """Print a new key (32 random bytes, URL-safe base64) for the setting secret_keys."""
    output.stdout().print(new_key(), highlight=False)


@secrets_app.command("rotate")
def rotate(db: DbOption = None, config: ConfigOption = None, json_out: JsonFlag = False) -> None:
    """Seal every stored secret with the first key: those in clear and those of an older key."""
    changed = with_engine(config, db, lambda engine: engine.webhooks.reseal_secrets())
    message = f"sealed {changed} row(s) of stored secrets with the first of the secret keys"
    output.emit(json_out, {"resealed": changed}, message)
