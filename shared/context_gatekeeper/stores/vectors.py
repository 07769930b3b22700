"""The optional vector capability of stores: embeddings saved next to a session's log.

A store that also subclasses :class:`VectorStore` keeps, per session, the vectors an
embedder made of the session's texts, so a reopened transcript or a restarted worker
does not embed its history again.  Every built-in store has it (in memory, SQLite,
PostgreSQL); a third-party :class:`~context_gatekeeper.stores.Store` without it still
works (:func:`supports_vectors` is false and callers embed again after a restart).

A row is keyed by ``(session_id, embedder, dimension, text_hash, message_id)``:

* ``embedder``: the embedder's name; vectors of different embedders (or of one name
  with another dimension) are kept apart and never mixed;
* ``text_hash``: the sha256 hex of the embedded text, so a changed message simply
  has no vector for its new text;
* ``message_id``: the message the text belongs to, or ``""`` for a content-keyed
  vector (text not tied to a message).

Vectors are stored compactly as little-endian float32 bytes (:func:`pack_vector`);
no numpy is needed.  ``purge(session_id)`` erases a session's vectors with the rest of it.

What a store keeps is bounded by the session's state (checked inside the write's transaction):

* a session that holds no revisions (never written, or purged) takes no vectors: the save
  is dropped with a debug log, so an embedding still in flight during a ``purge`` can
  never bring the purged texts back;
* saving a message's vector erases that message's vectors of other texts (an edit leaves
  no vector of the old text; an undo embeds the text again);
* each save erases the vectors of messages the session marks as removed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
from abc import ABC, abstractmethod
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import InvalidInputError, StoreUnavailableError
from ..selection.semantic.embedding import NAME_LIMIT

__all__ = [
    "VectorStore",
    "VectorRow",
    "supports_vectors",
    "pack_vector",
    "unpack_vector",
    "stored_vectors",
    "checked_rows",
    "checked_embedder",
    "storable_embedder",
    "MAX_DIMENSION",
]

_log = logging.getLogger("context_gatekeeper.stores")

MAX_DIMENSION = 65_536
"""The largest vector a store accepts."""
_MAX_NAME = NAME_LIMIT  # the longest embedder name kept (a default name is cut to fit)
_MAX_HASH = 128


class VectorRow(NamedTuple):
    """One stored vector: which message and text it embeds, by which embedder."""

    message_id: str
    text_hash: str
    embedder: str
    vector: tuple[float, ...]

    @property
    def dimension(self) -> int:
        return len(self.vector)


def pack_vector(vector: Sequence[float]) -> bytes:
    """The vector as little-endian float32 bytes."""
    packed = array("f", vector)
    if sys.byteorder != "little":  # pragma: no cover - big-endian machines
        packed.byteswap()
    return packed.tobytes()


def unpack_vector(blob: bytes | bytearray | memoryview) -> tuple[float, ...]:
    """The floats of :func:`pack_vector`'s bytes."""
    unpacked = array("f")
    unpacked.frombytes(bytes(blob))
    if sys.byteorder != "little":  # pragma: no cover - big-endian machines
        unpacked.byteswap()
    return tuple(unpacked)


def stored_vectors(store: object, session_id: str, rows: Iterable[Sequence[Any]]) -> list[VectorRow]:
    """The :class:`VectorRow` of each ``(message_id, text_hash, embedder, dimension, vector)`` row
    a SQL store read for ``session_id`` (``store`` names it in the error):
    :class:`StoreUnavailableError` when a vector's bytes are not the ``dimension`` float32 numbers
    its row says (cut short, or changed, by hand), instead of a bare ``ValueError`` or a vector
    shorter than the dimension it is filed under.  A :class:`~.vector_cache.StoreVectorCache`
    catches the error, embeds again, and its save replaces the damaged row."""
    out = []
    for stored_id, text_hash, embedder, dimension, blob in rows:
        message_id = bytes(stored_id).decode("utf-8", "surrogatepass")
        if len(blob) != 4 * dimension:
            raise StoreUnavailableError(
                f"a vector saved for session {session_id!r} in {store!r} (message {message_id!r}, embedder "
                f"{embedder!r}) is {len(blob)} bytes, not the {dimension} float32 numbers ({4 * dimension} bytes) "
                "its row says: the vectors table was changed outside context-gatekeeper; nothing was read. "
                f"store.delete_vectors({session_id!r}, {embedder!r}) erases the session's vectors of that embedder, "
                "which are embedded again when needed (a StoreVectorCache embeds them again meanwhile, and its save "
                "replaces the damaged row)"
            )
        out.append(VectorRow(message_id, text_hash, embedder, unpack_vector(blob)))
    return out


def checked_embedder(name: Any) -> str:
    """``name`` if it is a usable embedder name, else :class:`InvalidInputError`."""
    if not isinstance(name, str) or not name or len(name) > _MAX_NAME or "\x00" in name:
        raise InvalidInputError(
            f"an embedder name must be a non-empty str of at most {_MAX_NAME} characters without NUL, "
            f"got {name!r}; give the embedder a short name (e.g. the model id)"
        )
    _encodable(name, "an embedder name")
    return name


def storable_embedder(name: Any) -> bool:
    """Whether a store keeps vectors under ``name`` (:func:`checked_embedder` accepts it)."""
    try:
        checked_embedder(name)
    except InvalidInputError:
        return False
    return True


def _encodable(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} must be valid Unicode (no lone surrogates)") from None


def _checked_vector(vector: Any) -> tuple[float, ...]:
    if isinstance(vector, (str, bytes)) or not hasattr(vector, "__len__"):
        raise InvalidInputError(f"a vector must be a sequence of floats, got {type(vector).__name__}")
    if not 1 <= len(vector) <= MAX_DIMENSION:
        raise InvalidInputError(f"a vector needs 1 to {MAX_DIMENSION} floats, got {len(vector)}")
    try:
        floats = tuple(float(x) for x in vector)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"a vector must hold only numbers: {exc}") from None
    # float32 overflows past ~3.4e38; such a vector would come back as inf
    if not all(math.isfinite(x) and abs(x) < 3.4e38 for x in floats):
        raise InvalidInputError("a vector must hold finite float32 numbers (no NaN, inf or |x| >= 3.4e38)")
    return tuple(array("f", floats))  # what every store gives back: float32 precision


def checked_rows(rows: Iterable[Any], *, any_name: bool = False) -> list[VectorRow]:
    """``rows`` as :class:`VectorRow` after checking every field (all or nothing:
    :class:`InvalidInputError` on the first bad row, before anything is written).

    Each row is a :class:`VectorRow` or a ``(message_id, text_hash, embedder, vector)`` tuple.
    With ``any_name`` an embedder name need only be a non-empty str (rows kept in memory,
    where a name a store refuses (:func:`storable_embedder`) still tells models apart)."""
    out = []
    for row in rows:
        try:
            message_id, text_hash, embedder, vector = row
        except (TypeError, ValueError):
            raise InvalidInputError(
                f"a vector row is (message_id, text_hash, embedder, vector), got {row!r:.80}"
            ) from None
        if not isinstance(message_id, str):
            raise InvalidInputError(f"a vector row's message_id must be a str ('' for none), got {message_id!r:.80}")
        if not isinstance(text_hash, str) or not text_hash or len(text_hash) > _MAX_HASH or not text_hash.isascii():
            raise InvalidInputError(f"a text hash must be a non-empty ASCII str (a hex digest), got {text_hash!r:.80}")
        name = _any_name(embedder) if any_name else checked_embedder(embedder)
        out.append(VectorRow(message_id, text_hash, name, _checked_vector(vector)))
    return out


def _any_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"an embedder name must be a non-empty str, got {name!r:.80}; name the embedder")
    return name


class VectorStore(ABC):
    """The vector capability, mixed into a :class:`~context_gatekeeper.stores.Store`.

    Writes are idempotent upserts (the same key again replaces the vector); reads of
    one embedder never return another's vectors, nor vectors of another dimension when
    ``dimension`` is given.  Async twins run the sync methods in a worker thread.
    """

    @abstractmethod
    def save_vectors(self, session_id: str, rows: Iterable[VectorRow | tuple[str, str, str, Sequence[float]]]) -> int:
        """Store ``rows`` (see :func:`checked_rows`) for the session, all in one
        transaction; returns how many were written.  Nothing is written if a row is invalid,
        nor (0, a debug log) when the session holds no revisions.  A row with a message id
        replaces that message's vectors of other texts; vectors of removed messages go."""

    @abstractmethod
    def load_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        """The session's vectors made by ``embedder`` (of ``dimension`` floats, if given),
        newest last."""

    @abstractmethod
    def delete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        """Erase the session's vectors (of one embedder, or all); returns how many."""

    async def asave_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        return await asyncio.to_thread(self.save_vectors, session_id, list(rows))

    async def aload_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        return await asyncio.to_thread(lambda: self.load_vectors(session_id, embedder, dimension=dimension))

    async def adelete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        return await asyncio.to_thread(self.delete_vectors, session_id, embedder)


def refused_save(store: object, session_id: str, count: int) -> int:
    """Log (debug) that ``count`` vectors for a session holding no revisions were dropped; 0."""
    _log.debug(
        "%r: %d vector(s) for session %r dropped: it holds no revisions (purged or never written)",
        store, count, session_id,
    )
    return 0


def supports_vectors(store: object) -> bool:
    """Whether ``store`` can save and load vectors (it subclasses :class:`VectorStore`)."""
    return isinstance(store, VectorStore)


def checked_dimension(dimension: Any) -> int | None:
    """``dimension`` for :meth:`VectorStore.load_vectors`: None or an int in range."""
    if dimension is None:
        return None
    if isinstance(dimension, bool) or not isinstance(dimension, int) or not 1 <= dimension <= MAX_DIMENSION:
        raise InvalidInputError(f"dimension must be None or an int from 1 to {MAX_DIMENSION}, got {dimension!r}")
    return dimension
