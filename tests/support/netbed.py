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
import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from support.pgcluster import Unavailable, postgres_cluster, skip_or_fail

_beds = itertools.count()


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


@contextlib.contextmanager
def bed_postgres(
    bed: NetBed, name: str, *, max_connections: int = 200, unavailable: Unavailable = skip_or_fail
) -> Iterator[str]:
    """A PostgreSQL cluster of its own on host ``name``, listening on its address only (trust auth, user
    ``postgres``, database ``postgres``); yields its DSN. Stopped and its data directory deleted afterwards
    (tests/support/pgcluster.py makes it; its server runs in the host's namespace)."""
    with postgres_cluster(
        bed.address(name),
        5432,
        allow=[f"{bed.subnet}.0/24"],
        wrap=lambda argv: bed.argv(name, argv),
        max_connections=max_connections,
        prefix=f"{bed.tag}-pg-",
        unavailable=unavailable,
    ) as cluster:
        yield cluster.dsn
