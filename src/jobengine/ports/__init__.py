"""One Protocol per seam. Nothing above this layer names a backend."""

from jobengine.ports.leader import Leader
from jobengine.ports.notifier import Notifier
from jobengine.ports.store import Capabilities, Store

__all__ = ["Capabilities", "Leader", "Notifier", "Store"]
