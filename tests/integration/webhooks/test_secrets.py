"""Webhook and inbound hook secrets encrypted at rest, on SQLite and PostgreSQL: what the tables hold, secrets
stored in clear before sealing existed (read, then sealed by the dispatcher without losing a delivery), key
rotation (an old key still opens, new writes use the new key, ``jobengine secrets rotate`` re-seals), the
key file beside a SQLite database, and the clear error of a PostgreSQL store without ``secret_keys``."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from standardwebhooks.webhooks import Webhook

from jobengine.cli.main import main
from jobengine.engine import Engine
from jobengine.errors import ConfigError
from jobengine.http import create_app
from jobengine.secretbox import PREFIX, key_id, new_key
from tests.integration.webhooks.conftest import dispatching, webhook_settings
from tests.support.webhook_receiver import Answer, Receiver

pytestmark = pytest.mark.timeout(300)

SECRET = "whsec_" + "c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1iZS1zdG9yZWQtaW4tY2xlYXI="  # 40 bytes
HOOK_SECRET = "inbound-secret-never-in-clear"


class Raw:
    """The webhook tables as the database holds them (no jobengine code in between)."""

    def __init__(self, database: str) -> None:
        self.database = database

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.database.startswith("postgresql://"):
            with psycopg.connect(self.database) as conn:
                conn.execute("SET search_path TO jobengine")
                cur = conn.execute(sql.replace("?", "%s").encode(), params)
                return list(cur.fetchall()) if cur.description is not None else []
        conn = sqlite3.connect(self.database)
        try:
            with conn:
                return list(conn.execute(sql, params).fetchall())
        finally:
            conn.close()

    def secrets(self) -> list[str]:
        found = self.rows("SELECT secret, previous_secret FROM webhook_endpoints")
        found += [(r[0], None) for r in self.rows("SELECT secret FROM inbound_hooks")]
        return [v for row in found for v in row if v is not None]


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "secrets.db")
    return str(request.getfixturevalue("postgres_dsn"))


def engine_on(database: str, *keys: str, **overrides: object) -> Engine:
    return Engine.from_settings(webhook_settings(database, secret_keys=keys, **overrides))


async def _schedule(engine: Engine) -> None:
    from jobengine.core.schedules import JobTemplate, ScheduleSpec

    spec = ScheduleSpec(name="deploys", cron="0 0 1 1 *", template=JobTemplate(task="deploy"), tenant="acme")
    await engine.schedules.create(spec)


async def test_secrets_are_sealed_at_rest(database: str, receiver: Callable[[Answer], Receiver]) -> None:
    rx = receiver(lambda n, r: (200, {}))
    k1 = new_key()
    async with engine_on(database, k1) as engine:
        await _schedule(engine)
        endpoint = await engine.webhooks.create_endpoint("acme", rx.url, secret=SECRET)
        await engine.webhooks.rotate_secret(endpoint.id, "acme")  # the old one becomes previous_secret
        await engine.webhooks.create_inbound("acme", "deploy", "deploys", secret=HOOK_SECRET)
        stored = Raw(database).secrets()
        assert len(stored) == 3 and all(v.startswith(f"{PREFIX}{key_id(k1)}:") for v in stored), stored
        dump = " ".join(stored)
        assert SECRET not in dump and SECRET.removeprefix("whsec_") not in dump and HOOK_SECRET not in dump
        got = await engine.webhooks.get_endpoint(endpoint.id, "acme")
        assert got.previous_secret == SECRET and got.secret.startswith("whsec_") and got.secret != SECRET
        (hook,) = await engine.webhooks.list_inbound("acme")
        assert hook.secret == HOOK_SECRET


async def test_clear_secrets_from_before_are_sealed_without_losing_a_delivery(
    database: str, receiver: Callable[[Answer], Receiver]
) -> None:
    rx = receiver(lambda n, r: (200, {}))
    raw = Raw(database)
    async with engine_on(database, new_key()) as engine:
        await _schedule(engine)
        endpoint = await engine.webhooks.create_endpoint("acme", rx.url, filter={"types": ["job.enqueued"]})
        await engine.webhooks.create_inbound("acme", "deploy", "deploys")
        # As an older version left them: in clear.
        raw.rows("UPDATE webhook_endpoints SET secret = ?", (SECRET,))
        raw.rows("UPDATE inbound_hooks SET secret = ?", (HOOK_SECRET,))
        assert (await engine.webhooks.get_endpoint(endpoint.id, "acme")).secret == SECRET
        assert await engine.webhook_store().count_stale_secrets() == 2
        job = await engine.enqueue("t", {"n": 1}, tenant="acme")
        async with dispatching(engine):  # seals the clear secrets as it starts, then delivers
            async with asyncio.timeout(20):
                while not rx.requests:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
        assert all(v.startswith(PREFIX) for v in raw.secrets()) and SECRET not in " ".join(raw.secrets())
        (request,) = rx.requests
        assert Webhook(SECRET).verify(request.body, request.headers)["data"]["job_id"] == job.id
        # The inbound hook takes events signed with its secret as before.
        body = b'{"ref": "main"}'
        signature = "sha256=" + hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as c:
            r = await c.post("/api/v1/hooks/acme/deploy", content=body, headers={"X-Scheduler-Signature": signature})
            assert r.status_code == 202, r.text


async def test_rotation_old_keys_open_new_writes_use_the_first_and_rotate_reseals(
    database: str, receiver: Callable[[Answer], Receiver], capsys: pytest.CaptureFixture[str]
) -> None:
    rx = receiver(lambda n, r: (200, {}))
    old, new = new_key(), new_key()
    raw = Raw(database)
    async with engine_on(database, old) as engine:
        first = await engine.webhooks.create_endpoint("acme", rx.url, secret=SECRET)
    async with engine_on(database, new, old) as engine:  # the new key first, the old one still opens
        assert (await engine.webhooks.get_endpoint(first.id, "acme")).secret == SECRET
        second = await engine.webhooks.create_endpoint("acme", rx.url)
        kids = dict(raw.rows("SELECT id, substr(secret, 1, ?) FROM webhook_endpoints", (len(PREFIX) + 8,)))
        assert kids == {first.id: PREFIX + key_id(old), second.id: PREFIX + key_id(new)}
    if database.startswith("postgresql://"):  # the CLI: the same step, for an operator
        env = {"JOBENGINE_SECRET_KEYS": f"{new},{old}"}
        with pytest.MonkeyPatch.context() as mp:
            for name, value in env.items():
                mp.setenv(name, value)
            assert await asyncio.to_thread(main, ["secrets", "rotate", "--db", database, "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"resealed": 1}
    else:
        async with engine_on(database, new, old) as engine:
            assert await engine.webhooks.reseal_secrets() == 1
    assert all(v.startswith(f"{PREFIX}{key_id(new)}:") for v in raw.secrets())
    async with engine_on(database, new) as engine:  # the old key is gone now, and not missed
        secrets = {e.id: e.secret for e in await engine.webhooks.list_endpoints("acme")}
        assert secrets == {first.id: SECRET, second.id: second.secret}
    async with engine_on(database, old) as engine:  # a process left with the old key only: a clear error
        with pytest.raises(ConfigError, match=rf"secret_keys: .*key {key_id(new)}"):
            await engine.webhooks.list_endpoints("acme")


async def test_a_sqlite_database_keeps_its_key_in_a_file_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    key_file = tmp_path / "jobs.db.secretkeys"
    async with Engine.from_settings(webhook_settings(str(db))) as engine:
        assert await engine.webhooks.list_endpoints(None) == []
        assert not key_file.exists()  # made when a secret is first stored, not before
        endpoint = await engine.webhooks.create_endpoint("acme", "http://127.0.0.1:9/x", secret=SECRET)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    (line,) = key_file.read_text().split()
    assert Raw(str(db)).secrets()[0].startswith(f"{PREFIX}{key_id(line)}:")
    async with Engine.from_settings(webhook_settings(str(db))) as engine:  # another process, the same file
        assert (await engine.webhooks.get_endpoint(endpoint.id, "acme")).secret == SECRET
    key_file.write_text(new_key() + "\n")  # the wrong key: refused, naming the file
    async with Engine.from_settings(webhook_settings(str(db))) as engine:
        with pytest.raises(ConfigError, match=r"secret_keys: .*the key file .*jobs\.db\.secretkeys"):
            await engine.webhooks.get_endpoint(endpoint.id, "acme")


async def test_postgresql_without_secret_keys_refuses_to_store_a_secret_naming_the_setting(
    postgres_dsn: str, receiver: Callable[[Answer], Receiver]
) -> None:
    rx = receiver(lambda n, r: (200, {}))
    async with Engine.from_settings(webhook_settings(postgres_dsn)) as engine:
        key = (await engine.keys.create("acme", ["admin"]))[1]
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                     headers={"Authorization": f"Bearer {key}"}) as c:  # fmt: skip
            r = await c.post("/api/v1/webhooks/endpoints", json={"url": rx.url})
            assert r.status_code == 501 and "secret_keys" in r.json()["detail"], r.text
            assert (await c.get("/api/v1/webhooks/endpoints")).json()["items"] == []  # nothing written
        async with dispatching(engine):  # a dispatcher starts all the same (nothing to seal)
            pass


def test_generate_key_prints_a_key_the_setting_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["secrets", "generate-key"]) == 0
    key = capsys.readouterr().out.strip()
    from jobengine.settings import Settings

    assert Settings(secret_keys=(key,)).secret_keys == (key,)
    with pytest.raises(ConfigError, match="secret_keys: key 2 is not 32 bytes"):
        Settings(secret_keys=(key, "short"))
