"""The vector capability of :class:`~context_gatekeeper.stores.sqlite.SQLiteStore`
(table ``vectors``, migration 3), kept apart so the store's module stays short."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .schema import checked_session, id_key
from .vectors import (
    VectorRow, VectorStore, checked_dimension, checked_embedder, checked_rows, pack_vector, refused_save, unpack_vector,
)

if TYPE_CHECKING:
    import contextlib
    import sqlite3

__all__ = ["SQLiteVectors"]

_SAVE_VECTOR = """INSERT INTO vectors (session_id, embedder, dimension, text_hash, message_id, vector, created_at)
    VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, embedder, dimension, text_hash, message_id)
    DO UPDATE SET vector = excluded.vector, created_at = excluded.created_at"""
_LOAD_VECTORS = """SELECT message_id, text_hash, embedder, vector FROM vectors
    WHERE session_id = ? AND embedder = ? AND (? IS NULL OR dimension = ?) ORDER BY created_at"""
_HAS_REVISIONS = "SELECT EXISTS (SELECT 1 FROM revisions WHERE session_id = ?)"
_DROP_OTHER_TEXTS = """WITH new (message_id, text_hash) AS (VALUES {pairs})
    DELETE FROM vectors WHERE session_id = ? AND EXISTS (SELECT 1 FROM new
    WHERE new.message_id = vectors.message_id AND new.text_hash <> vectors.text_hash)"""
_CHUNK = 400  # (message id, text hash) pairs a statement; one pass over the session's rows each
_PRUNE_REMOVED = """DELETE FROM vectors WHERE session_id = ? AND message_id IN
    (SELECT message_id FROM message_ids WHERE session_id = ? AND present = 0)"""


class SQLiteVectors(VectorStore):
    """:class:`.VectorStore` for the SQLite store: each method is one transaction on
    the store's connection (``_write`` / ``_connection``)."""

    if TYPE_CHECKING:  # provided by SQLiteStore

        def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

        def _connection(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    def save_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        """Store vectors for the session in one transaction (see :class:`.VectorStore`)."""
        session_id, checked = checked_session(session_id), checked_rows(rows)
        now = time.time()
        values = [
            (session_id, r.embedder, r.dimension, r.text_hash, id_key(r.message_id), pack_vector(r.vector), now)
            for r in checked
        ]
        with self._write() as conn:
            if not conn.execute(_HAS_REVISIONS, (session_id,)).fetchone()[0]:
                return refused_save(self, session_id, len(values))
            texts = {v[4]: v[3] for v in values if v[4]}  # a message's new text: its other texts go
            pairs = list(texts.items())
            for start in range(0, len(pairs), _CHUNK):
                chunk = pairs[start : start + _CHUNK]
                marks = ", ".join(["(?, ?)"] * len(chunk))
                conn.execute(_DROP_OTHER_TEXTS.format(pairs=marks), [*(x for p in chunk for x in p), session_id])
            conn.executemany(_SAVE_VECTOR, values)
            conn.execute(_PRUNE_REMOVED, (session_id, session_id))
        return len(values)

    def load_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        """The session's vectors by ``embedder`` (of ``dimension`` floats, if given), oldest first."""
        session_id, embedder = checked_session(session_id), checked_embedder(embedder)
        dimension = checked_dimension(dimension)
        with self._connection() as conn:
            rows = conn.execute(_LOAD_VECTORS, (session_id, embedder, dimension, dimension)).fetchall()
        return [VectorRow(bytes(m).decode("utf-8", "surrogatepass"), h, e, unpack_vector(v)) for m, h, e, v in rows]

    def delete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        """Erase the session's vectors (of one embedder, or all); returns how many."""
        session_id = checked_session(session_id)
        embedder = None if embedder is None else checked_embedder(embedder)
        with self._write() as conn:
            query = "DELETE FROM vectors WHERE session_id = ? AND (? IS NULL OR embedder = ?)"
            return conn.execute(query, (session_id, embedder, embedder)).rowcount
