"""A vector cache backed by a store: what a transcript's selector reads its turn vectors from.

:class:`StoreVectorCache` has the shape the selection side expects of a vector cache
(``get(key)``, ``put(key, vector)``, ``put_many(items)``, with ``key = (embedder_name,
text_hash)``), keeps what it has seen in memory, and writes through to a store with
the vector capability (:class:`~context_gatekeeper.stores.vectors.VectorStore`), so
a reopened transcript or a restarted worker reads its vectors instead of embedding
its history again.  Over a store without the capability it is a plain in-memory cache.

Saved vectors are a cache: when the store fails to read or write them, or refuses the
embedder's name (longer than a store keeps), the cache warns once and carries on in
memory (the cost is re-embedding later), so a chat never breaks on them.  Invalid
input (a malformed key or vector) is still refused with
:class:`~context_gatekeeper.errors.InvalidInputError`, before anything changes.
"""

from __future__ import annotations

import threading
import warnings
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from ..selection.semantic.embedding import is_local_name
from ..caching import BoundedCache, require_count
from ..errors import InvalidInputError, InvalidTypeError
from .vectors import VectorRow, checked_rows, storable_embedder, supports_vectors

__all__ = ["StoreVectorCache"]

Key = tuple[str, str]


class StoreVectorCache:
    """Vectors of one session, keyed by ``(embedder_name, text_hash)``, saved in ``store``.

    Args:
        store: any :class:`~context_gatekeeper.stores.Store`; with the vector
            capability the vectors persist, otherwise they live in this object only.
        session_id: the session whose vectors these are (``purge`` erases them).
        max_vectors: the most vectors held in memory per embedder (float32; the least
            recently used go first, and are read from the store again when it is
            reloaded; over a store without the capability, they are embedded again).

    The first ``get`` for an embedder loads all of that embedder's saved vectors in
    one query; later lookups are dictionary reads.  One embedder name maps to one
    dimension at a time: the dimension of the newest saved vector, or of the latest
    ``put``.  A ``put`` of another dimension (the model behind the name changed)
    starts afresh, and vectors of the old dimension are no longer returned.

    Vectors of an embedder with a process-local name (a lambda, a plain function or an
    object with no model attribute: :func:`~context_gatekeeper.selection.semantic.embedding.is_local_name`)
    are held in memory only: nothing tells their model apart after a restart.  So are
    those of a name the store refuses (over 200 characters: give the embedder a shorter
    ``name=``), with one warning.

    The store keeps only vectors of the session's current state: a save for a purged
    session is dropped, and a message's vector of an edited or removed text goes at the
    next save (see :class:`~context_gatekeeper.stores.vectors.VectorStore`).

    Thread-safe.  ``loads`` and ``saves`` count the store round trips (tests use them).
    """

    def __init__(self, store: Any, session_id: str, *, persist: bool = True, max_vectors: int = 20_000) -> None:
        if not isinstance(session_id, str):
            raise InvalidTypeError(f"session_id must be a str, got {type(session_id).__name__}; pass the session's id")
        max_vectors = require_count(max_vectors, "max_vectors", "pass how many vectors to keep")
        self.store = store
        self.session_id = session_id
        self.persistent = bool(persist) and supports_vectors(store)
        self.max_vectors = max_vectors
        self._vectors: dict[str, BoundedCache[str, array]] = {}  # per embedder, the most recently used
        self._dimension: dict[str, int] = {}
        self._lock = threading.RLock()
        self._warned = False
        self._unsaved_names: set[str] = set()  # names the store refuses, warned about
        self.loads = 0
        self.saves = 0

    def __repr__(self) -> str:
        return f"StoreVectorCache({self.store!r}, {self.session_id!r}, persistent={self.persistent})"

    # -- the cache protocol ---------------------------------------------------------------
    def get(self, key: Key) -> list[float] | None:
        """The vector saved under ``(embedder_name, text_hash)``, or None."""
        name, text_hash = _checked_key(key)
        with self._lock:
            vector = self._loaded(name).get(text_hash)  # (a use: kept as the most recent)
            return None if vector is None else vector.tolist()

    def put(self, key: Key, vector: Sequence[float], *, message_id: str = "") -> None:
        """Save one vector (``message_id``: the message its text belongs to, if known)."""
        self.put_many([(message_id, key, vector)])

    def put_many(self, items: Iterable[tuple[Key, Sequence[float]] | tuple[str, Key, Sequence[float]]]) -> None:
        """Save several vectors in one store transaction.

        Each item is ``(key, vector)`` or ``(message_id, key, vector)``; the message id
        lets a store relate the vector to its message (``""``: none)."""
        rows = checked_rows((_row(item) for item in items), any_name=True)
        if not rows:
            return
        with self._lock:
            for row in rows:
                self._remember(row)
            rows = [row for row in rows if self._saved(row.embedder)]
            if rows:
                try:
                    self.store.save_vectors(self.session_id, rows)
                    self.saves += 1
                except Exception as exc:  # a cache: carry on in memory
                    self._warn("save", exc)

    # -- extras ---------------------------------------------------------------------------
    def load(self, embedder_name: str) -> int:
        """Load (again) the saved vectors of an embedder; returns how many are held."""
        with self._lock:
            self._vectors.pop(embedder_name, None)
            return len(self._loaded(embedder_name))

    def clear(self) -> None:
        """Forget what is held in memory (saved vectors are read again on the next ``get``)."""
        with self._lock:
            self._vectors.clear()
            self._dimension.clear()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._vectors.values())

    # -- internals ------------------------------------------------------------------------
    def _saved(self, name: str) -> bool:
        """Whether vectors of ``name`` go to the store: it has the capability, the name is
        not process-local, and the store accepts it (else a warning, once per name)."""
        if not self.persistent or is_local_name(name):
            return False
        if storable_embedder(name):
            return True
        if name not in self._unsaved_names:
            self._unsaved_names.add(name)
            warnings.warn(
                f"embedder name {name[:60]!r}... ({len(name)} characters) is not one a store keeps (at most 200 "
                "characters, no NUL): its vectors are kept in memory only and embedded again after a restart; "
                "give the embedder a short name, e.g. as_embedder(model, name='model-id')",
                RuntimeWarning,
                stacklevel=4,
            )
        return False

    def _loaded(self, name: str) -> BoundedCache[str, array]:
        held = self._vectors.get(name)
        if held is not None:
            return held
        held = self._vectors[name] = BoundedCache(self.max_vectors)
        if self._saved(name):
            try:
                rows = self.store.load_vectors(self.session_id, name)
                self.loads += 1
            except Exception as exc:
                self._warn("load", exc)
                rows = []
            if rows:
                self._dimension[name] = dimension = rows[-1].dimension  # the newest decides
                held.put_many((row.text_hash, array("f", row.vector)) for row in rows if row.dimension == dimension)
        return held

    def _remember(self, row: VectorRow) -> None:
        held = self._loaded(row.embedder)
        if self._dimension.get(row.embedder, row.dimension) != row.dimension:
            held.clear()  # the model behind this name changed: its old vectors no longer compare
        self._dimension[row.embedder] = row.dimension
        held.put(row.text_hash, array("f", row.vector))  # float32, the most recently used, within max_vectors

    def _warn(self, what: str, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"could not {what} vectors of session {self.session_id!r} in {self.store!r} "
                f"({type(exc).__name__}: {exc}); vectors are kept in memory only and texts may be "
                "embedded again after a restart",
                RuntimeWarning,
                stacklevel=4,
            )


def _checked_key(key: Any) -> Key:
    if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)):
        raise InvalidInputError(f"a vector cache key is (embedder_name, text_hash), got {key!r:.80}")
    return key


def _row(item: Any) -> tuple[str, str, str, Sequence[float]]:
    if isinstance(item, tuple) and len(item) == 3:
        message_id, key, vector = item
    elif isinstance(item, tuple) and len(item) == 2:
        (key, vector), message_id = item, ""
    else:
        raise InvalidInputError(f"put_many takes (key, vector) or (message_id, key, vector) items, got {item!r:.80}")
    name, text_hash = _checked_key(key)
    return (message_id, text_hash, name, vector)
