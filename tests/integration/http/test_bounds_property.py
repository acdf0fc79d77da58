"""Whatever the edges accept, every read path returns: generated job bodies (times in years 1-9999 with
offsets both ways, integers past int64, text with NUL and lone surrogates, nested JSON) and phase records go
through the API; none may answer 5xx, and then the list, the job, its cancel and its dashboard page must
answer below 500 too. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobengine.dashboard.session import COOKIE
from jobengine.engine import Engine
from jobengine.http import create_app
from tests.integration.http.conftest import settings_for

W = "/api/v1/worker"
EDGE_CHARS = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\U0001f600", "é", "\u2028"]
utf8 = st.characters(codec="utf-8")
# Mostly storable characters, so that many strings pass and some carry an edge character.
text = st.text(alphabet=st.one_of(utf8, utf8, utf8, utf8, st.sampled_from(EDGE_CHARS)), max_size=6)
offsets = st.timedeltas(min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59))
moments = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59), timezones=st.builds(timezone, offsets)
).map(lambda d: d.isoformat())
edge_moments = st.sampled_from(
    ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59Z",
     "9998-12-31T23:59:59.999Z", "9998-12-31T23:59:59.9999Z", "9998-12-31T23:59:59-23:59", "2030-01-01T00:00:00"]
)  # fmt: skip
times = st.one_of(moments, edge_moments, st.integers(), st.none())
ints = st.one_of(
    st.integers(-10, 10), st.integers(-(2**70), 2**70), st.sampled_from([2**63 - 1, 2**63, -(2**63), 10**6 + 1])
)
scalars = st.one_of(st.none(), st.booleans(), ints, st.integers(-(10**400), 10**400), st.floats(allow_nan=False), text)
json_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=12,
)  # fmt: skip


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


payloads = st.one_of(json_values, st.integers(60, 70).map(deep))
names = st.one_of(st.text(string.ascii_letters + "._-@:/", min_size=1, max_size=8), text)
job_bodies = st.fixed_dictionaries(
    {"task": st.one_of(st.just("t"), names)},
    optional={"payload": payloads, "run_at": times, "priority": ints, "max_attempts": st.integers(1, 3) | ints,
              "queue": st.just("default") | names, "idempotency_key": text},
)  # fmt: skip
phase_records = st.lists(
    st.fixed_dictionaries(
        {"name": st.one_of(st.just("one"), names)},
        optional={
            "state": st.sampled_from(["running", "succeeded"]),
            "started_at": times,
            "finished_at": times,
            "message": text,
            "result": payloads,
            "progress": st.floats(0, 1),
        },
    ),
    min_size=1,
    max_size=3,
)


def body_of(value: Any) -> bytes:
    # ensure_ascii writes a lone surrogate as its \u escape, as a client in another language would send it.
    return json.dumps(value, ensure_ascii=True).encode()


class Reads:
    """One engine and app for every example: the rows of earlier examples stay, so reads see them all."""

    def __init__(self, database: str, runner: asyncio.Runner) -> None:
        self.runner = runner
        self.settings = settings_for(Path("."), database=database, claim_max_wait=0.1)
        self.engine = Engine.from_settings(self.settings)
        runner.run(self.engine.start())
        key = runner.run(self.engine.keys.create("acme", ["admin"]))
        self.key = key[1]
        found = runner.run(self.engine.keys.authenticate(self.key))
        assert found is not None
        self.session = runner.run(self.engine.keys.open_session(found))[1]
        self.app = create_app(self.engine, self.settings)
        self.answers: dict[str, int] = {}  # "job 201", "phases 422", ... -> examples

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://api",
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )  # fmt: skip

    async def check(self, body: dict[str, Any], phases: list[dict[str, Any]]) -> None:
        async with self.client() as c:
            r = await c.post("/api/v1/jobs", content=body_of(body))
            assert r.status_code < 500, r.text
            self.answers[f"job {r.status_code}"] = self.answers.get(f"job {r.status_code}", 0) + 1
            ids = [r.json()["id"]] if r.status_code in (200, 201) else []
            got = await c.post(f"{W}/claim", json={"worker_id": "w", "queues": ["default"], "limit": 1})
            assert got.status_code == 200, got.text
            for entry in got.json()["jobs"]:
                job_id, token = entry["job"]["id"], entry["lease"]["token"]
                ids.append(job_id)
                r = await c.post(f"{W}/jobs/{job_id}/phases", content=body_of({"token": token, "phases": phases}))
                assert r.status_code < 500, r.text
                self.answers[f"phases {r.status_code}"] = self.answers.get(f"phases {r.status_code}", 0) + 1
                r = await c.post(f"{W}/jobs/{job_id}/complete", json={"token": token})
                assert r.status_code < 500, r.text
            listed = await c.get("/api/v1/jobs", params={"limit": 500})
            assert listed.status_code == 200, listed.text
            for job_id in ids:
                assert (await c.get(f"/api/v1/jobs/{job_id}")).status_code == 200
                assert (await c.post(f"/api/v1/jobs/{job_id}/cancel")).status_code < 500
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://dash") as ui:
            ui.cookies.set(COOKIE, self.session)
            for job_id in ids:
                assert (await ui.get(f"/jobs/{job_id}")).status_code == 200
            assert (await ui.get("/jobs")).status_code == 200


@pytest.fixture(params=["sqlite", "postgres"])
def reads(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Reads]:
    database = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else str(tmp_path / "p.db")
    with asyncio.Runner() as runner:
        r = Reads(database, runner)
        try:
            yield r
        finally:
            runner.run(r.engine.close())


def test_whatever_the_edges_accept_every_read_returns(reads: Reads) -> None:
    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(body=job_bodies, phases=phase_records)
    def check(body: dict[str, Any], phases: list[dict[str, Any]]) -> None:
        reads.runner.run(reads.check(body, phases))

    check()
    # The generated bodies reach both sides of the edge: some stored (and read back), some refused.
    assert all(reads.answers.get(k, 0) > 0 for k in ("job 201", "job 422", "phases 200", "phases 422")), reads.answers
