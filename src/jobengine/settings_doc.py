"""docs/configuration.md, rendered from :class:`jobengine.settings.Settings` and :class:`QueueConfig`.

The meaning of each setting is the ``doc`` of its field's metadata, so the page changes with the code;
``tests/unit/test_configuration_doc.py`` holds the committed page equal to what :func:`render` returns.
Regenerate it with::

    python -m jobengine.settings_doc > docs/configuration.md
"""

from __future__ import annotations

import sys
from dataclasses import Field, fields, is_dataclass
from typing import Any, Final

from jobengine.core.queue_config import ENV_OVERRIDES, QueueConfig, camel_key
from jobengine.settings import Settings

REGENERATE: Final = "python -m jobengine.settings_doc > docs/configuration.md"

#: The field each topic starts with; a topic runs, in the order of the fields, until the next one starts.
TOPICS: Final = {
    "state_dir": "Storage",
    "worker_concurrency": "Workers",
    "retention_interval": "Retention of finished jobs",
    "scheduler_poll_interval": "Scheduler, events and runs",
    "api_host": "HTTP API and event streams",
    "packs_four_eyes": "Task packs",
    "dashboard_refresh_seconds": "Dashboard and secrets at rest",
    "webhook_rate_limiter": "Webhooks and inbound hooks",
    "queue": "Queue transport",
    "flow_limits": "Flow control and load shedding",
}

#: The meaning of each key of the ``queue:`` section; ``*`` stands for a logical queue (planner or runner).
QUEUE_DOCS: Final = {
    "kind": "the transport: `database` (the store delivers, no broker), `redis` (Redis Streams) or `nats` "
    "(NATS JetStream)",
    "deadLetterEnabled": "a message out of delivery attempts goes to the dead-letter stream; false: it is "
    "dropped and counted",
    "maxDeliveryAttempts": "deliveries of one message before it is dead-lettered (1 to 1000)",
    "idempotencyWindow": "seconds a publish key is remembered (a key costs broker memory for that long)",
    "sweepAfter": "seconds a runnable job may wait before the relay publishes it again, in case its message was lost",
    "nats.url": "the NATS server, or a cluster's servers comma-separated (`nats://n1:4222,nats://n2:4222`): "
    "the client connects to one and fails over to the others",
    "nats.maxAckPending": "deliveries a consumer lets be in flight at once (JetStream's MaxAckPending)",
    "nats.replicas": "copies JetStream keeps of each stream and its consumer, on different servers of a cluster "
    "(1 to 5; 3 survives the loss of one server). Applied when a stream is created",
    "nats.*.stream": "the JetStream stream of the queue",
    "nats.*.subject": "its subject (a literal subject: no wildcards)",
    "nats.*.durableConsumer": "the durable consumer workers share",
    "nats.*.deadLetterStream": "the stream dead-lettered messages go to",
    "nats.*.deadLetterSubject": "its subject",
    "redis.url": "the Redis server (`redis://host:port/db`), or a master behind Sentinel (`redis+sentinel://s1:26379,s2:26379/service/db`)",
    "redis.*.stream": "the Redis stream of the queue",
    "redis.*.consumerGroup": "the consumer group workers share",
    "redis.*.deadLetterStream": "the stream dead-lettered messages go to (top-level `redis.deadLetterStream` "
    "sets the planner's)",
    "redis.*.idempotencyKeyPrefix": "prefix of the publish idempotency keys (top-level "
    "`redis.idempotencyKeyPrefix` sets the planner's)",
}

_INTRO: Final = f"""# Configuration

<!-- Generated from src/jobengine/settings.py by `{REGENERATE}`: edit the fields' docs there. -->

Settings are read once, when a command starts (`jobengine up`, `worker`, `serve`, `scheduler`, ...), then
passed down frozen. They come from one YAML file, `./jobengine.yaml` or the file given with `--config FILE`,
and then from `JOBENGINE_<NAME>` environment variables, which win over the file:

```yaml
database: postgresql://jobs@db.internal/jobs
worker_concurrency: 20
worker_queues: [mail, reports]
webhook_allow_hosts: [localhost]
```

```sh
export JOBENGINE_DATABASE=postgresql://jobs@db.internal/jobs
export JOBENGINE_WORKER_CONCURRENCY=20
export JOBENGINE_WORKER_QUEUES=mail,reports
export JOBENGINE_WEBHOOK_ALLOW_HOSTS=localhost
```

How values are read: a *list* is a YAML list or, in the environment, comma-separated; a *boolean* is `true`,
`false`, `yes`, `no`, `on`, `off`, `1` or `0`; durations are seconds (`0.5`, `86400`). An unknown key in the
file, or a value of the wrong type, stops the command with one line naming the setting. With `Engine` in your
own code, pass `Settings(...)` or `Settings.load("jobengine.yaml")`.
"""

_QUEUE_INTRO: Final = """## The `queue:` section

`queue:` chooses how work is delivered to workers. With `kind: database` (the default) the store delivers it
and nothing else is needed; with `redis` or `nats` the store stays the system of record and a relay publishes
each job to a Redis stream or a JetStream subject ([brokers](brokers.md)). Keys are camelCase; every key is
optional and takes the default below; a `planner` / `runner` block given in part keeps the defaults of the keys
it leaves out. A bad value stops the command naming its path (`queue.nats.runner.stream: ...`).
"""

_EXAMPLES: Final = """### Examples

The store delivers (the default; the section can be left out):

```yaml
queue:
  kind: database
```

Redis Streams, with the planner's dead-letter stream and idempotency prefix at the top level and the runner's
stream named in full:

```yaml
queue:
  kind: redis
  deadLetterEnabled: true
  maxDeliveryAttempts: 5
  redis:
    url: "redis://127.0.0.1:6379/0"
    deadLetterStream: "scheduler:planner:dead"
    idempotencyKeyPrefix: "scheduler:planner:idemp:"
    runner: {stream: "scheduler:runner", consumerGroup: scheduler-runners}
```

NATS JetStream:

```yaml
queue:
  kind: nats
  deadLetterEnabled: true
  maxDeliveryAttempts: 5
  nats:
    url: "nats://127.0.0.1:4222"
    planner: {stream: SCHEDULER_PLANNER, subject: scheduler.planner, durableConsumer: scheduler-planners,
              deadLetterStream: SCHEDULER_PLANNER_DEAD, deadLetterSubject: scheduler.planner.dead}
    runner: {stream: SCHEDULER_RUNNER, subject: scheduler.runner, durableConsumer: scheduler-runners}
```

The same transports from the environment (the names and stream keys keep their defaults or the file's):

```sh
export JOBENGINE_QUEUE_KIND=database
```

```sh
export JOBENGINE_QUEUE_KIND=redis
export JOBENGINE_QUEUE_REDIS_URL=redis://127.0.0.1:6379/0
export JOBENGINE_QUEUE_DEAD_LETTER_ENABLED=true
export JOBENGINE_QUEUE_MAX_DELIVERY_ATTEMPTS=5
```

```sh
export JOBENGINE_QUEUE_KIND=nats
export JOBENGINE_QUEUE_NATS_URL=nats://127.0.0.1:4222
export JOBENGINE_QUEUE_DEAD_LETTER_ENABLED=true
export JOBENGINE_QUEUE_MAX_DELIVERY_ATTEMPTS=5
```
"""


def env_var(name: str) -> str:
    """The environment variable that overrides the setting ``name``."""
    return "JOBENGINE_" + name.upper()


def _kind(f: Field[Any]) -> str:
    kinds = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "QueueConfig": "mapping"}
    if str(f.type).startswith("tuple["):
        return "list of strings"
    return kinds[str(f.type)]


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600)):
        if value >= size and value % size == 0:
            return f"{value / size:g} {unit}"
    return ""


def _default(f: Field[Any], value: object) -> str:
    if isinstance(value, QueueConfig):
        return f"`kind: {value.kind}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value in ("", ()):
        return "empty"
    if isinstance(value, float):
        human = _seconds(value) if f.name not in ("webhook_rate_margin", "webhook_retry_jitter") else ""
        return f"`{_number(value)}`" + (f" ({human})" if human else "")
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _settings_tables() -> list[str]:
    defaults = Settings()
    lines: list[str] = []
    for f in fields(Settings):
        if f.name in TOPICS:
            lines += ["", f"## {TOPICS[f.name]}", "", "| setting | type | default | environment | meaning |"]
            lines.append("| --- | --- | --- | --- | --- |")
        if not lines:
            raise ValueError(f"{f.name}: the first field must start a topic (TOPICS)")
        doc = f.metadata.get("doc")
        if not doc:
            raise ValueError(f"{f.name}: no doc in its field's metadata (src/jobengine/settings.py)")
        env = ", ".join(f"`{v}`" for v in ENV_OVERRIDES) if f.name == "queue" else f"`{env_var(f.name)}`"
        row = [f"`{f.name}`", _kind(f), _default(f, getattr(defaults, f.name)), env, _cell(str(doc))]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _queue_keys(obj: object, path: str) -> list[tuple[str, object]]:
    keys: list[tuple[str, object]] = []
    for f in fields(obj):  # type: ignore[arg-type]
        key = f"{path}.{camel_key(f.name)}" if path else camel_key(f.name)
        value = getattr(obj, f.name)
        keys += _queue_keys(value, key) if is_dataclass(value) else [(key, value)]
    return keys


def _queue_table() -> list[str]:
    env = {".".join(path): var for var, path in ENV_OVERRIDES.items()}
    lines = ["| key | default | environment | meaning |", "| --- | --- | --- | --- |"]
    for key, value in _queue_keys(QueueConfig(), ""):
        parts = key.split(".")
        generic = ".".join([parts[0], "*", *parts[2:]]) if len(parts) == 3 else key
        if generic not in QUEUE_DOCS:
            raise ValueError(f"queue.{key}: no meaning in QUEUE_DOCS (src/jobengine/settings_doc.py)")
        if isinstance(value, bool):
            shown = f"`{str(value).lower()}`"
        else:
            shown = f"`{_number(value)}`" if isinstance(value, float) else f"`{value}`"
        var = f"`{env[key]}`" if key in env else ""
        lines.append(f"| `{key}` | {shown} | {var} | {_cell(QUEUE_DOCS[generic])} |")
    return lines


def render() -> str:
    """The whole of docs/configuration.md."""
    parts = [_INTRO.rstrip("\n"), *_settings_tables(), "", _QUEUE_INTRO.rstrip("\n"), "", *_queue_table(), ""]
    return "\n".join(parts) + "\n" + _EXAMPLES


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
