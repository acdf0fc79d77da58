"""A PgBouncer of the test's own, in transaction pooling mode, in front of the machine's PostgreSQL.

Debian's ``pgbouncer`` package provides the binary (``make test`` installs it when it can). Without it the
test skips locally with that reason and fails under CI, as for a missing service. Usage::

    with postgres_database() as direct, pgbouncer(direct, tmp_path) as bouncer:
        store = PostgresStore(bouncer.dsn, direct_dsn=direct)

Each instance listens on a free loopback port, with its configuration in ``tmp_path``, and is stopped (and
its pooled server sessions closed) when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from support.services import service_answers, unavailable

#: Where Debian installs it, for a PATH without /usr/sbin.
_BINARY = "/usr/sbin/pgbouncer"


@dataclass(frozen=True)
class Bouncer:
    """A running PgBouncer: ``dsn`` reaches the database of the server DSN through it."""

    dsn: str
    port: int
    user: str

    def stats(self, database: str) -> dict[str, Any]:
        """The admin console's ``SHOW STATS`` row of ``database`` (totals since the bouncer started)."""
        import psycopg

        admin = f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            # The admin console speaks the simple query protocol only.
            result = conn.pgconn.exec_(b"SHOW STATS")
            names = [result.fname(i).decode() for i in range(result.nfields)]  # type: ignore[union-attr]
            for row in range(result.ntuples):
                values = {n: (result.get_value(row, i) or b"").decode() for i, n in enumerate(names)}
                if values["database"] == database:
                    return values
        raise AssertionError(f"no SHOW STATS row for {database}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _unprivileged() -> str:
    """The account PgBouncer drops to when started as root (it refuses to run as root)."""
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_name
    unavailable("pgbouncer: running as root and no postgres or nobody account to drop to")


@contextlib.contextmanager
def pgbouncer(
    server_dsn: str, tmp_path: Path, *, pool_size: int = 8, settings: Mapping[str, str] | None = None
) -> Iterator[Bouncer]:
    """Start PgBouncer (transaction mode) in front of the server of ``server_dsn``; yield its DSN for the
    same database and user; stop it afterwards. ``settings`` are more lines of its ``[pgbouncer]`` section."""
    binary = shutil.which("pgbouncer") or (_BINARY if os.access(_BINARY, os.X_OK) else None)
    if binary is None:
        unavailable("pgbouncer is not installed (apt-get install pgbouncer)")
    url = urlsplit(server_dsn)
    user = url.username or "postgres"
    port = _free_port()
    (tmp_path / "userlist.txt").write_text(f'"{user}" ""\n')
    config = tmp_path / "pgbouncer.ini"
    lines = [
        "[databases]",
        f"* = host={url.hostname or '127.0.0.1'} port={url.port or 5432}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {tmp_path / 'userlist.txt'}",
        f"admin_users = {user}",
        "pool_mode = transaction",
        f"default_pool_size = {pool_size}",
        "max_client_conn = 500",
        "ignore_startup_parameters = extra_float_digits",
        *(f"{name} = {value}" for name, value in (settings or {}).items()),
    ]
    if os.geteuid() == 0:
        lines.append(f"user = {_unprivileged()}")
    config.write_text("\n".join(lines) + "\n")
    log = (tmp_path / "pgbouncer.log").open("wb")
    proc = subprocess.Popen([binary, str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not service_answers("postgres", "127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"pgbouncer did not start (exit {proc.poll()}):\n{(tmp_path / 'pgbouncer.log').read_text()}"
                )
            time.sleep(0.05)
        yield Bouncer(f"postgresql://{user}@127.0.0.1:{port}{url.path}", port, user)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
