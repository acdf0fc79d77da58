"""A subprocess that publishes one idempotency key many times at once (the 4-process idempotency test).

``python transport_publisher.py '<spec json>' <key> <count>``: opens the queue the spec names (see
tests/contract/transport/conftest.py), prints ``ready``, waits for a line on stdin (so that every process
fires together), then publishes ``count`` messages with ``key`` concurrently. For the database the "publish"
is an insert of a job with that idempotency key. Prints how many of its publishes stored something.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from jobengine.core.ids import new_job_id
from jobengine.core.models import NewJob
from jobengine.ports.transport import Message, TransportOptions


async def _start_line() -> None:
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)


async def main(spec: dict[str, Any], key: str, count: int) -> int:
    kind = spec["kind"]
    options = TransportOptions(idempotency_window=60.0, consumer="publisher")
    if kind == "database":
        store: Any
        if spec["database"].startswith("postgres"):
            from jobengine.backends.postgres import PostgresStore

            store = PostgresStore(spec["database"], schema=spec["schema"], pool_max=4)
        else:
            from jobengine.backends.sqlite import SqliteStore

            store = SqliteStore(spec["database"])
        await store.get_jobs([])  # open before the start line
        await _start_line()

        async def insert() -> bool:
            job = NewJob(task="contract.task", queue="contract", idempotency_key=key, max_attempts=5)
            inserted = await store.insert_jobs([job], time.time(), [()])
            return inserted.created[0]

        created = await asyncio.gather(*(insert() for _ in range(count)))
        await store.close()
        return sum(created)
    transport: Any
    if kind == "redis":
        from jobengine.backends.redis import RedisTransport
        from jobengine.core.queue_config import RedisQueue

        transport = RedisTransport(spec["url"], "runner", RedisQueue(*spec["config"]), options)
    else:
        from jobengine.backends.nats import NatsTransport
        from jobengine.core.queue_config import NatsQueue

        transport = NatsTransport(spec["url"], "runner", NatsQueue(*spec["config"]), options)
    await transport.health()  # connect before the start line
    await _start_line()
    results = await asyncio.gather(
        *(transport.publish([Message(new_job_id(), "contract", key=key)]) for _ in range(count))
    )
    await transport.close()
    return sum(r[0] for r in results)


if __name__ == "__main__":
    spec, key, count = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    print(asyncio.run(main(spec, key, count)), flush=True)
