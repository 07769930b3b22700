"""Stores for transcripts: in memory (default) and SQLite; PostgreSQL via the ``postgres`` extra."""

from typing import Any

from .base import FAULT_POINTS, Store, place_revision, prepare_commit
from .memory import InMemoryStore
from .sqlite import SQLiteStore
from .vector_cache import StoreVectorCache
from .vectors import VectorRow, VectorStore, supports_vectors

# ``PostgresStore`` is left out of ``__all__`` so a star import works without the extra.
__all__ = [
    "Store",
    "InMemoryStore",
    "SQLiteStore",
    "FAULT_POINTS",
    "place_revision",
    "prepare_commit",
    "VectorStore",
    "VectorRow",
    "StoreVectorCache",
    "supports_vectors",
]


def __getattr__(name: str) -> Any:
    """``PostgresStore`` is imported on first use, so the core never imports psycopg by itself."""
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
