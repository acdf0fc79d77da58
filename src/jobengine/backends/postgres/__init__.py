"""The PostgreSQL backend (psycopg 3, async, pooled): ``pip install 'jobengine[postgres]'``."""

from jobengine.backends.postgres.leader import PostgresLeader
from jobengine.backends.postgres.notifier import PgNotifier
from jobengine.backends.postgres.store import PostgresStore

__all__ = ["PgNotifier", "PostgresLeader", "PostgresStore"]
