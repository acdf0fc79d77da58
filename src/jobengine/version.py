"""The version of this jobengine (the wheel's metadata says the same; a test checks it)."""

__version__ = "0.1.0"
