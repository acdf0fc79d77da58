"""The Transport port's contract, one body per behaviour, run on database (SQLite, PostgreSQL), Redis, NATS."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from jobengine.core import codec
from jobengine.ports.transport import (
    DELIVERIES_HEADER,
    FAILURE_REASON_HEADER,
    MESSAGE_ID_HEADER,
    RUN_ID_HEADER,
    SCHEDULE_ID_HEADER,
    Message,
)
from support.services import unique_name

from .conftest import EnvFactory, depth_settles_at, ids, receive_all

PUBLISHER = Path(__file__).parents[2] / "support" / "transport_publisher.py"


async def test_published_messages_are_received_acked_and_gone(make_env: EnvFactory) -> None:
    env = await make_env()
    sent = await env.put(3)
    assert await depth_settles_at(env.transport, 3) == 3
    got = await receive_all(env.transport, 3)
    assert ids(got) == sorted(m.id for m in sent)
    assert all(d.attempt == 1 for d in got)
    assert all(d.lease_until > time.time() for d in got)
    await env.transport.ack(got)
    assert await depth_settles_at(env.transport, 0) == 0
    assert await env.transport.receive(10, wait=0.3) == []


async def test_message_bodies_are_canonical_and_round_trip(make_env: EnvFactory) -> None:
    env = await make_env()
    (sent,) = await env.put(1)
    (d,) = await receive_all(env.transport, 1)
    assert codec.canonical(d.body) == d.body
    assert Message.from_body(d.body) == d.message
    assert d.message.id == sent.id
    assert d.message.body() == d.body
    await env.transport.ack([d])


async def test_receive_waits_for_a_message_that_arrives_later(make_env: EnvFactory) -> None:
    env = await make_env()
    waiting = asyncio.create_task(env.transport.receive(1, wait=5.0))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    started = time.monotonic()
    (sent,) = await env.put(1)
    got = await asyncio.wait_for(waiting, 4.0)
    assert ids(got) == [sent.id]
    assert time.monotonic() - started < 2.0
    await env.transport.ack(got)


async def test_a_delivery_is_held_by_one_receiver_at_a_time(make_env: EnvFactory) -> None:
    env = await make_env()
    other = await env.other()
    await env.put(4)
    mine = await receive_all(env.transport, 2)
    theirs = await receive_all(other, 2)
    assert len(mine) == 2 and len(theirs) == 2
    assert not set(ids(mine)) & set(ids(theirs))
    assert await other.receive(10, wait=0.3) == []
    await env.transport.ack(mine)
    await other.ack(theirs)


async def test_an_expired_lease_delivers_again_counting_the_attempt(make_env: EnvFactory) -> None:
    env = await make_env(lease_seconds=1.0)
    other = await env.other()
    (sent,) = await env.put(1)
    (first,) = await receive_all(env.transport, 1)
    assert first.attempt == 1
    await asyncio.sleep(1.3)  # the receiver "crashed": no ack, no extend
    (again,) = await receive_all(other, 1, timeout=4.0)
    assert again.message.id == sent.id
    assert again.attempt == 2
    await other.ack([again])
    assert await depth_settles_at(env.transport, 0) == 0


async def test_extend_keeps_the_lease(make_env: EnvFactory) -> None:
    env = await make_env(lease_seconds=1.2)
    other = await env.other()
    await env.put(1)
    (d,) = await receive_all(env.transport, 1)
    for _ in range(6):  # 1.8 s in all, beyond the 1.2 s lease; extended every 0.3 s (a loaded machine's loop
        await asyncio.sleep(0.3)  # may stall a few hundred ms: 0.6 s leases extended every 0.2 s did not hold)
        await env.transport.extend([d])
    assert await other.receive(1, wait=0.1) == []
    await env.transport.ack([d])
    await asyncio.sleep(0.4)
    assert await other.receive(1, wait=0.4) == []  # past the lease: acked means gone


async def test_retry_delivers_again_after_the_delay(make_env: EnvFactory) -> None:
    env = await make_env()
    (sent,) = await env.put(1)
    (d,) = await receive_all(env.transport, 1)
    retried_at = time.monotonic()
    await env.transport.retry([d], 1.0)
    assert await env.transport.receive(1, wait=0.5) == []
    (again,) = await receive_all(env.transport, 1, timeout=4.0)
    assert time.monotonic() - retried_at >= 0.9
    assert (again.message.id, again.attempt) == (sent.id, 2)
    assert env.counters.counts["retried"] == 1
    await env.transport.ack([again])


async def test_release_hands_back_without_spending_a_delivery(make_env: EnvFactory) -> None:
    env = await make_env(max_deliveries=2)
    (sent,) = await env.put(1)
    (d,) = await receive_all(env.transport, 1)
    await env.transport.release([d])
    (again,) = await receive_all(env.transport, 1)
    assert again.message.id == sent.id
    await env.transport.release([again])  # its last delivery, on NATS: published afresh, never dead-lettered
    (third,) = await receive_all(env.transport, 1)
    assert third.message.id == sent.id
    await env.transport.ack([third])
    assert await env.transport.dead_letters() == []


async def test_dead_letter_keeps_the_message_with_its_headers(make_env: EnvFactory) -> None:
    env = await make_env()
    (sent,) = await env.put(1, run_id="run-7", schedule_id="sch-3") if env.caps.message_headers else await env.put(1)
    (d,) = await receive_all(env.transport, 1)
    await env.transport.dead_letter([d], "boom: the payload is poison")
    assert await depth_settles_at(env.transport, 0) == 0
    assert await env.transport.receive(1, wait=0.3) == []
    (dead,) = await env.transport.dead_letters()
    assert dead.message.id == sent.id
    headers = dead.headers
    assert headers[FAILURE_REASON_HEADER] == "boom: the payload is poison"
    assert headers[MESSAGE_ID_HEADER] == sent.id
    assert headers[DELIVERIES_HEADER] == "1"
    assert RUN_ID_HEADER in headers and SCHEDULE_ID_HEADER in headers
    if env.caps.message_headers:
        assert (headers[RUN_ID_HEADER], headers[SCHEDULE_ID_HEADER]) == ("run-7", "sch-3")
    assert env.counters.counts["dead_lettered"] == 1


async def test_a_poison_message_is_dead_lettered_after_exactly_max_deliveries(make_env: EnvFactory) -> None:
    """Each delivery's receiver dies (its lease expires): delivered exactly 3 times, then dead-lettered."""
    env = await make_env(lease_seconds=0.5, max_deliveries=3)
    (sent,) = await env.put(1, run_id="run-1", schedule_id="sch-1") if env.caps.message_headers else await env.put(1)
    deliveries = []
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline and not await env.transport.dead_letters():
        deliveries += await env.transport.receive(1, wait=0.3)  # never acked
    assert [d.attempt for d in deliveries] == [1, 2, 3]
    assert {d.message.id for d in deliveries} == {sent.id}
    (dead,) = await env.transport.dead_letters()
    assert dead.message.id == sent.id
    assert dead.headers[DELIVERIES_HEADER] == "3"
    assert dead.headers[FAILURE_REASON_HEADER]
    if env.caps.message_headers:
        assert (dead.headers[RUN_ID_HEADER], dead.headers[SCHEDULE_ID_HEADER]) == ("run-1", "sch-1")
    assert await env.transport.receive(1, wait=1.0) == []
    assert await depth_settles_at(env.transport, 0) == 0


async def test_retrying_the_last_delivery_dead_letters_it(make_env: EnvFactory) -> None:
    env = await make_env(max_deliveries=3)
    (sent,) = await env.put(1)
    attempts = []
    for _ in range(3):
        (d,) = await receive_all(env.transport, 1)
        attempts.append(d.attempt)
        await env.transport.retry([d], 0.0)
    assert attempts == [1, 2, 3]
    assert await env.transport.receive(1, wait=0.5) == []
    (dead,) = await env.transport.dead_letters()
    assert (dead.message.id, dead.headers[DELIVERIES_HEADER]) == (sent.id, "3")


async def test_with_dead_lettering_off_exhausted_messages_are_dropped_and_counted(make_env: EnvFactory) -> None:
    env = await make_env(max_deliveries=2, dead_letter=False)
    await env.put(1)
    for _ in range(2):
        (d,) = await receive_all(env.transport, 1)
        await env.transport.retry([d], 0.0)
    assert await env.transport.receive(1, wait=0.5) == []
    assert await depth_settles_at(env.transport, 0) == 0
    if env.caps.dead_letter_stream:
        assert await env.transport.dead_letters() == []
        assert env.counters.counts["dropped"] == 1
    else:
        # The store never drops a job: it is dead, which is the database's dead-letter.
        assert len(await env.transport.dead_letters()) == 1


async def test_one_key_published_50_times_from_4_processes_gives_one_message(make_env: EnvFactory) -> None:
    env = await make_env()
    key = f"idem-{time.time_ns()}"
    args = [str(PUBLISHER), json.dumps(env.spec), key, "50"]
    pipe = asyncio.subprocess.PIPE
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, *args, stdin=pipe, stdout=pipe, stderr=pipe)
        for _ in range(4)
    ]
    try:
        for p in procs:  # every process connected and waiting at the start line
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), 60)
            assert line.strip() == b"ready", line
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        stored = 0
        for p in procs:
            out, err = await asyncio.wait_for(p.communicate(), 60)
            assert p.returncode == 0, err.decode()
            stored += int(out.strip())
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    assert stored == 1
    assert await depth_settles_at(env.transport, 1) == 1
    got = await receive_all(env.transport, 2, timeout=1.0)
    assert len(got) == 1
    await env.transport.ack(got)


async def test_one_publish_of_many_messages_adds_each_key_once_in_order(make_env: EnvFactory) -> None:
    env = await make_env()
    if env.kind.startswith("database"):
        pytest.skip("the database transport publishes nothing: the job rows are the messages")
    tag = time.time_ns()
    (first,) = await env.transport.publish([Message(f"m{tag}-0", "default", key=f"k{tag}-0")])
    assert first
    # Well past any chunk a transport splits a publish into; every third key repeats one just before it
    # in the same call, and the first repeats the key published above.
    keys = [f"k{tag}-{i - i % 3}" for i in range(1201)]
    messages = [Message(f"m{tag}-{i}", "default", key=k) for i, k in enumerate(keys)]
    added = await env.transport.publish(messages)
    assert added == [i % 3 == 0 and i > 0 for i in range(1201)]
    want = sum(added)
    assert await depth_settles_at(env.transport, want + 1, timeout=10.0) == want + 1
    # Only what should be there, acked at once: waiting out a whole lease for a message that must not exist
    # would see the first deliveries come back, on a slow machine, as copies. The depth above counts extras.
    got = await receive_all(env.transport, want + 1, timeout=30.0)
    assert ids(got) == sorted([f"m{tag}-0", *(m.id for m, a in zip(messages, added, strict=True) if a)])
    await env.transport.ack(got)
    assert await receive_all(env.transport, 1, timeout=0.5) == []


async def test_health_answers(make_env: EnvFactory) -> None:
    env = await make_env()
    health = await env.transport.health()
    assert health.ok, health.detail
    assert health.transport == env.caps.name
    assert health.queue == "runner"
    assert health.latency_ms >= 0


async def test_capabilities_are_declared(make_env: EnvFactory) -> None:
    env = await make_env()
    caps = env.caps
    assert caps.name in ("database", "redis", "nats")
    assert caps.broker is (caps.name != "database")
    assert caps.dedupe is caps.broker
    assert caps.dead_letter_stream is caps.broker


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "nats://127.0.0.1:1"])
async def test_health_of_an_unreachable_broker_is_down_not_an_error(url: str) -> None:
    from jobengine.core.queue_config import NatsQueue, RedisQueue
    from jobengine.ports.transport import Transport, TransportOptions

    transport: Transport
    if url.startswith("redis"):
        from jobengine.backends.redis import RedisTransport

        transport = RedisTransport(url, "planner", RedisQueue("s", "g", "s:dead", "i:"), TransportOptions())
    else:
        from jobengine.backends.nats import NatsTransport

        queue = NatsQueue("S", "s", "c", "S_DEAD", "s.dead")
        transport = NatsTransport(url, "planner", queue, TransportOptions(), connect_timeout=0.3)
    health = await transport.health()
    await transport.close()
    assert not health.ok
    assert health.detail


async def test_what_a_gone_consumer_held_comes_back_long_before_its_lease(make_env: EnvFactory) -> None:
    """A consumer's process dies (its connections close, its entries stay pending): another consumer is
    handed them within seconds where the broker can tell the consumer is gone, not after the 60 s lease."""
    env = await make_env(lease_seconds=60.0, consumer=unique_name("gone"))
    if not env.caps.consumer_presence:
        pytest.skip(f"{env.kind}: a gone consumer's deliveries come back after their lease")
    other = await env.other()
    (sent,) = await env.put(1)
    assert len(await receive_all(env.transport, 1)) == 1
    await env.transport.close()  # the process is gone: its connections close, nothing is acked
    (again,) = await receive_all(other, 1, timeout=30.0)
    assert (again.message.id, again.attempt) == (sent.id, 2)
    assert env.counters.counts["orphans_taken"] == 1
    await other.ack([again])
    assert await depth_settles_at(other, 0) == 0
