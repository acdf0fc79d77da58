"""One tiny test per service, proving its fixture works, and the skip / fail policy spelled out.

Locally, a service that is down skips its test ("Redis not reachable on 127.0.0.1:6379");
with ``CI`` set, the same test fails, so CI never goes green without having talked to the service.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from support.services import RespConnection, require_service


def test_postgres_dsn_is_a_fresh_database_of_its_own(postgres_dsn: str) -> None:
    import psycopg

    name = urlsplit(postgres_dsn).path.lstrip("/")
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert conn.execute("SELECT current_database()").fetchone() == (name,)
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        assert tables == (0,)


def test_redis_url_is_a_db_of_its_own(redis_url: str) -> None:
    url = urlsplit(redis_url)
    assert url.hostname and url.port
    db = int(url.path.lstrip("/"))
    assert 1 <= db <= 15
    with RespConnection(url.hostname, url.port, db=db) as conn:
        assert conn.command("PING") == "PONG"
        assert conn.command("DBSIZE") == 0
        assert conn.command("SET", "greeting", "hello") == "OK"
        assert conn.command("GET", "greeting") == b"hello"


def test_nats_url_answers_with_info(nats_url: str) -> None:
    url = urlsplit(nats_url)
    assert url.hostname and url.port
    with socket.create_connection((url.hostname, url.port), timeout=5) as sock, sock.makefile("rb") as f:
        assert f.readline().startswith(b"INFO {")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens here now


def test_a_missing_service_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    port = _closed_port()
    with pytest.raises(pytest.skip.Exception, match=f"Redis not reachable on 127.0.0.1:{port}"):
        require_service("redis", port=port)


def test_a_missing_service_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    port = _closed_port()
    with pytest.raises(pytest.fail.Exception, match=f"PostgreSQL not reachable on 127.0.0.1:{port}"):
        require_service("postgres", port=port)
