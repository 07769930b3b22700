"""The semantic channel's state: turn vectors, embedding in batches, and the fallback.

:class:`SemanticChannel` keeps one unit vector per turn as a row of a float32 matrix
(:class:`TurnVectors`), updated as turns are added, changed or removed.  Turns are
embedded once, in batches of documents, when selection next runs (or on
``embed_pending``): a changed turn is looked up in the vector cache by the hash of its
text first.  ``select`` then makes at most one embedding call, for the query.  If the
embedder raises or exceeds ``embed_timeout``, selection goes on lexically, with one
warning per run of failures and ``Selection.semantic_fallback`` set; turns not yet
embedded are scored lexically meanwhile.  A batch that finishes after its timeout still
lands in the vector cache, so the next selection uses it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .embedding import DictVectorCache, Embedder, EmbeddingError, Key, Vector, as_embedder, text_hash, turn_text
from .history import TurnHistory
from .semantic import QueryView, numpy, unit_rows, zscores

__all__ = ["TurnVectors", "SemanticChannel", "SemanticMethods"]

logger = logging.getLogger("context_gatekeeper.gatekeeper")

def _in_daemon_thread(fn: Callable[[Any], Any], arg: Any) -> concurrent.futures.Future:
    """Run ``fn(arg)`` in a daemon thread: a call that never returns cannot keep the
    process from exiting (a shared executor's workers would be joined at exit)."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(arg))
            except BaseException as exc:  # noqa: BLE001 -- handed to the waiting caller
                future.set_exception(exc)

    threading.Thread(target=run, name="gatekeeper-embed", daemon=True).start()
    return future


class TurnVectors:
    """turn id -> unit vector, as the rows of one float32 matrix grown by doubling
    (adding or replacing a vector is O(dimension); removing one moves the last row)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.rows: dict[int, int] = {}
        self.hashes: dict[int, str] = {}
        self._matrix: Any = None

    def __len__(self) -> int:
        return len(self.ids)

    def set(self, turn_id: int, vector: Vector, digest: str) -> None:
        """Store a turn's vector (normalised here); another dimension than the stored
        ones means another model: the old vectors are dropped."""
        row_vector = unit_rows(vector)[0]
        if self._matrix is not None and self._matrix.shape[1] != row_vector.shape[0]:
            self.clear()
        if self._matrix is None:
            self._matrix = numpy().zeros((64, row_vector.shape[0]), dtype=numpy().float32)
        row = self.rows.get(turn_id)
        if row is None:
            row = len(self.ids)
            if row == self._matrix.shape[0]:
                grown = numpy().zeros((2 * row, self._matrix.shape[1]), dtype=self._matrix.dtype)
                grown[:row] = self._matrix
                self._matrix = grown
            self.ids.append(turn_id)
            self.rows[turn_id] = row
        self._matrix[row] = row_vector
        self.hashes[turn_id] = digest

    def drop(self, turn_id: int) -> None:
        """Forget a turn's vector (nothing happens when it has none)."""
        row = self.rows.pop(turn_id, None)
        self.hashes.pop(turn_id, None)
        if row is None:
            return
        last = len(self.ids) - 1
        if row != last:
            moved = self.ids[last]
            self._matrix[row] = self._matrix[last]
            self.ids[row], self.rows[moved] = moved, row
        self.ids.pop()

    def clear(self) -> None:
        self.ids, self.rows, self.hashes, self._matrix = [], {}, {}, None

    def view(self, query: Vector, min_turns: int) -> QueryView | None:
        """The query's similarity to every stored turn (``None`` without vectors or on a
        dimension mismatch); calibrated z-scores from ``min_turns`` turns on."""
        if self._matrix is None or not self.ids:
            return None
        q = unit_rows(query)[0]
        if q.shape[0] != self._matrix.shape[1]:
            return None
        sims = self._matrix[: len(self.ids)] @ q
        return QueryView(self.ids, self.rows, sims, zscores(sims) if len(self.ids) >= max(2, min_turns) else None)


class SemanticChannel:
    """An embedder, its vector cache and the vectors of one history's turns.

    Args:
        embedder: anything :func:`embedding.as_embedder` accepts.
        vector_cache: ``get(key)`` / ``put(key, vector)`` (``put_many`` optional), keyed by
            ``(embedder name, text_hash(text))``; default: a dict in this process.
        timeout: seconds one embedding call may take before selection goes on without
            it (``None``: wait).
        batch_size: texts per document call.
    """

    def __init__(self, embedder: Any, vector_cache: Any = None, timeout: float | None = None, batch_size: int = 64):
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError(f"embed_timeout must be a number of seconds > 0 or None, got {timeout!r}")
        if vector_cache is not None and not (callable(getattr(vector_cache, "get", None))
                                             and callable(getattr(vector_cache, "put", None))):
            raise TypeError("vector_cache needs get(key) and put(key, vector) methods (see embedding.VectorCache)")
        numpy()  # fail now, not at the first query, when numpy is missing
        self.embedder: Embedder = as_embedder(embedder)
        self.cache = DictVectorCache() if vector_cache is None else vector_cache
        self.timeout = timeout
        self.batch_size = batch_size
        self.vectors = TurnVectors()
        self.pending: dict[int, tuple[str, str]] = {}
        self._failing = False
        self._failed_now = False
        self._last_query: tuple[str, Vector] | None = None

    # -- turns --------------------------------------------------------------------------
    def sync(self, history: TurnHistory) -> None:
        """Take in the turns changed since the last call: cached vectors are used at once,
        the rest wait in ``pending`` for the next batch."""
        changed = history.changed
        if not changed:
            return
        name = self.embedder.name
        for turn_id in list(changed):
            changed.discard(turn_id)
            turn = history.turns.get(turn_id)
            self.pending.pop(turn_id, None)
            if turn is None:
                self.vectors.drop(turn_id)
                continue
            text = turn_text(turn)
            digest = text_hash(text)
            if self.vectors.hashes.get(turn_id) == digest:
                continue
            cached = self.cache.get((name, digest))
            if cached is not None:
                self.vectors.set(turn_id, cached, digest)
            else:
                self.vectors.drop(turn_id)  # its old text's vector would mislead
                self.pending[turn_id] = (text, digest)

    def _batches(self) -> list[list[tuple[int, str, str]]]:
        """Pending turns not found in the cache meanwhile, in batches of ``batch_size``."""
        name, todo = self.embedder.name, []
        for turn_id, (text, digest) in list(self.pending.items()):
            cached = self.cache.get((name, digest))
            if cached is not None:
                self.vectors.set(turn_id, cached, digest)
                del self.pending[turn_id]
            else:
                todo.append((turn_id, text, digest))
        return [todo[i : i + self.batch_size] for i in range(0, len(todo), self.batch_size)]

    def _store(self, batch: list[tuple[int, str, str]], vectors: list[Vector]) -> None:
        keyed = [((self.embedder.name, digest), vector) for (_, _, digest), vector in zip(batch, vectors)]
        put_many = getattr(self.cache, "put_many", None)
        if callable(put_many):
            put_many(keyed)
        else:
            for key, vector in keyed:
                self.cache.put(key, vector)
        for (turn_id, _, digest), vector in zip(batch, vectors):
            if self.pending.get(turn_id, (None, None))[1] == digest:
                del self.pending[turn_id]
                self.vectors.set(turn_id, vector, digest)

    def _late(self, keys: list[Key]) -> Callable[[concurrent.futures.Future], None]:
        """A callback that puts a batch finishing after its timeout into the cache."""
        def done(future: concurrent.futures.Future) -> None:
            if not future.cancelled() and future.exception() is None:
                for key, vector in zip(keys, future.result()):
                    self.cache.put(key, vector)
        return done

    def embed_pending(self, history: TurnHistory, *, raise_errors: bool = True) -> int:
        """Embed every pending turn, one document call per batch; the number embedded.
        Errors raise :class:`EmbeddingError` (or, with ``raise_errors=False``, are
        reported once and leave the rest pending)."""
        self.sync(history)
        count = 0
        for batch in self._batches():
            texts = [text for _, text, _ in batch]
            keys = [(self.embedder.name, digest) for _, _, digest in batch]
            try:
                vectors = self._call(self.embedder.embed_documents, texts, self._late(keys))
            except Exception as exc:  # noqa: BLE001 -- an embedder may raise anything
                if raise_errors:
                    raise _as_error(exc, self.embedder.name) from exc
                self._fail(exc)
                return count
            self._store(batch, vectors)
            count += len(batch)
        return count

    async def aembed_pending(self, history: TurnHistory, lock: Any, *, raise_errors: bool = True) -> int:
        """:meth:`embed_pending` without blocking the event loop."""
        with lock:
            self.sync(history)
            batches = self._batches()
        count = 0
        for batch in batches:
            try:
                vectors = await self._acall(self.embedder.aembed_documents([text for _, text, _ in batch]))
            except Exception as exc:  # noqa: BLE001
                if raise_errors:
                    raise _as_error(exc, self.embedder.name) from exc
                self._fail(exc)
                return count
            with lock:
                self._store(batch, vectors)
            count += len(batch)
        return count

    # -- the query ----------------------------------------------------------------------
    def query_vector(self, text: str) -> Vector | None:
        """The query's vector, or ``None`` (with one warning) when the embedder fails."""
        if self._last_query is not None and self._last_query[0] == text:
            return self._last_query[1]
        try:
            vector = self._call(self.embedder.embed_query, text)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
            return None
        self._ok(text, vector)
        return vector

    async def aquery_vector(self, text: str) -> Vector | None:
        """:meth:`query_vector` without blocking the event loop."""
        if self._last_query is not None and self._last_query[0] == text:
            return self._last_query[1]
        try:
            vector = await self._acall(self.embedder.aembed_query(text))
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
            return None
        self._ok(text, vector)
        return vector

    def probe(self, history: TurnHistory, text: str) -> tuple[Vector | None, bool]:
        """Embed pending turns (one call per batch), then the query: ``(query vector or
        None, whether anything failed or timed out)``.  Never raises for the embedder."""
        self._failed_now = False
        self.embed_pending(history, raise_errors=False)
        vector = self.query_vector(text)
        return vector, self._failed_now or vector is None

    async def aprobe(self, history: TurnHistory, lock: Any, text: str) -> tuple[Vector | None, bool]:
        """:meth:`probe` without blocking the event loop."""
        self._failed_now = False
        await self.aembed_pending(history, lock, raise_errors=False)
        vector = await self.aquery_vector(text)
        return vector, self._failed_now or vector is None

    def view(self, vector: Vector | None, min_turns: int) -> QueryView | None:
        return None if vector is None else self.vectors.view(vector, min_turns)

    def clear(self) -> None:
        self.vectors.clear()
        self.pending.clear()

    # -- calls, timeouts, failures ------------------------------------------------------
    def _call(self, fn: Callable[[Any], Any], arg: Any, late: Callable[..., None] | None = None) -> Any:
        if self.timeout is None:
            return fn(arg)
        future = _in_daemon_thread(fn, arg)
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            if late is not None:
                future.add_done_callback(late)
            raise TimeoutError(f"no answer within embed_timeout={self.timeout} s") from None

    async def _acall(self, awaitable: Any) -> Any:
        if self.timeout is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, self.timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer within embed_timeout={self.timeout} s") from None

    def _ok(self, text: str, vector: Vector) -> None:
        self._last_query = (text, vector)
        if not self._failed_now:
            self._failing = False

    def _fail(self, exc: BaseException) -> None:
        self._failed_now = True
        if not self._failing:
            self._failing = True
            logger.warning(
                "embedder %r failed (%s: %s); selecting lexically until it answers again",
                self.embedder.name, type(exc).__name__, exc,
            )


def _as_error(exc: BaseException, name: str) -> EmbeddingError:
    if isinstance(exc, EmbeddingError):
        return exc
    return EmbeddingError(f"embedder {name!r} failed: {type(exc).__name__}: {exc}; the turns stay pending")


class SemanticMethods:
    """The async twins and explicit embedding of :class:`~gatekeeper.ContextGatekeeper`
    (kept here so the gatekeeper module stays about selection)."""

    _semantic: SemanticChannel | None
    _history: TurnHistory
    _lock: Any

    @property
    def embedder(self) -> Embedder | None:
        """The embedder selection uses (normalised by :func:`~context_gatekeeper.embedding.as_embedder`),
        or None for the lexical default."""
        return None if self._semantic is None else self._semantic.embedder

    def embed_pending(self) -> int:
        """Embed the turns added or changed since they were last embedded, in batches
        (selection does this itself; call it to do it earlier, e.g. after a bulk load).
        Returns the number embedded; :class:`EmbeddingError` if the embedder fails.
        Without an embedder, 0."""
        if self._semantic is None:
            return 0
        with self._lock:
            return self._semantic.embed_pending(self._history)

    async def aembed_pending(self) -> int:
        """:meth:`embed_pending` without blocking the event loop."""
        if self._semantic is None:
            return 0
        return await self._semantic.aembed_pending(self._history, self._lock)

    async def aexplain(self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()) -> Any:
        """:meth:`explain` with the embedding calls awaited (the scoring itself is
        CPU-bound and runs inline: well under a millisecond per hundred turns)."""
        probe = await self._aprobe(query)
        return self._select_for(query, token_budget, exclude, probe)  # type: ignore[attr-defined]

    async def aselect(
        self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()
    ) -> list[dict[str, object]]:
        """:meth:`select` with the embedding calls awaited."""
        selection = await self.aexplain(query, token_budget=token_budget, exclude=exclude)
        with self._lock:
            return [self._history.turns[t].as_dict() for t in selection.turn_ids]

    async def _aprobe(self, query: Any) -> tuple[Vector | None, bool] | None:
        channel = self._semantic
        if channel is None or not isinstance(query, str) or not query.strip():
            return None  # the sync path validates the query
        return await channel.aprobe(self._history, self._lock, query[: self._history.params.max_query_chars])
