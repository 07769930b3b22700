"""Stores for transcripts: in memory (default) and SQLite; PostgreSQL via the ``postgres`` extra."""

from .base import FAULT_POINTS, Store, place_revision
from .memory import InMemoryStore
from .sqlite import SQLiteStore

__all__ = ["Store", "InMemoryStore", "SQLiteStore", "FAULT_POINTS", "place_revision"]
