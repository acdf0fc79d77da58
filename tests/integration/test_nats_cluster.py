"""The NATS transport on a 3-node JetStream cluster of the test's own (tests/support/nats_cluster.py).

- Streams and their consumer get the replica count asked for; with the node leading both killed, what was
  published is delivered and acknowledged through the other two.
- Acks in flight on a connection that is lost (its server frozen, then killed) are sent again over the
  connection the client fails over to: they apply, instead of failing and leaving the messages to come back.
- A stream with no quorum (two nodes of three down) makes a publish raise TransportUnavailable, the error
  its callers retry on, and once the nodes are back the same publish goes through, stored once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import nats
import pytest

from jobengine.backends.nats import NatsTransport
from jobengine.core.queue_config import NatsQueue
from jobengine.errors import TransportUnavailable
from jobengine.ports.transport import Delivery, Message, TransportOptions
from support.nats_cluster import NatsCluster, nats_cluster
from support.services import unique_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def queue_config() -> NatsQueue:
    name = unique_name("clu").replace("_", "-")
    up = name.upper().replace("-", "_")
    return NatsQueue(f"R_{up}", f"{name}.runner", f"{name}-runners", f"R_{up}_DEAD", f"{name}.runner.dead")


def messages(n: int, tag: str) -> list[Message]:
    return [Message(f"{tag}-{i}", "default", f"{tag}-{i}") for i in range(n)]


async def receive_all(transport: NatsTransport, want: int, ceiling: float) -> list[Delivery]:
    got: dict[str, Delivery] = {}
    deadline = time.monotonic() + ceiling
    while len(got) < want:
        assert time.monotonic() < deadline, f"received {len(got)} of {want} in {ceiling:g}s"
        try:
            for d in await transport.receive(want, wait=1.0):
                got.setdefault(d.message.id, d)
        except TransportUnavailable:
            await asyncio.sleep(0.2)  # the consumer has no leader yet
    return list(got.values())


async def replicas(cluster: NatsCluster, config: NatsQueue) -> tuple[int, int, int]:
    """The stream's replica setting, and how many followers the stream and its consumer each have."""
    nc = await nats.connect(cluster.urls)
    try:
        js = nc.jetstream(timeout=10)
        stream = await js.stream_info(config.stream)
        consumer = await js.consumer_info(config.stream, config.durable_consumer)
    finally:
        await nc.close()
    assert stream.cluster is not None and consumer.cluster is not None
    followers = (len(stream.cluster.replicas or []), len(consumer.cluster.replicas or []))
    return (stream.config.num_replicas or 1, *followers)


async def test_a_replicated_queue_delivers_through_the_nodes_left_when_its_leader_dies(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        config = queue_config()
        transport = NatsTransport(cluster.url, "runner", config, TransportOptions(lease_seconds=5.0), replicas=3)
        try:
            assert await transport.publish(messages(200, "a")) == [True] * 200
            assert await replicas(cluster, config) == (3, 2, 2)  # each leader has two followers
            leader = await cluster.colocate_leaders(config.stream, config.durable_consumer)
            cluster.kill(leader)
            got = await receive_all(transport, 200, ceiling=60)
            assert sorted(d.message.id for d in got) == sorted(m.id for m in messages(200, "a"))
            await transport.ack(got)
            deadline = time.monotonic() + 30
            while (depth := await transport.depth()) != 0:
                assert time.monotonic() < deadline, f"{depth} messages left after every one was acknowledged"
                await asyncio.sleep(0.2)
        finally:
            await transport.close()


async def test_a_stream_without_quorum_is_unavailable_and_takes_the_same_publish_once_back(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        config = queue_config()
        transport = NatsTransport(cluster.url, "runner", config, TransportOptions(), replicas=3)
        try:
            assert await transport.publish(messages(10, "before")) == [True] * 10
            down = [n.name for n in cluster.nodes[:2]]
            for name in down:
                cluster.kill(name)
            with pytest.raises(TransportUnavailable):
                await transport.publish(messages(10, "during"))
            for name in down:
                cluster.restart(name)
            deadline = time.monotonic() + 60
            while True:  # the stream elects a leader again
                try:
                    added = await transport.publish(messages(10, "during"))
                    break
                except TransportUnavailable:
                    assert time.monotonic() < deadline, "the stream took no publish after its nodes came back"
                    await asyncio.sleep(0.5)
            assert await transport.publish(messages(10, "during")) == [False] * 10  # stored once
            assert sum(added) <= 10
            got = await receive_all(transport, 20, ceiling=60)
            assert sorted(d.message.id for d in got) == sorted(
                m.id for m in messages(10, "before") + messages(10, "during")
            )
        finally:
            await transport.close()


async def test_acks_on_a_lost_connection_are_sent_again_over_the_next(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        config = queue_config()
        options = TransportOptions(lease_seconds=120.0)  # a message comes back only if its ack is lost
        transport = NatsTransport(cluster.url, "runner", config, options, replicas=3)
        try:
            await transport.publish(messages(20, "a"))
            got = await receive_all(transport, 20, ceiling=30)
            connected = {node: n for node, n in cluster.clients("jobengine-runner").items() if n}
            assert len(connected) == 1, connected
            (client_node,) = connected
            # The stream and its consumer are led elsewhere: only the client's own connection is lost.
            await cluster.colocate_leaders(config.stream, config.durable_consumer,
                                           next(n.name for n in cluster.nodes if n.name != client_node))  # fmt: skip
            cluster.freeze(client_node)
            acking = asyncio.create_task(transport.ack(got))
            await asyncio.sleep(0.5)  # the acks and the flush's PING are written to the frozen server
            cluster.kill(client_node)
            await acking  # no TransportUnavailable: the acks went again over the new connection
            deadline = time.monotonic() + 30
            depth = -1
            while depth != 0:
                assert time.monotonic() < deadline, f"{depth} messages unacknowledged (their lease is 120 s)"
                await asyncio.sleep(0.2)
                with contextlib.suppress(TransportUnavailable):  # the cluster notices its lost node
                    depth = await transport.depth()
        finally:
            await transport.close()
