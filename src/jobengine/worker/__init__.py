"""The worker runtime: claims jobs under lease, runs their phases, heartbeats, reports outcomes."""

from jobengine.worker.context import JobContext, SyncJobContext
from jobengine.worker.runtime import Worker, WorkerOptions

__all__ = ["JobContext", "SyncJobContext", "Worker", "WorkerOptions"]
