"""A test bed of hosts on one machine: Linux network namespaces joined by veth pairs to a bridge.

Each host is a network namespace with one address on the bed's subnet; its processes run with
``ip netns exec``, so they reach one another only through the bridge, and cutting a host's link (its veth's
bridge end set down) partitions it from every other host, in both directions and silently, as a pulled
cable does: nothing tells the processes on either side, their connections stay open and their packets are
lost until the link is healed. The test process itself is on the bridge too (the subnet's ``.1``), so it
reaches every host; it is never cut.

The database host gets a PostgreSQL cluster of its own (``initdb``, listening on that host's address only,
data in a temporary directory). Usage::

    with netbed(["db", "api", "worker1"]) as bed, bed_postgres(bed, "db") as dsn:
        p = procs.run("w1", bed.argv("worker1", [sys.executable, "-m", "jobengine", "worker", ...]))
        bed.cut("worker1"); ...; bed.heal("worker1")

Names (namespaces, bridge, links) carry the test process's pid and a counter, so concurrent test runs never
collide. Everything is removed on the way out, failure or not: the namespaces, the bridge and links, the
cluster's processes and data directory. Needs root and ``ip`` (iproute2), plus PostgreSQL's server binaries
for ``bed_postgres``; without them the test skips locally and fails under ``CI``. A caller outside pytest (the
benchmark ``bench/hosts.py``) passes its own ``unavailable``, so this module imports no pytest.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

_beds = itertools.count()

#: What to do when the machine cannot host the bed, given the reason: it must not return.
Unavailable = Callable[[str], NoReturn]


def skip_or_fail(reason: str) -> NoReturn:
    """The tests' policy (support/services.py): skip locally, fail under ``CI``. Imported only when it is
    used, so that a benchmark bringing its own policy needs no pytest."""
    from support.services import unavailable

    unavailable(reason)


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    address: str
    link: str  # the bridge end of the host's veth pair: down is a partition


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _subnet() -> str:
    """A /24 of 10.200.0.0/13 that no interface of the machine is on, the first looked at chosen by pid, so
    that two beds of concurrent runs do not share routes."""
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=30).stdout
    start = os.getpid() % 2048
    for n in range(start, start + 2048):
        subnet = f"10.{200 + n % 2048 // 256}.{n % 256}"
        if f" {subnet}." not in used:
            return subnet
    raise RuntimeError("no free /24 in 10.200.0.0/13")


@dataclass
class NetBed:
    tag: str
    subnet: str
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def gateway(self) -> str:
        """The test process's own address on the bed."""
        return f"{self.subnet}.1"

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run on host ``name`` (``ip netns exec`` execs it: the process is ``argv`` itself)."""
        return ["ip", "netns", "exec", self.hosts[name].netns, *argv]

    def cut(self, name: str) -> None:
        """Partition ``name`` from every other host (and from the test process)."""
        _ip("link", "set", self.hosts[name].link, "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].link, "up")

    def _create(self, names: Sequence[str]) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for number, name in enumerate(names, start=2):
            host = Host(name, f"{self.tag}-{name}", f"{self.subnet}.{number}", f"{self.tag}v{number}")
            self.hosts[name] = host
            _ip("netns", "add", host.netns)
            inner = f"{self.tag}p{number}"
            _ip("link", "add", host.link, "type", "veth", "peer", "name", inner, "netns", host.netns)
            _ip("link", "set", host.link, "master", self.bridge)
            _ip("link", "set", host.link, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", inner)
            _ip("-n", host.netns, "link", "set", inner, "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")

    def remove(self) -> None:
        for host in self.hosts.values():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _ip("netns", "del", host.netns)  # takes the veth pair with it
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _ip("link", "del", host.link)
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            _ip("link", "del", self.bridge)


@contextlib.contextmanager
def netbed(names: Sequence[str], *, unavailable: Unavailable = skip_or_fail) -> Iterator[NetBed]:
    """Hosts ``names`` on a bridge of their own; all removed when the block ends."""
    if shutil.which("ip") is None:
        unavailable("the network test bed needs `ip` (iproute2)")
    if os.geteuid() != 0:
        unavailable("the network test bed makes network namespaces: it needs root")
    bed = NetBed(f"jb{os.getpid() % 100_000}{next(_beds)}", _subnet())
    try:
        try:
            bed._create(names)
        except RuntimeError as exc:
            unavailable(f"the network test bed cannot make its namespaces here: {exc}")
        yield bed
    finally:
        bed.remove()


def _server_bin(unavailable: Unavailable) -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        unavailable("the network test bed needs PostgreSQL's server binaries (initdb) under /usr/lib/postgresql")
    return Path(found[-1]).parent


@contextlib.contextmanager
def bed_postgres(
    bed: NetBed, name: str, *, max_connections: int = 200, unavailable: Unavailable = skip_or_fail
) -> Iterator[str]:
    """A PostgreSQL cluster of its own on host ``name``, listening on its address only (trust auth, user
    ``postgres``, database ``postgres``); yields its DSN. Stopped and its data directory deleted afterwards.

    It runs as the ``postgres`` account (the server refuses root); durability is off (``fsync``), as the
    bed tests partitions, not crashes of the database host."""
    server = _server_bin(unavailable)
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        unavailable("the network test bed runs PostgreSQL as the `postgres` account, which does not exist")
    base = Path(tempfile.mkdtemp(prefix=f"{bed.tag}-pg-"))
    data = base / "data"
    as_postgres = ["runuser", "-u", "postgres", "--"]
    try:
        os.chown(base, account.pw_uid, account.pw_gid)
        subprocess.run([*as_postgres, str(server / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120)  # fmt: skip
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {bed.subnet}.0/24 trust\n")
        options = (
            f"-c listen_addresses={bed.address(name)} -c port=5432 -c unix_socket_directories={base} "
            f"-c max_connections={max_connections} -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c shared_buffers=64MB"
        )
        start = [*as_postgres, str(server / "pg_ctl"), "-D", str(data), "-l", str(base / "server.log"), "-w",
                 "-t", "120", "-o", options, "start"]  # fmt: skip
        done = subprocess.run(bed.argv(name, start), capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            log = (base / "server.log").read_text() if (base / "server.log").exists() else ""
            raise AssertionError(f"the bed's PostgreSQL did not start: {done.stdout}{done.stderr}\n{log}")
        yield f"postgresql://postgres@{bed.address(name)}:5432/postgres"
    finally:
        _stop_cluster(server, data, as_postgres)
        shutil.rmtree(base, ignore_errors=True)


def _stop_cluster(server: Path, data: Path, as_postgres: list[str]) -> None:
    pidfile = data / "postmaster.pid"
    if not pidfile.exists():
        return
    stop = [*as_postgres, str(server / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "60", "stop"]
    with contextlib.suppress(subprocess.SubprocessError):
        subprocess.run(stop, capture_output=True, timeout=90)
    if pidfile.exists():  # pg_ctl could not stop it: the postmaster's pid is the file's first line
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
