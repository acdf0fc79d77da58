"""Inbound events over the real app (httpx ASGI transport) on SQLite and PostgreSQL: the event's JSON reaches
the run and its jobs through the hook's template; Standard Webhooks and ``X-Scheduler-Signature`` /
``X-Signature`` signatures; replays refused (timestamp tolerance, an id window that survives a restart);
unknown, unsigned and wrongly signed events answered alike; hook names per tenant; body limits."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from jobengine.dashboard.session import COOKIE
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.secretbox import new_key
from tests.integration.webhooks.conftest import webhook_settings

W = "/api/v1/webhooks"
H = "/api/v1/hooks"
KEY = new_key()

pytestmark = pytest.mark.timeout(300)


@dataclass
class Api:
    engine: Engine
    app: object
    keys: dict[str, str]

    def client(self, tenant: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        transport = httpx.ASGITransport(app=self.app)  # type: ignore[arg-type]
        return httpx.AsyncClient(transport=transport, base_url="http://api", headers=headers)

    async def hook(self, tenant: str, name: str = "deploy", **fields: object) -> str:
        """Create the tenant's schedule ``deploys`` (if needed) and an inbound hook on it; returns its secret."""
        async with self.client(tenant) as c:
            schedule = {"name": "deploys", "cron": "0 0 1 1 *", "template": fields.pop("job", {"task": "deploy"})}
            await c.post("/api/v1/schedules", json=schedule)
            r = await c.post(f"{W}/inbound", json={"name": name, "schedule": "deploys", **fields})
            assert r.status_code == 201, r.text
            assert r.json()["url_path"] == f"{H}/{tenant}/{name}"
            return str(r.json()["secret"])


OpenApi = Callable[..., AbstractAsyncContextManager[Api]]


@pytest.fixture(params=["sqlite", "postgres"])
def open_api(request: pytest.FixtureRequest, tmp_path: object) -> OpenApi:
    """``async with open_api(**settings)``: the app on an engine of the backend; a second call opens the same
    database again (a restart)."""
    database = (
        str(request.getfixturevalue("tmp_path") / "hooks.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_dsn")
    )
    keys: dict[str, str] = {}

    @asynccontextmanager
    async def open_(**overrides: object) -> AsyncIterator[Api]:
        settings = webhook_settings(database, secret_keys=(KEY,), **overrides)
        async with Engine.from_settings(settings) as engine:
            for tenant in ("acme", "globex"):
                if tenant not in keys:
                    keys[tenant] = (await engine.keys.create(tenant, ["admin"], tenant))[1]
            yield Api(engine, create_app(engine), keys)

    return open_


def standard(secret: str, body: bytes, msg_id: str = "msg_1", at: float | None = None) -> dict[str, str]:
    """Standard Webhooks headers, signed by the reference library."""
    when = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    signature = Webhook(secret).sign(msg_id, when, body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(when.timestamp())), "webhook-signature": signature,
            "content-type": "application/json"}  # fmt: skip


def hexsig(secret: str, body: bytes, header: str = "X-Scheduler-Signature") -> dict[str, str]:
    return {header: "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()}


async def test_the_event_reaches_the_run_and_its_jobs_through_the_template(open_api: OpenApi) -> None:
    async with open_api() as api, api.client() as sender, api.client("acme") as acme:
        template = {"payload": {"ref": "/ref", "author": "/pusher/name", "event": ""}, "items": "/services"}
        job = {"task": "deploy", "payload": {"env": "prod"}, "segment_size": 1}
        secret = await api.hook("acme", template=template, job=job)
        event = {"ref": "main", "pusher": {"name": "ada"}, "services": ["api", "web"], "note": "ünïcode"}
        body = json.dumps(event).encode()
        r = await sender.post(f"{H}/acme/deploy", content=body, headers=standard(secret, body))
        assert r.status_code == 202, r.text
        run_id = r.json()["id"]
        run = (await acme.get(f"/api/v1/runs/{run_id}")).json()
        assert run["trigger_data"] == event and run["items"] == 2 and run["actor"] == "hook:deploy"
        assert run["reason"] == "inbound hook deploy, event msg_1"
        jobs = (await acme.get(f"/api/v1/runs/{run_id}/jobs")).json()["jobs"]
        payloads = sorted((j["payload"] for j in jobs), key=lambda p: p["segment"])
        common = {"env": "prod", "ref": "main", "author": "ada", "event": event, "segments": 2}
        assert payloads == [{**common, "items": ["api"], "segment": 0}, {**common, "items": ["web"], "segment": 1}]
        listed = (await acme.get("/api/v1/runs")).json()["items"]
        assert [x["id"] for x in listed] == [run_id] and "trigger_data" not in listed[0]  # lists stay small
        key = await api.engine.keys.authenticate(api.keys["acme"])
        assert key is not None
        _, token = await api.engine.keys.open_session(key)
        acme.cookies.set(COOKIE, token)
        page = await acme.get(f"/runs/{run_id}")  # the dashboard's run page shows it too
        assert page.status_code == 200 and "Trigger data" in page.text and "&#34;pusher&#34;" in page.text


async def test_data_the_template_cannot_take_is_a_422_that_writes_nothing(open_api: OpenApi) -> None:
    async with open_api() as api, api.client() as sender, api.client("acme") as acme:
        secret = await api.hook("acme", template={"payload": {"ref": "/ref"}, "items": "/services"})
        for event, field in (({"services": ["a"]}, "body/ref"), ({"ref": "x", "services": "a"}, "body/services")):
            body = json.dumps(event).encode()
            r = await sender.post(f"{H}/acme/deploy", content=body, headers=standard(secret, body, "msg_bad"))
            assert r.status_code == 422 and r.json()["field"] == field, r.text
        body = b"{not json"
        r = await sender.post(f"{H}/acme/deploy", content=body, headers=standard(secret, body, "msg_bad"))
        assert r.status_code == 422 and r.json()["field"] == "body"
        assert (await acme.get("/api/v1/runs")).json()["items"] == []
        # The refused event's id was not kept: the corrected event, with the same id, is no replay.
        body = json.dumps({"ref": "x", "services": ["a"]}).encode()
        r = await sender.post(f"{H}/acme/deploy", content=body, headers=standard(secret, body, "msg_bad"))
        assert r.status_code == 202, r.text
        # A template the schedule cannot take is refused when the hook is created.
        await acme.post("/api/v1/schedules", json={"name": "scalar", "cron": "0 0 1 1 *",
                                                   "template": {"task": "t", "payload": 7}})  # fmt: skip
        r = await acme.post(f"{W}/inbound", json={"name": "x", "schedule": "scalar",
                                                  "template": {"payload": {"ref": "/ref"}}})  # fmt: skip
        assert r.status_code == 422 and r.json()["field"] == "template.payload", r.text
        r = await acme.post(f"{W}/inbound", json={"name": "y", "schedule": "deploys", "template": {"items": "ref"}})
        assert r.status_code == 422 and r.json()["field"] == "template.items", r.text


async def test_both_signature_styles_are_accepted(open_api: OpenApi) -> None:
    async with open_api() as api, api.client() as sender:
        secret = await api.hook("acme")
        for i, headers in enumerate(
            (lambda b: standard(secret, b), lambda b: hexsig(secret, b), lambda b: hexsig(secret, b, "X-Signature"))
        ):
            body = json.dumps({"n": i}).encode()
            r = await sender.post(f"{H}/acme/deploy", content=body, headers=headers(body))
            assert r.status_code == 202, (i, r.text)
        # A user-chosen secret that is no base64 works in both styles too.
        plain = "not base64 at all: 16+ chars!"
        async with api.client("acme") as acme:
            r = await acme.post(f"{W}/inbound", json={"name": "plain", "schedule": "deploys", "secret": plain})
            assert r.status_code == 201, r.text
        for i, headers in enumerate((lambda b: standard(plain, b), lambda b: hexsig(plain, b))):
            body = json.dumps({"plain": i}).encode()
            r = await sender.post(f"{H}/acme/plain", content=body, headers=headers(body))
            assert r.status_code == 202, (i, r.text)


async def test_replays_are_refused_within_the_tolerance_and_the_window_even_after_a_restart(
    open_api: OpenApi,
) -> None:
    body = b'{"ref": "main"}'
    async with open_api() as api, api.client() as sender, api.client("acme") as acme:
        secret = await api.hook("acme")
        first = standard(secret, body, "msg_7")
        assert (await sender.post(f"{H}/acme/deploy", content=body, headers=first)).status_code == 202
        again = await sender.post(f"{H}/acme/deploy", content=body, headers=first)  # the same request
        assert again.status_code == 409 and again.json()["field"] == "webhook-id", again.text
        resigned = standard(secret, body, "msg_7", at=time.time() + 5)  # a retry, signed anew: the same event
        assert (await sender.post(f"{H}/acme/deploy", content=body, headers=resigned)).status_code == 409
        for skew in (-400, 400):  # signed, but outside inbound_tolerance (300 s)
            old = standard(secret, body, f"msg_skew{skew}", at=time.time() + skew)
            r = await sender.post(f"{H}/acme/deploy", content=body, headers=old)
            assert r.status_code == 401 and r.json()["field"] == "webhook-timestamp", r.text
        signed = hexsig(secret, body)
        assert (await sender.post(f"{H}/acme/deploy", content=body, headers=signed)).status_code == 202
        assert (await sender.post(f"{H}/acme/deploy", content=body, headers=signed)).status_code == 409
        assert len((await acme.get("/api/v1/runs")).json()["items"]) == 2
    async with open_api() as api, api.client() as sender:  # a new process on the same database
        assert (await sender.post(f"{H}/acme/deploy", content=body, headers=first)).status_code == 409
        assert (await sender.post(f"{H}/acme/deploy", content=body, headers=signed)).status_code == 409
        fresh = standard(secret, body, "msg_8")
        assert (await sender.post(f"{H}/acme/deploy", content=body, headers=fresh)).status_code == 202
        assert await api.engine.webhooks.prune_inbound() == 0  # all within the window


async def test_unknown_unsigned_and_wrongly_signed_events_are_answered_alike(open_api: OpenApi) -> None:
    body = b'{"ref": "main"}'
    async with open_api() as api, api.client() as sender, api.client("acme") as acme:
        secret = await api.hook("acme")
        other = await api.hook("globex", "other")
        bad_sw = standard(secret, body)
        bad_sw["webhook-signature"] = "v1," + "A" * 44
        attempts = [
            (f"{H}/acme/nope", standard(secret, body)),  # no such hook
            (f"{H}/nobody/deploy", standard(secret, body)),  # no such tenant
            (f"{H}/acme/deploy", {}),  # unsigned
            (f"{H}/acme/deploy", hexsig("wrong secret, same length......", body)),  # a wrong signature
            (f"{H}/acme/deploy", bad_sw),
            (f"{H}/acme/deploy", standard(other, body)),  # another hook's secret
            (f"{H}/acme/deploy", {**standard(secret, body), "webhook-timestamp": "soon"}),  # malformed
            (f"{H}/deploy", hexsig("wrong secret, same length......", body)),  # by signature: none matches
            (f"{H}/Not%20a%20name!", standard(secret, body)),  # a name that cannot exist
        ]
        answers = [await sender.post(path, content=body, headers=headers) for path, headers in attempts]
        assert {a.status_code for a in answers} == {401}, [(a.request.url, a.text) for a in answers]
        assert len({a.content for a in answers}) == 1, [a.content for a in answers]
        assert answers[0].headers["content-type"] == "application/problem+json"
        assert (await acme.get("/api/v1/runs")).json()["items"] == []


async def test_hook_names_are_per_tenant(open_api: OpenApi) -> None:
    async with open_api() as api, api.client() as sender, api.client("acme") as acme, api.client("globex") as gx:
        secrets = {t: await api.hook(t) for t in ("acme", "globex")}  # both tenants have a hook "deploy"
        r = await acme.post(f"{W}/inbound", json={"name": "deploy", "schedule": "deploys"})
        assert r.status_code == 409  # but not twice in one tenant
        for tenant, secret in secrets.items():
            body = json.dumps({"for": tenant}).encode()
            r = await sender.post(f"{H}/{tenant}/deploy", content=body, headers=standard(secret, body))
            assert r.status_code == 202 and r.json()["tenant"] == tenant, r.text
        # The path without a tenant finds the hook whose secret signed the event.
        body = json.dumps({"for": "globex, by signature"}).encode()
        r = await sender.post(f"{H}/deploy", content=body, headers=hexsig(secrets["globex"], body))
        assert r.status_code == 202 and r.json()["tenant"] == "globex", r.text
        # Posting to the other tenant's path with one's own secret is refused, like any wrong signature.
        r = await sender.post(f"{H}/acme/deploy", content=body, headers=hexsig(secrets["globex"], body))
        assert r.status_code == 401
        assert len((await acme.get("/api/v1/runs")).json()["items"]) == 1
        assert len((await gx.get("/api/v1/runs")).json()["items"]) == 2
        assert [h["name"] for h in (await gx.get(f"{W}/inbound")).json()["items"]] == ["deploy"]
        assert (await acme.delete(f"{W}/inbound/deploy")).status_code == 204
        assert [h["name"] for h in (await gx.get(f"{W}/inbound")).json()["items"]] == ["deploy"]


async def test_an_event_over_inbound_max_body_bytes_is_413(open_api: OpenApi) -> None:
    async with open_api(inbound_max_body_bytes=2048) as api, api.client() as sender:
        secret = await api.hook("acme")
        body = json.dumps({"blob": "x" * 2048}).encode()
        r = await sender.post(f"{H}/acme/deploy", content=body, headers=standard(secret, body))
        assert r.status_code == 413 and r.json()["field"] == "body", r.text
        body = json.dumps({"blob": "x" * 1900}).encode()
        r = await sender.post(f"{H}/acme/deploy", content=body, headers=standard(secret, body))
        assert r.status_code == 202, r.text


async def test_an_event_no_store_can_hold_is_a_422_that_writes_nothing(open_api: OpenApi) -> None:
    async with open_api() as api, api.client() as sender, api.client("acme") as acme:
        secret = await api.hook("acme")
        for i, body in enumerate([b'{"ref": "\\ud800"}', b'{"\\udc00": 1}', b'{"ref": ["a\\u0000"]}']):
            r = await sender.post(f"{H}/acme/deploy", content=body, headers=standard(secret, body, f"msg_{i}"))
            assert r.status_code == 422 and r.json()["field"] == "body", r.text
        assert (await acme.get("/api/v1/runs")).json()["items"] == []
