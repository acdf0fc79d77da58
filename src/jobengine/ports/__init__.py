"""One Protocol per seam. Nothing above this layer names a backend."""

from jobengine.ports.leader import Leader
from jobengine.ports.notifier import Notifier
from jobengine.ports.store import Store, StoreCapabilities

__all__ = ["Leader", "Notifier", "Store", "StoreCapabilities"]
