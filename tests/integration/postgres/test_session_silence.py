"""Sessions that must last (leadership, worker liveness, LISTEN) ask the server to drop them once their
client is silent, so a process cut off by a network partition, which never closes its socket, does not keep
its session locks for hours.

The first test reads the settings on the machine's PostgreSQL; the second cuts a real link
(tests/support/netbed.py): a leader on a host of its own is partitioned away, and a contender on the other
side of the cut takes the lead while the partition lasts.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from jobengine.backends.postgres import PostgresLeader
from jobengine.backends.postgres.mixin import SESSION_SILENCE_SECONDS, session
from support.netbed import bed_postgres, netbed
from support.processes import Processes


async def test_a_session_asks_the_server_to_drop_it_when_its_client_goes_silent(postgres_dsn: str) -> None:
    async with await session(postgres_dsn) as conn:
        cur = await conn.execute(
            "SELECT current_setting('tcp_keepalives_idle')::int + current_setting('tcp_keepalives_interval')::int"
            " * current_setting('tcp_keepalives_count')::int, current_setting('tcp_user_timeout')"
        )
        assert await cur.fetchone() == (SESSION_SILENCE_SECONDS, str(SESSION_SILENCE_SECONDS * 1000))  # milliseconds


_HOLDER = """
import asyncio, sys
from jobengine.backends.postgres import PostgresLeader

async def main():
    leader = PostgresLeader(sys.argv[1], "partition")
    while not await leader.try_acquire():
        await asyncio.sleep(0.1)
    print("leading", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_leader_cut_off_by_a_partition_loses_the_lead_during_it(tmp_path: Path) -> None:
    with netbed(["db", "holder"]) as bed, bed_postgres(bed, "db") as dsn:
        procs = Processes(tmp_path, dict(os.environ), tmp_path)
        try:
            holder = procs.run("holder", bed.argv("holder", [sys.executable, "-c", _HOLDER, dsn]))
            procs.wait_output(holder, "leading", 60)
            contender = PostgresLeader(dsn, "partition")
            try:
                assert await contender.try_acquire() is False
                bed.cut("holder")
                cut = time.monotonic()
                # The holder's socket stays open on both sides; only the server's watch on it ends the session.
                while not await contender.try_acquire():
                    assert time.monotonic() - cut < 60, "the partitioned leader kept its lock"
                    await asyncio.sleep(0.2)
                assert holder.poll() is None  # still running, and still cut off
            finally:
                await contender.release()
                bed.heal("holder")
        finally:
            procs.stop_all()
