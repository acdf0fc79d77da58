"""Responses on a kept-alive connection leave at once: the server's accepted sockets have TCP_NODELAY, so
a response written in two parts (headers, then body) does not wait for the client's delayed ACK. The
latency itself is measured by ``bench/http_keepalive.py``; here the cause is checked, which holds however
busy the machine is."""

from __future__ import annotations

import socket

import httpx

from jobengine.http.server import ApiService

from .conftest import Api


def _accepted_sockets(service: ApiService) -> list[socket.socket]:
    server = service._server
    assert server is not None
    found = []
    for protocol in server.server_state.connections:
        transport = getattr(protocol, "transport", None)
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None:
            found.append(sock)
    return found


async def test_accepted_connections_have_tcp_nodelay(api: Api) -> None:
    service = ApiService(api.engine, api.engine.settings, host="127.0.0.1", port=0, app=api.app)
    await service.start()
    try:
        headers = {"Authorization": f"Bearer {api.keys['acme']}"}
        async with httpx.AsyncClient(base_url=service.url, headers=headers, timeout=60) as client:
            for _ in range(2):  # the second request reuses the connection the first opened
                assert (await client.post("/api/v1/jobs", json={"task": "t"})).status_code == 201
                assert (await client.get("/api/v1/jobs")).status_code == 200
            accepted = _accepted_sockets(service)
            assert len(accepted) == 1, accepted
            assert accepted[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        await service.stop()
