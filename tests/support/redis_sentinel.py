"""A Redis master, one replica and three Sentinels of the test's own, on loopback, for failover tests.

Debian's ``redis-server`` and ``redis-sentinel`` packages provide the binaries (``make test`` installs
``redis-sentinel`` when it can). Without them the test skips locally with that reason and fails under CI, as
for a missing service. Usage::

    with redis_sentinel(tmp_path) as group:
        url = group.url(db=0)            # redis+sentinel://127.0.0.1:p1,...:p3/<service>/0
        ...
        group.fail_over()                # SIGKILL the master; return once a Sentinel quorum names the replica

Both servers run with ``appendonly yes`` and ``appendfsync always``, so what a master acknowledged is on its
disk; replication is still asynchronous, so writes the replica had not received when the master died are
gone from the promoted one. The Sentinels see a master as down after ``down_after_ms`` (1 s) of silence.
Every process is SIGKILLed when the block ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from support.services import RedisError, RespConnection, unavailable

SERVICE = "jobs"
QUORUM = 2
REPL_USER = "replication"  # the replica's user on the master: turned off to cut replication


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.access(p, os.X_OK)), None
    )
    if found is None:
        package = "redis-sentinel" if name == "redis-sentinel" else "redis-server"
        unavailable(f"{name} is not installed (apt-get install {package})")
    return found


def _ask(port: int, *command: str) -> object:
    """One command to the server on ``port``; None when it does not answer (down, starting, refusing)."""
    try:
        with RespConnection("127.0.0.1", port, timeout=2.0) as conn:
            return conn.command(*command)
    except (OSError, ConnectionError, RedisError):
        return None


def _info(port: int, section: str) -> dict[str, str]:
    text = _ask(port, "INFO", section)
    if not isinstance(text, bytes):
        return {}
    pairs = (line.split(":", 1) for line in text.decode().splitlines() if ":" in line)
    return {k: v for k, v in pairs}


@dataclass
class SentinelGroup:
    """A running group: ``master_port`` is the port of the current master (the replica's after a failover)."""

    dir: Path
    master_port: int
    replica_port: int
    sentinel_ports: list[int]
    down_after_ms: int
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)  # port -> its process
    _killed: int = 0  # the port of the master fail_over killed

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/{db}"

    def master_named(self, port: int) -> int:
        """How many Sentinels name ``port`` as the master."""
        named = 0
        for sentinel in self.sentinel_ports:
            addr = _ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            if isinstance(addr, list) and len(addr) == 2 and addr[1] == str(port).encode():
                named += 1
        return named

    def ready(self) -> bool:
        """Every Sentinel names the master, sees the replica and the two other Sentinels, and the replica is
        in sync: a failover can be authorised and has somewhere to go."""
        if self.master_named(self.master_port) < len(self.sentinel_ports):
            return False
        for sentinel in self.sentinel_ports:
            state = _ask(sentinel, "SENTINEL", "MASTER", SERVICE)
            if not isinstance(state, list):
                return False
            fields = dict(zip(state[::2], state[1::2], strict=False))
            if fields.get(b"num-slaves") != b"1" or fields.get(b"num-other-sentinels") != b"2":
                return False
        return _info(self.replica_port, "replication").get("master_link_status") == "up"

    def wait(self, check: str, ceiling: float) -> None:
        deadline = time.monotonic() + ceiling
        while not getattr(self, check)():
            for port, proc in self.procs.items():
                if proc.poll() is not None and port != self.master_port and port != self._killed:
                    raise AssertionError(f"redis on port {port} exited {proc.returncode}:\n{self.log(port)}")
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {port}\n{self.log(port)[-1500:]}" for port in self.procs)
                raise AssertionError(f"sentinel group: not {check} after {ceiling:g}s\n{logs}")
            time.sleep(0.1)

    def promoted(self) -> bool:
        """A quorum of Sentinels names the replica, and it has taken the master's role."""
        return (
            self.master_named(self.replica_port) >= QUORUM
            and _info(self.replica_port, "replication").get("role") == "master"
        )

    def cut_replication(self) -> None:
        """The replica stops receiving the master's writes (the master goes on taking them): its replication
        user is turned off and its link killed, so it cannot resynchronise either."""
        for command in (("ACL", "SETUSER", REPL_USER, "off"), ("CLIENT", "KILL", "USER", REPL_USER)):
            with RespConnection("127.0.0.1", self.master_port) as conn:
                conn.command(*command)

    def fail_over(self, ceiling: float = 60.0, *, lose_writes_for: float = 0.0) -> int:
        """SIGKILL the master; return once the replica is promoted (the Sentinels need ``down_after_ms`` to
        see it gone, then an election). With ``lose_writes_for``, replication is cut that many seconds
        before the kill, so what the master acknowledged meanwhile is lost with it, as with a replica that
        lagged. Returns how many bytes of the master's replication stream the promoted replica lacks."""
        old = self.master_port
        if lose_writes_for > 0:
            self.cut_replication()
            time.sleep(lose_writes_for)
        sent = int(_info(old, "replication").get("master_repl_offset", "0"))
        received = int(_info(self.replica_port, "replication").get("slave_repl_offset", "0"))
        self._killed = old
        self.procs[old].send_signal(signal.SIGKILL)
        self.procs[old].wait()
        self.wait("promoted", ceiling)
        self.master_port, self.replica_port = self.replica_port, old
        return max(0, sent - received)

    def log(self, port: int) -> str:
        path = self.dir / f"{port}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()


def _start(group: SentinelGroup, port: int, argv: list[str]) -> None:
    with open(group.dir / f"{port}.log", "wb") as log:  # the child keeps its own descriptor
        group.procs[port] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _server(binary: str, port: int, directory: Path, *extra: str) -> list[str]:
    directory.mkdir()
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--daemonize", "no",
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", *extra]  # fmt: skip


@contextlib.contextmanager
def redis_sentinel(
    tmp_path: Path, *, down_after_ms: int = 1000, failover_timeout_ms: int = 3000
) -> Iterator[SentinelGroup]:
    """Start a master, a replica of it and three Sentinels monitoring it as ``jobs``; yield once a failover
    could happen; SIGKILL them all afterwards."""
    server, sentinel = _binary("redis-server"), _binary("redis-sentinel")
    root = tmp_path / "sentinel-group"
    root.mkdir()
    group = SentinelGroup(root, _free_port(), _free_port(), [_free_port() for _ in range(3)], down_after_ms)
    try:
        repl_user = ["--user", REPL_USER, "on", "nopass", "~*", "&*", "+@all"]
        _start(group, group.master_port, _server(server, group.master_port, root / "master", *repl_user))
        replica_of = ["--replicaof", "127.0.0.1", str(group.master_port), "--masteruser", REPL_USER,
                      "--masterauth", "unused"]  # fmt: skip
        _start(group, group.replica_port, _server(server, group.replica_port, root / "replica", *replica_of))
        for port in group.sentinel_ports:
            config = root / f"sentinel-{port}.conf"  # Sentinel rewrites its own file: one each, writable
            lines = [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {root}",
                f"sentinel monitor {SERVICE} 127.0.0.1 {group.master_port} {QUORUM}",
                f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}",
                f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}",
                f"sentinel parallel-syncs {SERVICE} 1",
            ]
            config.write_text("\n".join(lines) + "\n")
            _start(group, port, [sentinel, str(config)])
        group.wait("ready", 60)
        yield group
    finally:
        group.stop()
