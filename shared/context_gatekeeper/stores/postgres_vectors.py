"""The vector capability of :class:`~context_gatekeeper.stores.postgres.PostgresStore`
(table ``<prefix>vectors``), kept apart so the store's module stays short.

Imports no psycopg: the statements are templates the store composes with its table
names; each operation is a generator of SQL steps that the store's drivers run, sync
or async (see :mod:`.postgres_ops`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Iterable
from typing import Any

from ..errors import StoreClosedError
from .postgres_ops import Step, Steps
from .schema import id_key
from .vectors import (
    VectorRow, VectorStore, checked_dimension, checked_embedder, checked_rows, pack_vector, refused_save, unpack_vector,
)

__all__ = ["PostgresVectors", "VECTORS_TABLE", "VECTOR_TEMPLATES"]

VECTORS_TABLE = """CREATE TABLE {vectors} (
    session_key bytea            NOT NULL,
    embedder    text             NOT NULL,
    dimension   integer          NOT NULL CHECK (dimension >= 1),
    text_hash   text             NOT NULL,
    message_id  bytea            NOT NULL,
    vector      bytea            NOT NULL,
    created_at  double precision NOT NULL,
    PRIMARY KEY (session_key, embedder, dimension, text_hash, message_id)
)"""
"""Migration 3 of the PostgreSQL store (``{vectors}`` is the prefixed table name)."""

VECTOR_TEMPLATES = {
    "save_vector": """INSERT INTO {vectors} (session_key, embedder, dimension, text_hash, message_id, vector, created_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (session_key, embedder, dimension, text_hash, message_id)
        DO UPDATE SET vector = excluded.vector, created_at = excluded.created_at""",
    "load_vectors": """SELECT message_id, text_hash, embedder, vector FROM {vectors}
        WHERE session_key = %s AND embedder = %s AND (%s::integer IS NULL OR dimension = %s::integer)
        ORDER BY created_at""",
    # a count, not cursor.rowcount: the store writes in pipeline mode, where rowcount is not known yet
    "delete_vectors": """WITH gone AS (DELETE FROM {vectors}
        WHERE session_key = %s AND (%s::text IS NULL OR embedder = %s::text) RETURNING 1)
        SELECT count(*) FROM gone""",
    "purge_vectors": "DELETE FROM {vectors} WHERE session_key = %s",
    "drop_other_texts": """DELETE FROM {vectors} v USING unnest(%s::bytea[], %s::text[]) AS n (message_id, text_hash)
        WHERE v.session_key = %s AND v.message_id = n.message_id AND v.text_hash <> n.text_hash""",
    "prune_removed": """DELETE FROM {vectors} WHERE session_key = %s AND message_id IN
        (SELECT message_id FROM {ids} WHERE session_key = %s AND NOT present)""",
}


class PostgresVectors(VectorStore):
    """:class:`.VectorStore` for the PostgreSQL store, sync and native async (each
    operation written once as SQL steps, see :mod:`.postgres_ops`).  Writes take the
    session's advisory lock, so they queue behind (and never outlive) a concurrent
    ``purge``, and a save checks, under that lock, that the session still holds revisions."""

    # provided by the store (see .postgres_ops.PostgresOps)
    _closed: bool
    _closed_error: Callable[[], StoreClosedError]
    _sql: dict[str, Any]
    _key: Callable[[Any], tuple[bytes, str]]
    _session_lock: Callable[[tuple[bytes, str]], int]
    _head_steps: Callable[[tuple[bytes, str]], Steps[int]]
    _run: Callable[..., Any]
    _arun: Callable[..., Awaitable[Any]]

    def _saving(self, session_id: str, rows: Iterable[Any]) -> tuple[tuple[bytes, str], list[tuple[Any, ...]]]:
        """The session's key and the table rows to save (all checked before anything is
        written; a closed store refuses even an empty save, as the SQLite store does)."""
        if self._closed:
            raise self._closed_error()
        key, checked = self._key(session_id), checked_rows(rows)
        now = time.time()
        return key, [
            (key[0], r.embedder, r.dimension, r.text_hash, id_key(r.message_id), pack_vector(r.vector), now)
            for r in checked
        ]

    def _save_steps(self, session_id: str, key: tuple[bytes, str], values: list[tuple[Any, ...]]) -> Steps[int]:
        """Store ``values`` if the session holds revisions; how many were stored."""
        if not (yield from self._head_steps(key)):
            return refused_save(self, session_id, len(values))
        texts = {v[4]: v[3] for v in values if v[4]}  # a message's new text: its other texts go
        if texts:
            yield Step("none", self._sql["drop_other_texts"], (list(texts), list(texts.values()), key[0]))
        yield Step("many", self._sql["save_vector"], values)
        yield Step("none", self._sql["prune_removed"], (key[0], key[0]))
        return len(values)

    def _vectors_steps(self, session_id: str, embedder: str, dimension: int | None) -> Steps[list[VectorRow]]:
        key, embedder = self._key(session_id), checked_embedder(embedder)
        dimension = checked_dimension(dimension)
        rows = yield Step("all", self._sql["load_vectors"], (key[0], embedder, dimension, dimension))
        return [VectorRow(bytes(m).decode("utf-8", "surrogatepass"), h, e, unpack_vector(v)) for m, h, e, v in rows]

    def _delete_steps(self, key: tuple[bytes, str], embedder: str | None) -> Steps[int]:
        embedder = None if embedder is None else checked_embedder(embedder)
        row = yield Step("one", self._sql["delete_vectors"], (key[0], embedder, embedder))
        return int(row[0])

    def save_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        """Store vectors for the session in one transaction (see :class:`.VectorStore`)."""
        key, values = self._saving(session_id, rows)
        return int(self._run(self._save_steps(session_id, key, values), self._session_lock(key))) if values else 0

    def load_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        """The session's vectors by ``embedder`` (of ``dimension`` floats, if given), oldest first."""
        return list(self._run(self._vectors_steps(session_id, embedder, dimension)))

    def delete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        """Erase the session's vectors (of one embedder, or all); returns how many."""
        key = self._key(session_id)
        return int(self._run(self._delete_steps(key, embedder), self._session_lock(key)))

    async def asave_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        """Async :meth:`save_vectors` (native, no thread)."""
        key, values = self._saving(session_id, rows)
        return int(await self._arun(self._save_steps(session_id, key, values), self._session_lock(key))) if values else 0

    async def aload_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        """Async :meth:`load_vectors` (native, no thread)."""
        return list(await self._arun(self._vectors_steps(session_id, embedder, dimension)))

    async def adelete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        """Async :meth:`delete_vectors` (native, no thread)."""
        key = self._key(session_id)
        return int(await self._arun(self._delete_steps(key, embedder), self._session_lock(key)))
