"""The Redis transport through Sentinel: it finds the master, follows it through a failover (and says that
the broker's history changed), and counts a server that refuses writes (a replica, a demoted master) as
unavailable, not as a refusal.

Each test starts its own master, replica and three Sentinels (tests/support/redis_sentinel.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from jobengine.backends.redis.transport import RedisTransport
from jobengine.core.queue_config import RedisConfig
from jobengine.errors import TransportUnavailable
from jobengine.ports.transport import Message, TransportOptions
from support.redis_sentinel import redis_sentinel
from support.services import RespConnection

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

QUEUE = RedisConfig().runner


def _messages(start: int, n: int) -> list[Message]:
    return [Message(f"job-{i}", "default") for i in range(start, start + n)]


def _stream_length(port: int) -> int:
    with RespConnection("127.0.0.1", port) as conn:
        length = conn.command("XLEN", QUEUE.stream)
    assert isinstance(length, int)
    return length


def _replication_id(port: int) -> str:
    with RespConnection("127.0.0.1", port) as conn:
        info = conn.command("INFO", "replication")
    assert isinstance(info, bytes)
    return next(line.split(":")[1] for line in info.decode().splitlines() if line.startswith("master_replid:"))


async def _until(check: object, ceiling: float, what: str) -> None:
    deadline = time.monotonic() + ceiling
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out after {ceiling:g}s waiting for {what}"
        await asyncio.sleep(0.1)


async def test_a_master_demoted_under_a_transport_is_unavailable_so_callers_retry(tmp_path: Path) -> None:
    with redis_sentinel(tmp_path) as group:
        transport = RedisTransport(f"redis://127.0.0.1:{group.master_port}/0", "runner", QUEUE)
        try:
            assert await transport.publish(_messages(0, 3)) == [True] * 3

            async def replicated() -> bool:
                return _stream_length(group.replica_port) == 3

            await _until(replicated, 30, "the replica to receive the stream")
            # The roles swap under the transport's open connection, as a failover does to a master that was
            # only cut off: its writes now meet READONLY, a script's (publish) and a command's (a group read).
            with RespConnection("127.0.0.1", group.replica_port) as conn:
                conn.command("REPLICAOF", "NO", "ONE")
            with RespConnection("127.0.0.1", group.master_port) as conn:
                conn.command("REPLICAOF", "127.0.0.1", str(group.replica_port))
            with pytest.raises(TransportUnavailable, match="read only replica"):
                await transport.publish(_messages(3, 1))
            with pytest.raises(TransportUnavailable, match="read only replica"):
                await transport.receive(10)
        finally:
            await transport.close()


async def test_the_transport_follows_the_master_through_a_failover(tmp_path: Path) -> None:
    with redis_sentinel(tmp_path) as group:
        histories: list[str] = []
        transport = RedisTransport(group.url(), "runner", QUEUE, TransportOptions(new_history=histories.append))
        try:
            assert await transport.receive(10) == []  # a first look at the server's history
            assert await transport.publish(_messages(0, 50)) == [True] * 50
            assert _stream_length(group.master_port) == 50

            async def replicated() -> bool:
                return _stream_length(group.replica_port) == 50

            await _until(replicated, 30, "the replica to receive the stream")
            first = group.master_port
            await asyncio.to_thread(group.fail_over)
            assert group.master_port != first
            published: list[bool] = []

            async def publishes() -> bool:
                try:
                    published.extend(await transport.publish(_messages(50, 50)))
                except TransportUnavailable:
                    return False
                return True

            await _until(publishes, 60, "a publish to reach the promoted replica")
            assert published == [True] * 50
            assert _stream_length(group.master_port) == 100  # the new master has the old entries and the new
            got = []
            deadline = time.monotonic() + 60
            while len(got) < 100:
                assert time.monotonic() < deadline, f"received {len(got)} of 100 after the failover"
                try:
                    got += await transport.receive(100, wait=0.5)
                except TransportUnavailable:
                    await asyncio.sleep(0.1)
            assert sorted(d.message.id for d in got) == sorted(m.id for m in _messages(0, 100))
            await transport.ack(got)
            assert _stream_length(group.master_port) == 0
            # It noticed, once, that the master it talks to is another server with another history.
            assert len(histories) == 1
            assert histories[0].split(":")[1] == _replication_id(group.master_port)
        finally:
            await transport.close()


async def test_closing_a_sentinel_transport_closes_its_sentinel_connections(tmp_path: Path) -> None:
    with redis_sentinel(tmp_path) as group:
        transport = RedisTransport(group.url(), "runner", QUEUE)
        assert (await transport.health()).ok
        await transport.close()

        def sentinel_clients() -> int:
            total = 0
            for port in group.sentinel_ports:
                with RespConnection("127.0.0.1", port) as conn:
                    listing = conn.command("CLIENT", "LIST")
                assert isinstance(listing, bytes)
                # Our own connection is one; Sentinels' links to each other carry the name "sentinel-...".
                total += sum(1 for line in listing.decode().splitlines() if "name=sentinel-" not in line) - 1
            return total

        async def closed() -> bool:
            return sentinel_clients() == 0

        await _until(closed, 10, "the transport's Sentinel connections to close")
