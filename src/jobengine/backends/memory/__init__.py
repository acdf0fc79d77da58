from jobengine.backends.memory.notifier import LocalNotifier
from jobengine.backends.memory.store import MemoryStore

__all__ = ["LocalNotifier", "MemoryStore"]
