"""Test helpers shared by every tier (imported by ``tests/conftest.py`` and any deeper conftest)."""
