"""The SQLite backend: a Store on one WAL-mode file, and a Notifier that sees commits from any process."""

from jobengine.backends.sqlite.notifier import SqliteNotifier
from jobengine.backends.sqlite.store import SqliteStore

__all__ = ["SqliteNotifier", "SqliteStore"]
