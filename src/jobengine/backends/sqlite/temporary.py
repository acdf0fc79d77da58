"""``database: memory``: a SqliteStore on a file in a fresh temporary directory, gone with the process.

The store is SQLite in every respect (the same SQL, migrations, notifier and ports), so what runs on
``memory`` runs the same on a SQLite file. The directory (the database, its WAL, the webhook key file and
the pack blobs beside it) is removed when the store closes, or at interpreter exit if it never does.
Nothing outlives the process, so commits skip fsync (``synchronous = OFF``): a crash loses the data
whatever the setting.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

from jobengine.ports.store import Capabilities

from .store import SqliteStore


class TemporarySqliteStore(SqliteStore):
    """A SqliteStore whose file lives in a temporary directory removed by :meth:`close`.

    Example::

        store = TemporarySqliteStore()
        await store.migrate()
        ...
        await store.close()  # the directory and everything in it are gone
    """

    #: No other process knows the path, so no other process shares it.
    capabilities = Capabilities(cross_process_notify=True, shared=False, migrates_on_first_use=True)

    def __init__(self, *, leader_lease_seconds: float = 5.0) -> None:
        directory = tempfile.mkdtemp(prefix="jobengine-memory-")
        # A finalizer rather than __del__: it also runs at interpreter exit for a store never closed.
        self._remove = weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
        self._directory = Path(directory)
        super().__init__(
            str(self._directory / "jobengine.db"),
            synchronous="OFF",
            worker_synchronous="OFF",
            leader_lease_seconds=leader_lease_seconds,
        )

    @property
    def directory(self) -> Path:
        """The temporary directory holding the database; it no longer exists once the store is closed."""
        return self._directory

    async def close(self) -> None:
        """Close the store, then remove its directory. Idempotent."""
        try:
            await super().close()
        finally:
            self._remove()
