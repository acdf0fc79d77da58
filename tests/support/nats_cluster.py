"""A 3-node NATS JetStream cluster on loopback, owned by one test: start it, SIGKILL a node, start it again.

Each node is a ``nats-server`` process with its own client, route and monitoring ports (free ones, picked at
start) and its own JetStream store directory under the test's temporary directory; the nodes name each other
in ``--routes`` and share a ``--cluster_name``. ``start`` returns once JetStream has a meta leader that every
node knows, so streams with 3 replicas can be created at once. Who leads what is read from the nodes' HTTP
monitoring (``/jsz``): the meta leader, and the leader of a stream's or a consumer's RAFT group;
``colocate_leaders`` steps leaders down until one node leads a stream and its consumer (a chosen node, e.g.
the one ``clients`` says holds the most connections of a name), so that one kill takes all of them away.

Usage::

    with nats_cluster(tmp_path) as cluster:
        url = cluster.url                          # "nats://127.0.0.1:p1,nats://127.0.0.1:p2,..."
        node = cluster.stream_leader("R_MINE")      # the node that leads the stream's group
        cluster.kill(node); cluster.restart(node)  # SIGKILL, then the same ports and store directory

Everything goes on the way out, failure or not: every node still running is SIGKILLed and reaped, and its
store directory removed (its log stays in the test's directory). Without ``nats-server`` the test skips
locally and fails under ``CI`` (:func:`support.services.unavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.services import unavailable

HOST = "127.0.0.1"
START_TIMEOUT = 60.0  # seconds for a node to answer, or the cluster to elect a meta leader, on a loaded machine


def nats_server_binary() -> str:
    """The path of ``nats-server``; skips the test (fails under CI) when it is not installed."""
    found = shutil.which("nats-server") or next(
        (p for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server") if os.path.exists(p)), None
    )
    if found is None:
        unavailable("nats-server is not installed (needed for a NATS cluster of the test's own)")
    return found


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports free at this instant (all held open together, so none is picked twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]


def _greets(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5) as s:
            s.settimeout(0.5)
            return s.recv(4) == b"INFO"
    except OSError:
        return False


@dataclass
class NatsNode:
    name: str
    port: int
    route_port: int
    http_port: int
    store: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def jsz(self, query: str = "") -> dict[str, Any]:
        """This node's ``/jsz`` monitoring document (``query`` e.g. ``consumers=true``)."""
        with urllib.request.urlopen(f"http://{HOST}:{self.http_port}/jsz?{query}", timeout=5) as answer:
            doc: dict[str, Any] = json.load(answer)
        return doc


@dataclass
class NatsCluster:
    directory: Path
    binary: str
    size: int = 3
    name: str = "jobengine-test"
    nodes: list[NatsNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = _free_ports(3 * self.size)
        for i in range(self.size):
            name = f"n{i + 1}"
            store = self.directory / name
            store.mkdir(parents=True, exist_ok=True)
            self.nodes.append(
                NatsNode(name, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2], store, self.directory / f"{name}.log")
            )

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated, as ``queue.nats.url`` takes them."""
        return ",".join(self.urls)

    def node(self, name: str) -> NatsNode:
        return next(n for n in self.nodes if n.name == name)

    # -- processes ---------------------------------------------------------------------------------------
    def _argv(self, node: NatsNode) -> list[str]:
        routes = ",".join(f"nats://{HOST}:{n.route_port}" for n in self.nodes)
        return [self.binary, "-a", HOST, "-p", str(node.port), "-n", node.name, "-m", str(node.http_port),
                "-js", "-sd", str(node.store), "--cluster", f"nats://{HOST}:{node.route_port}",
                "--cluster_name", self.name, "--routes", routes]  # fmt: skip

    def _spawn(self, node: NatsNode) -> None:
        with open(node.log, "ab") as log:  # the process keeps its own descriptor
            node.proc = subprocess.Popen(self._argv(node), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def _wait_answers(self, node: NatsNode) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not _greets(node.port):
            assert node.proc is not None and node.proc.poll() is None, f"{node.name} exited: {self.tail(node)}"
            assert time.monotonic() < deadline, f"{node.name} did not answer on {node.port}: {self.tail(node)}"
            time.sleep(0.05)

    def start(self) -> None:
        """Start every node, then wait until each answers and all agree on a JetStream meta leader."""
        for node in self.nodes:
            self._spawn(node)
        for node in self.nodes:
            self._wait_answers(node)
        self.wait_meta_leader()

    def kill(self, name: str) -> None:
        """SIGKILL node ``name`` and reap it: no goodbye to its peers or clients, its store as the crash left it."""
        node = self.node(name)
        assert node.proc is not None
        if node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
        node.proc.wait()

    def freeze(self, name: str) -> None:
        """SIGSTOP node ``name``: its connections stay open and nothing sent on them is answered."""
        node = self.node(name)
        assert node.proc is not None and node.proc.poll() is None
        node.proc.send_signal(signal.SIGSTOP)

    def restart(self, name: str) -> None:
        """Start node ``name`` again on its ports and store directory; returns once it answers clients."""
        node = self.node(name)
        assert not node.running, f"{name} is still running"
        self._spawn(node)
        self._wait_answers(node)

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None:
                self.kill(node.name)

    def tail(self, node: NatsNode, chars: int = 2000) -> str:
        return node.log.read_text(errors="replace")[-chars:] if node.log.exists() else ""

    # -- who leads ---------------------------------------------------------------------------------------
    def _ask(self, query: str = "") -> list[dict[str, Any]]:
        docs = []
        for node in self.nodes:
            if node.running:
                with contextlib.suppress(OSError, ValueError):
                    docs.append(node.jsz(query))
        return docs

    def meta_leader(self) -> str | None:
        """The meta leader every running node names, or None while they do not agree (or know none)."""
        leaders = {(d.get("meta_cluster") or {}).get("leader") for d in self._ask()}
        return leaders.pop() if len(leaders) == 1 else None

    def wait_meta_leader(self, timeout: float = START_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while (leader := self.meta_leader()) is None:
            assert time.monotonic() < deadline, (
                f"no JetStream meta leader after {timeout:g}s: {self.tail(self.nodes[0])}"
            )
            time.sleep(0.1)
        return leader

    def stream_leader(self, stream: str) -> str | None:
        """The node leading ``stream``'s RAFT group, as a running node that hosts it reports it."""
        return self._leader(stream, None)

    def consumer_leader(self, stream: str, consumer: str) -> str | None:
        """The node leading the RAFT group of durable ``consumer`` on ``stream``."""
        return self._leader(stream, consumer)

    async def colocate_leaders(
        self, stream: str, consumer: str, node: str | None = None, timeout: float = START_TIMEOUT
    ) -> str:
        """Step leaders down until one node leads both ``stream`` and ``consumer`` (node ``node``, if given),
        and return that node: killing it then takes away at once where messages are stored and where they are
        delivered and acknowledged. A step-down hands leadership to another replica, chosen by election, so
        this asks again until the dice fall right."""
        import nats

        nc = await nats.connect(self.urls, connect_timeout=5)
        try:
            deadline = time.monotonic() + timeout
            while True:
                s_leader = await asyncio.to_thread(self.stream_leader, stream)
                c_leader = await asyncio.to_thread(self.consumer_leader, stream, consumer)
                target = node or s_leader
                if s_leader is not None and s_leader == c_leader == target:
                    return s_leader
                assert time.monotonic() < deadline, f"stream led by {s_leader}, its consumer by {c_leader}"
                api = "$JS.API.STREAM.LEADER.STEPDOWN." + stream
                if s_leader == target:
                    api = f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}"
                if s_leader is not None and c_leader is not None:
                    with contextlib.suppress(Exception):  # an election under way: ask again
                        await nc.request(api, b"", timeout=5)
                await asyncio.sleep(0.5)
        finally:
            await nc.close()

    def clients(self, name: str) -> dict[str, int]:
        """How many client connections named ``name`` each running node holds (its ``/connz``)."""
        out: dict[str, int] = {}
        for node in self.nodes:
            if node.running:
                with urllib.request.urlopen(f"http://{HOST}:{node.http_port}/connz?limit=4096", timeout=5) as answer:
                    doc = json.load(answer)
                out[node.name] = sum(1 for c in doc.get("connections") or [] if c.get("name") == name)
        return out

    def _leader(self, stream: str, consumer: str | None) -> str | None:
        for doc in self._ask("streams=true&consumers=true"):
            for account in doc.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") != stream:
                        continue
                    if consumer is None:
                        leader = (detail.get("cluster") or {}).get("leader")
                    else:
                        found = [c for c in detail.get("consumer_detail") or [] if c.get("name") == consumer]
                        leader = (found[0].get("cluster") or {}).get("leader") if found else None
                    if leader:
                        return str(leader)
        return None


@contextlib.contextmanager
def nats_cluster(directory: Path, size: int = 3) -> Iterator[NatsCluster]:
    """A running cluster of ``size`` nodes with stores under ``directory``; every node is killed afterwards."""
    cluster = NatsCluster(directory, nats_server_binary(), size)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        for node in cluster.nodes:  # the logs stay, with the test's other files
            shutil.rmtree(node.store, ignore_errors=True)
