"""schemathesis against ``/openapi.json``, over the in-process app (ASGI), with keys of two tenants.

Every operation gets generated requests, valid and invalid (bounded: ``MAX_EXAMPLES`` each, derandomized,
so the run is deterministic): no server error, every response conforms to its documented schema, status
and content type, and invalid input is refused. The two SSE operations are left out (a stream does not end
by itself; ``test_sse.py`` covers them).

The engine lives in schemathesis' own event loop: its lifespan (a thin ASGI wrapper here) starts the
engine, creates the keys and closes it, so no store handle crosses event loops.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.config._checks import NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from jobengine.core import bounds
from jobengine.core.models import NewJob
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.settings import Settings

#: Generated requests per operation: valid ones, then invalid ones (bounded to keep the suite quick).
MAX_EXAMPLES = {GenerationMode.POSITIVE: 25, GenerationMode.NEGATIVE: 15}


class EngineApp:
    """The API app around an engine that its lifespan opens and closes. schemathesis ends the lifespan after
    each test, so every startup opens a new engine (and app) on the same database; the first one also
    creates a key per tenant and seeds a few jobs."""

    def __init__(self, database: str) -> None:
        self.settings = Settings(database=database, claim_max_wait=0.05, api_max_body_bytes=65536)
        self.engine: Engine | None = None
        self.app: Any = None
        self.keys: dict[str, str] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.engine = engine = Engine.from_settings(self.settings)
                await engine.start()
                self.app = create_app(engine, self.settings)
                if not self.keys:
                    for tenant in ("acme", "globex"):
                        self.keys[tenant] = (await engine.keys.create(tenant, ["admin"]))[1]
                        await engine.enqueue_many([NewJob(task="seed", tenant=tenant) for _ in range(3)])
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.engine is not None:
                    await self.engine.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


@pytest.fixture(scope="module")
def engine_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineApp]:
    app = EngineApp(str(Path(tmp_path_factory.mktemp("schemathesis")) / "api.db"))
    yield app
    from schemathesis.python import asgi

    asgi.shutdown_lifespans()  # closes the engine in the loop it ran in (schemathesis also does after each test)


#: Refusals of schema-valid input that the schema cannot express. The engine refuses them with the problem
#: type ``invalid-value`` (never ``validation``, which is the schema's own refusal):
#: - a field naming another record (a job to depend on) that does not exist;
#: - a CRON expression, an interval or jitter written as a duration string, a time zone name, and policy
#:   combinations (``misfire: catch_up`` needs ``catch_up >= 1``; a template with items wants an object
#:   payload and no planner).
#: And, from the schema validation itself, the bounds of core.bounds that JSON Schema cannot state: NUL or a
#: lone surrogate in a string anywhere inside a JSON value (no backend can store them; JSON Schema has no
#: recursion hypothesis can generate from, see schemas.check_json), a date-time outside 1970-9998 in UTC.
# Fields whose schema-valid values the engine may still refuse from what it knows: an unknown dependency, a
# cron that never fires, a task of a pack version that does not exist (<pack>@<version>:<task>)...
SEMANTIC = frozenset({"depends_on", "cron", "every", "jitter", "timezone", "catch_up", "template.payload",
                      "template.items", "template.planner", "task", "template.task",
                      # flow limits (PUT /queues/{queue}/flow): combinations (burst or adaptive need a rate,
                      # concurrency needs a key, soft_limit <= hard_limit, rate_floor <= rate <= rate_ceiling)
                      "burst", "adaptive", "concurrency_key", "soft_limit", "rate_floor"})  # fmt: skip
#: Webhooks: a URL that does not resolve or reaches a refused address (SSRF), a secret's base64 and length,
#: a filter entry's form, an inbound hook's schedule that does not exist.
SEMANTIC |= {"url", "secret", "filter.types", "filter.queues", "filter.tasks", "schedule", "name", "state"}
#: Bulk actions: exactly one of ids and filter.
SEMANTIC |= {"ids"}
#: Graphs: an edge naming a node that is not in the graph, a cycle, a node name used twice.
SEMANTIC |= {"edges", "nodes"}
#: A schedule's graph template: the same, and a node naming a pack's task (a graph's nodes are not pinned to
#: an approved version). Node indexes are written ``*``.
SEMANTIC |= {"template.edges", "template.edges.*", "template.nodes", "template.nodes.*.name", "template.nodes.*.task"}
#: A schedule's run request template: items or a planner (exactly one), and overlap allow or skip only.
SEMANTIC |= {"overlap"}


def schema_valid_input_is_accepted(ctx: Any, response: Any, case: Any) -> None:
    """schemathesis' positive_data_acceptance, except for the refusals listed above."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    if case.method == "POST" and case.path == "/api/v1/packs" and response.status_code in (400, 422):
        return  # generated bytes are no pack (a .tar.gz with a valid manifest) or miss their declared sha256
    if response.status_code in (400, 413, 415, 422):
        problem = json.loads(response.content)
        errors = problem.get("errors") or [{"field": problem.get("field"), "message": problem.get("detail")}]
        for e in errors:
            semantic = (
                problem["type"].endswith(":invalid-value")
                and re.sub(r"\.\d+(?=\.|$)", ".*", str(e["field"]).removeprefix("schedule.")) in SEMANTIC
            )
            bound = any(m in str(e["message"]) for m in ("NUL", "lone surrogate", bounds.MIN_TIME_ISO))
            assert response.status_code == 422 and (semantic or bound), (
                f"schema-valid input refused: {response.status_code} {response.content[:500]!r}"
            )


def operations() -> list[Any]:
    """(METHOD, path, mode) of every operation, read from an app on a store that is never opened. An
    operation that takes no input at all (no parameter, body or credentials) has no invalid requests."""
    app = create_app(Engine.from_settings(Settings(database="memory")))
    out = []
    for path, item in app.openapi()["paths"].items():
        for method, op in item.items():
            if path.endswith("/stream"):
                continue
            out.append(pytest.param(method.upper(), path, GenerationMode.POSITIVE, id=f"{method.upper()} {path} valid"))
            if op.get("parameters") or op.get("requestBody") or op.get("security"):
                out.append(
                    pytest.param(method.upper(), path, GenerationMode.NEGATIVE, id=f"{method.upper()} {path} invalid")
                )
    return out


#: 413 is how this API refuses an oversized body (a schema violation schemathesis may generate). The request
#: timeout is a ceiling on a wait, not a measure: schemathesis' own 10 s default fails a request that a loaded
#: machine answers late.
CONFIG = SchemathesisConfig.from_dict(
    {
        "request-timeout": 120,
        "checks": {
            "negative_data_rejection": {"expected-statuses": [*NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES, "413"]}
        },
    }
)


#: The schema's own load has schemathesis' 10 s default too, and one failure fails every test of the module
#: in that process (a fixture's error is kept): building it takes a few seconds on a loaded machine.
SCHEMA_LOAD_TIMEOUT = 120


@pytest.fixture(scope="module")
def api_schema(engine_app: EngineApp) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", engine_app, config=CONFIG, timeout=SCHEMA_LOAD_TIMEOUT)


@pytest.mark.timeout(600)  # a ceiling for a loaded machine; each request may take up to request-timeout
@pytest.mark.parametrize(("method", "path", "mode"), operations())
def test_api_conforms_to_its_schema(
    api_schema: Any, engine_app: EngineApp, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES[mode],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        # Each request runs as one of the two tenants (chosen from the case, so deterministically).
        tenant = ("acme", "globex")[zlib.crc32(repr((case.path_parameters, case.query, case.body)).encode()) % 2]
        excluded = [positive_data_acceptance]
        if any(isinstance(v, dict) for v in (case.query or {}).values()):
            # A query parameter made an object is sent form-style, flattened to plain ``key=value`` pairs
            # (``queue=flaky``) that can be valid, so a 200 for it is no acceptance of invalid data.
            excluded.append(negative_data_rejection)
        case.call_and_validate(
            headers={"Authorization": f"Bearer {engine_app.keys[tenant]}"},
            excluded_checks=excluded,
            additional_checks=[schema_valid_input_is_accepted],
        )

    check()
