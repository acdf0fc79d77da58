"""The Python SDK: an HTTP client for the jobengine API and a remote worker that runs task handlers against
it (``pip install jobengine`` brings httpx). Workers here never touch the database: every transition goes
through the server, under the same leases and fencing as in-process workers."""

from jobengine.sdk.client import ApiClient, ApiError
from jobengine.sdk.graphs import GraphInfo, GraphNode, GraphNodeInfo, GraphPage, Graphs
from jobengine.sdk.source import HttpWorkerSource
from jobengine.sdk.worker import RemoteWorker, TaskApp

__all__ = [
    "ApiClient",
    "ApiError",
    "GraphInfo",
    "GraphNode",
    "GraphNodeInfo",
    "GraphPage",
    "Graphs",
    "HttpWorkerSource",
    "RemoteWorker",
    "TaskApp",
]
