"""The in-memory store: the default, for one process."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..errors import StoreClosedError
from ..records.revisions import Revision
from .base import Store, checked_after, checked_keep, prepare_commit
from .integrity import IdEntry, index_of_log
from .schema import checked_session
from .vectors import VectorRow, VectorStore, checked_dimension, checked_embedder, checked_rows, refused_save

__all__ = ["InMemoryStore"]


class InMemoryStore(Store, VectorStore):
    """Revision logs (and saved vectors) in dicts, guarded by a lock.  Lost when the process ends.

    Revisions go in and come out as copies (:meth:`Revision.detached`), so mutating a
    message's ``metadata`` or ``parts`` after committing or reading never changes the log.
    Session ids are checked as the SQL stores check them (a str UTF-8 can encode, else
    :class:`InvalidTypeError` / :class:`InvalidInputError`), and a call after :meth:`close`
    raises :class:`StoreClosedError` as theirs does, so code that works here works there.
    """

    def __init__(self) -> None:
        self._logs: dict[str, list[Revision]] = {}
        self._index: dict[str, dict[str, IdEntry]] = {}
        self._set_aside: dict[str, list[Revision]] = {}
        # session -> (embedder, dimension, text_hash, message_id) -> row; dicts keep insertion order
        self._vectors: dict[str, dict[tuple[str, int, str, str], VectorRow]] = {}
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def _held(self) -> Iterator[None]:
        """The lock, held for the block, on a store that is not closed: a call after
        :meth:`close` raises :class:`StoreClosedError`, as the SQL stores' calls do (a commit
        a closed store accepted would be kept where nobody reads it)."""
        with self._lock:
            if self._closed:
                raise StoreClosedError(
                    f"this {type(self).__name__} was closed and may not be used any more; close it only once the code "
                    "using it is done, or give that code a new store"
                )
            yield

    def setup(self) -> None:
        """Nothing to create (a closed store raises :class:`StoreClosedError`)."""
        with self._held():
            pass

    def head(self, session_id: str) -> int:
        session_id = checked_session(session_id)
        with self._held():
            log = self._logs.get(session_id)
            return log[-1].number if log else 0

    def tip(self, session_id: str) -> tuple[int, float]:
        session_id = checked_session(session_id)
        with self._held():
            log = self._logs.get(session_id)
            return (log[-1].number, log[-1].time) if log else (0, 0.0)

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        session_id, after = checked_session(session_id), checked_after(after)
        with self._held():
            return [r.detached() for r in self._logs.get(session_id, [])[after:]]

    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        session_id = checked_session(session_id)
        with self._held():
            self._fault("begin")
            log = self._logs.get(session_id, [])
            index = self._index.get(session_id, {})
            head = log[-1].number if log else 0
            later = log[expected_head:] if isinstance(expected_head, int) and 0 <= expected_head < head else []

            def lookup(ids: Iterable[str]) -> Mapping[str, IdEntry]:
                return {i: index[i] for i in ids if i in index}

            stored, rows = prepare_commit(session_id, revision, head, expected_head, later, lookup, renew_taken_ids)
            if stored.number == head:
                return stored.detached()  # a no-op: nothing to write
            self._fault("written")
            self._fault("before_commit")
            self._logs.setdefault(session_id, []).append(stored.detached())
            self._index.setdefault(session_id, {}).update(rows)
            return stored.detached()

    def truncate(self, session_id: str, keep: int) -> int:
        session_id, keep = checked_session(session_id), checked_keep(keep)
        with self._held():
            log = self._logs.get(session_id, [])
            dropped = log[keep:]
            if dropped:
                self._set_aside.setdefault(session_id, []).extend(dropped)
                del log[keep:]
                self._index[session_id] = index = index_of_log(log)
                if not log:
                    self._logs.pop(session_id, None)
                self._prune_set_aside(session_id, index, bool(log))
            return len(dropped)

    def _prune_set_aside(self, session_id: str, index: Mapping[str, IdEntry], kept: bool) -> None:
        """After a truncate (under the lock): drop the vectors of messages the kept log no
        longer holds, and every vector if it holds no revision (``kept`` False)."""
        saved = self._vectors.get(session_id, {})
        for key in [k for k in saved if not kept or (k[3] and not (k[3] in index and index[k[3]].present))]:
            del saved[key]
        if not saved:
            self._vectors.pop(session_id, None)

    def purge(self, session_id: str) -> None:
        session_id = checked_session(session_id)
        with self._held():
            self._logs.pop(session_id, None)
            self._index.pop(session_id, None)
            self._set_aside.pop(session_id, None)
            self._vectors.pop(session_id, None)

    def sessions(self) -> list[str]:
        with self._held():
            return sorted(self._logs)

    def stored_sessions(self) -> list[str]:
        """Sessions with revisions, set-aside revisions or vectors, sorted (see :meth:`Store.stored_sessions`)."""
        with self._held():
            held = (self._logs, self._set_aside, self._vectors)
            return sorted({session for part in held for session, rows in part.items() if rows})

    def close(self) -> None:
        """Close the store (idempotent): every later call raises :class:`StoreClosedError`."""
        with self._lock:
            self._closed = True

    # -- vectors (VectorStore) ------------------------------------------------------------
    def save_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        session_id, checked = checked_session(session_id), checked_rows(rows)
        with self._held():
            if not self._logs.get(session_id):
                return refused_save(self, session_id, len(checked))
            saved = self._vectors.setdefault(session_id, {})
            index = self._index.get(session_id, {})
            texts = {row.message_id: row.text_hash for row in checked if row.message_id}
            for key in [k for k in saved if k[3] in texts and k[2] != texts[k[3]]]:
                del saved[key]  # a message's new text: its vectors of other texts are stale
            for row in checked:
                key = (row.embedder, row.dimension, row.text_hash, row.message_id)
                saved.pop(key, None)  # a rewrite moves the row to the end (newest last)
                saved[key] = row
            for key in [k for k in saved if k[3] in index and not index[k[3]].present]:
                del saved[key]  # vectors of removed messages
            return len(checked)

    def load_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        session_id, embedder = checked_session(session_id), checked_embedder(embedder)
        dimension = checked_dimension(dimension)
        with self._held():
            return [
                row
                for (name, dim, _, _), row in self._vectors.get(session_id, {}).items()
                if name == embedder and (dimension is None or dim == dimension)
            ]

    def delete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        session_id = checked_session(session_id)
        embedder = None if embedder is None else checked_embedder(embedder)
        with self._held():
            saved = self._vectors.get(session_id, {})
            doomed = [key for key in saved if embedder is None or key[0] == embedder]
            for key in doomed:
                del saved[key]
            if not saved:
                self._vectors.pop(session_id, None)
            return len(doomed)
