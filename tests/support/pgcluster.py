"""A throwaway PostgreSQL cluster of a test's own: ``initdb`` in a temporary directory, the server started
with ``pg_ctl``, then stopped and its data deleted when the block ends. Unlike the machine's shared server,
it can be restarted or killed mid-test. Usage::

    with postgres_cluster() as cluster:           # on a free loopback port
        ...cluster.dsn...
        cluster.restart()                         # pg_ctl restart -m fast
        cluster.kill(); cluster.start()           # SIGKILL the postmaster, then start again (crash recovery)
        cluster.stop("fast"); ...; cluster.start()  # an outage as long as the test wants

The server runs as the ``postgres`` account (it refuses root), trust auth, user and database ``postgres``.
``fsync`` is off: the tests restart or kill the server, never the machine, and a commit written to the
kernel survives a killed server. ``synchronous_commit`` stays on: off, a commit is acknowledged before its
WAL leaves the server's memory, and a killed server forgets it (a claim lost so runs its job again). ``wrap`` prefixes
the commands that start the server (the network test bed runs it inside a namespace). Needs PostgreSQL's
server binaries under /usr/lib/postgresql; without them the test skips locally and fails under ``CI``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

#: What to do when the machine cannot host a cluster, given the reason: it must not return.
Unavailable = Callable[[str], NoReturn]


def skip_or_fail(reason: str) -> NoReturn:
    """The tests' policy (support/services.py): skip locally, fail under ``CI``. Imported only when it is
    used, so that a benchmark bringing its own policy needs no pytest."""
    from support.services import unavailable

    unavailable(reason)


_AS_POSTGRES = ["runuser", "-u", "postgres", "--"]


def server_bin(unavailable: Unavailable = skip_or_fail) -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        unavailable(
            "a PostgreSQL cluster of the test's own needs the server binaries (initdb) under /usr/lib/postgresql"
        )
    return Path(found[-1]).parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Cluster:
    server: Path
    base: Path
    host: str
    port: int
    options: str
    wrap: Callable[[list[str]], list[str]]

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def log(self) -> str:
        path = self.base / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _pg_ctl(self, *args: str) -> None:
        argv = [*_AS_POSTGRES, str(self.server / "pg_ctl"), "-D", str(self.data), "-l", str(self.base / "server.log"),
                "-w", "-t", "120", *args]  # fmt: skip
        done = subprocess.run(self.wrap(argv), capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise AssertionError(f"pg_ctl {' '.join(args)} failed: {done.stdout}{done.stderr}\n{self.log()[-4000:]}")

    def start(self) -> None:
        """Start the server and return once it accepts connections. After :meth:`kill`, the old postmaster's
        backends may still be exiting (and a killed process may still await its reaping): the start is tried
        again until they are gone, as an operator's would be."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self._pg_ctl("-o", self.options, "start")
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m <mode>``: every session is ended, the server is down until it starts again."""
        self._pg_ctl("-m", mode, "-o", self.options, "restart")

    def postmaster(self) -> int | None:
        """The running postmaster's pid (the first line of its pid file), or None."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return None

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash: no shutdown, no checkpoint) and wait until it is gone; its
        backends notice the death and exit by themselves."""
        pid = self.postmaster()
        assert pid is not None, "no postmaster to kill"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self, mode: str = "immediate") -> None:
        """``pg_ctl stop -m <mode>`` (the data stays, :meth:`start` starts it again); SIGKILL if that fails."""
        pid = self.postmaster()
        if pid is None or not _running(pid):
            return
        stop = [*_AS_POSTGRES, str(self.server / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"]
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run(stop, capture_output=True, timeout=90)
        if _running(pid):  # pg_ctl could not stop it
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie awaiting its reaping is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextlib.contextmanager
def postgres_cluster(
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    allow: Sequence[str] = (),
    wrap: Callable[[list[str]], list[str]] = list,
    max_connections: int = 200,
    prefix: str = "jb-pg-",
    unavailable: Unavailable = skip_or_fail,
) -> Iterator[Cluster]:
    """A cluster listening on ``host``:``port`` only (a free port when None), trust auth for local and
    loopback connections and for the networks ``allow`` (CIDR); started, yielded, stopped and deleted."""
    server = server_bin(unavailable)
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        unavailable("a PostgreSQL cluster of the test's own runs as the `postgres` account, which does not exist")
    base = Path(tempfile.mkdtemp(prefix=prefix))
    port = port or free_port(host)
    options = (
        f"-c listen_addresses={host} -c port={port} -c unix_socket_directories={base} "
        f"-c max_connections={max_connections} -c fsync=off "
        "-c full_page_writes=off -c shared_buffers=64MB"
    )
    cluster = Cluster(server, base, host, port, options, wrap)
    try:
        os.chown(base, account.pw_uid, account.pw_gid)
        initdb = [*_AS_POSTGRES, str(server / "initdb"), "-D", str(cluster.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8"]  # fmt: skip
        subprocess.run(initdb, check=True, capture_output=True, timeout=120)
        with (cluster.data / "pg_hba.conf").open("a") as hba:
            hba.writelines(f"host all all {network} trust\n" for network in allow)
        cluster._pg_ctl("-o", options, "start")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
