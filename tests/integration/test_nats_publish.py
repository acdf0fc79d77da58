"""The NATS transport's publish: each message's PubAck settles it, and JetStream's refusals become the
transport's errors (away: retried; refused: an error)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.js import api

from jobengine.backends.nats import NatsTransport
from jobengine.core.queue_config import NatsQueue
from jobengine.errors import TransportError, TransportUnavailable
from jobengine.ports.transport import Message, TransportOptions
from support.services import drop_nats_streams


@pytest.fixture
def config(unique_name: str) -> NatsQueue:
    name = unique_name
    return NatsQueue(name, f"{name}.jobs", f"{name}-c", f"{name}_DEAD", f"{name}.dead")


@pytest.fixture
async def transport(nats_url: str, config: NatsQueue) -> AsyncIterator[NatsTransport]:
    transport = NatsTransport(nats_url, "runner", config, TransportOptions())
    try:
        yield transport
    finally:
        await transport.close()
        await drop_nats_streams(nats_url, (config.stream, config.dead_letter_stream))


async def test_each_message_is_added_once_and_a_repeated_key_is_a_duplicate(transport: NatsTransport) -> None:
    first = [Message(f"job-{k}", "default") for k in range(20)]
    assert await transport.publish(first) == [True] * 20
    again = [Message("job-3", "default"), Message("job-20", "default"), Message("job-7", "default")]
    assert await transport.publish(again) == [False, True, False]
    assert await transport.depth() == 21
    assert transport._acks == {}  # nothing left waiting


async def test_a_publish_with_no_stream_to_take_it_is_the_broker_being_away(
    transport: NatsTransport, nats_url: str
) -> None:
    assert await transport.publish([Message("job-1", "default")]) == [True]
    await drop_nats_streams(nats_url, (transport.config.stream,))  # JetStream answers "no responders"
    with pytest.raises(TransportUnavailable, match="publishing"):
        await transport.publish([Message("job-2", "default")])
    assert transport._acks == {}


async def test_a_publish_jetstream_refuses_is_an_error(
    transport: NatsTransport, nats_url: str, config: NatsQueue
) -> None:
    # The stream made first, with a tiny message limit: the transport connects at its first call and keeps a
    # stream that exists.
    nc = await nats.connect(nats_url)
    try:
        tiny = api.StreamConfig(name=config.stream, subjects=[config.subject], max_msg_size=16)
        await nc.jetstream().add_stream(tiny)
    finally:
        await nc.close()
    with pytest.raises(TransportError, match="message size exceeds maximum") as info:
        await transport.publish([Message("job-1", "default")])
    assert not isinstance(info.value, TransportUnavailable)  # at once, not after the PubAck's timeout
    assert transport._acks == {}
