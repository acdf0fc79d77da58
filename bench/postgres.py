"""Everything PostgreSQL-specific in the benchmark, in one place.

- :func:`fresh_database`: an empty store for one phase: a new database ``jobengine_bench_<hex>`` on the
  server of ``--dsn``, dropped after (the store puts its tables in schema ``jobengine`` of it).
- :func:`pgbench_ceiling`: the machine's commit rate, ``pgbench -b simple-update -c 2 -j 2`` against a
  scratch database that is created and dropped here (never the benchmark's database).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

SCRATCH_DB = "jobengine_bench_pgbench"


def connect(dsn: str) -> Any:
    """An autocommit connection to ``dsn`` (VACUUM and CREATE DATABASE cannot run in a transaction)."""
    import psycopg  # the "postgres" extra; imported only when this backend is benchmarked

    return psycopg.connect(dsn, autocommit=True)


def fresh_database(dsn: str) -> tuple[str, Callable[[], None]]:
    """Create an empty database ``jobengine_bench_<hex>`` next to the one of ``dsn``; return its URL and a
    function that drops it. A database rather than a schema: the store keeps its tables in the schema of
    the ``postgres_schema`` setting (``jobengine``), which a fresh database leaves empty."""
    from psycopg.conninfo import make_conninfo

    name = f"jobengine_bench_{os.urandom(4).hex()}"
    with connect(dsn) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with connect(dsn) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return _as_url(make_conninfo(dsn, dbname=name)), drop


def _as_url(conninfo: str) -> str:
    """A postgresql:// URL for a key=value conninfo (the ``database`` setting must start with postgresql://)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    d = conninfo_to_dict(conninfo)
    user = quote(str(d.pop("user", "")))
    password = d.pop("password", None)
    auth = f"{user}:{quote(str(password))}@" if password is not None else (f"{user}@" if user else "")
    host = d.pop("host", "127.0.0.1")
    port = d.pop("port", 5432)
    dbname = quote(str(d.pop("dbname", "")))
    query = urlencode({k: str(v) for k, v in d.items()})
    return f"postgresql://{auth}{host}:{port}/{dbname}" + (f"?{query}" if query else "")


def pgbench_ceiling(dsn: str, seconds: int = 10) -> float | None:
    """TPS of ``pgbench -b simple-update -c 2 -j 2 -T seconds`` on a scratch database; None without pgbench."""
    if shutil.which("pgbench") is None:
        return None
    from psycopg.conninfo import make_conninfo

    scratch = make_conninfo(dsn, dbname=SCRATCH_DB)
    with connect(dsn) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {SCRATCH_DB}")
        conn.execute(f"CREATE DATABASE {SCRATCH_DB}")
    try:
        subprocess.run(["pgbench", "-i", "-q", scratch], check=True, capture_output=True, text=True)
        out = subprocess.run(
            ["pgbench", "-b", "simple-update", "-c", "2", "-j", "2", "-T", str(seconds), scratch],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        with connect(dsn) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {SCRATCH_DB}")
    match = re.search(r"tps = ([0-9.]+)", out)
    return float(match.group(1)) if match else None
