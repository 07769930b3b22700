"""The semantic channel's state: turn vectors, embedding in the background, the query.

:class:`SemanticChannel` keeps one unit vector per turn as a row of a float32 matrix
(:class:`TurnVectors`).  A turn added or changed is queued; a background job on the
embedder's documents lane (:mod:`.runner`: one daemon thread per underlying
embedder) looks it up in the vector cache by the hash of its text and embeds the rest
in batches (a vector cache that fails to read or save is no embedder outage: the
vectors stay in memory, with one warning naming the cache).  ``select`` and
``explain`` embed only the query -- at most one embedding call, bounded by
``embed_timeout`` counted from the call's start on the query lane (a query still
waiting its turn there when that time is up falls back without an outage) -- and
score turns not yet embedded lexically.  ``embed_pending`` / ``aembed_pending``
embed what is queued now and wait while the embedder keeps answering (tests and
benchmarks call them for deterministic results).

No embedding call runs while the gatekeeper's lock is held, and the async paths never
wait on that lock, nor do vector-cache (store) I/O, on the event loop thread.  If the
embedder raises or times out, selection goes on lexically with
``Selection.semantic_fallback`` set, the embedder is left alone for a while (backoff),
and one warning is logged per outage per embedder; a query answered with an unusable
vector (NaN, all zero) falls back alone, with no backoff.  A batch that fails is split to find
a text the embedder refuses alone (twice: one failure may be a passing error); such a
turn stays lexical-only.  Turn vectors are used at float32 precision, as every vector
cache and store keeps them.  A query vector of another dimension than the turns' is
looked into by embedding one turn again (:meth:`SemanticChannel._check_model`): the model
behind the name changed (every turn is embedded again), or the embedder answers queries
and documents with two models (warned; selection stays lexical).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import weakref
from array import array
from collections.abc import Callable, Iterable
from typing import Any

from .runner import EmbedderState, NotStarted, acall_within, call_within, state_of
from ...validation import require_timeout
from .embedding import (
    DictVectorCache,
    Embedder,
    EmbeddingError,
    UnusableVectorError,
    Vector,
    as_embedder,
    require_vector_cache,
    text_hash,
    turn_text,
)
from ..history import TurnHistory
from .fusion import QueryView, numpy
from .turn_vectors import TurnVectors

logger = logging.getLogger(__name__)

__all__ = ["TurnVectors", "SemanticChannel"]

_PROBE_TEXT = "ok"  # embedded to tell a refused text from an embedder that is down
_REMOVED_LIMIT = 20_000  # texts of removed turns remembered (:meth:`SemanticChannel._forget_text`)


class _Changes(set):
    """``TurnHistory.changed`` for a channel: adding ids queues them for embedding.  The
    channel's ``_kick`` is held weakly: the channel holds the history, so a strong
    reference back would leave a dropped gatekeeper's history and channel to the next
    cyclic garbage collection."""

    def __init__(self, kick: Callable[[], None]) -> None:
        super().__init__()
        self._kick = weakref.WeakMethod(kick)

    def _queue(self) -> None:
        kick = self._kick()
        if kick is not None:
            kick()

    def add(self, turn_id: int) -> None:
        super().add(turn_id)
        self._queue()

    def update(self, *ids: Iterable[int]) -> None:
        super().update(*ids)
        if self:
            self._queue()


class SemanticChannel:
    """An embedder, its vector cache and the vectors of one history's turns.

    Args:
        embedder: anything :func:`embedding.as_embedder` accepts.
        vector_cache: ``get(key)`` / ``put(key, vector)`` (``put_many`` optional), keyed by
            ``(embedder name, text_hash(text))``; default: a dict in this process.
        timeout: seconds a selection waits for the query's vector (``None``: wait); also
            bounds ``embed_pending``'s wait per batch.
        batch_size: texts per document call.

    :meth:`bind` attaches the channel to a history and the lock that guards it.
    """

    def __init__(self, embedder: Any, vector_cache: Any = None, timeout: float | None = None, batch_size: int = 64):
        require_timeout(timeout)
        require_vector_cache(vector_cache)
        numpy()  # fail now, not at the first query, when numpy is missing
        self.embedder: Embedder = as_embedder(embedder)
        self.state: EmbedderState = state_of(self.embedder)
        self.cache = DictVectorCache() if vector_cache is None else vector_cache
        self.timeout = timeout
        self.batch_size = batch_size
        self.vectors = TurnVectors()
        self.pending: dict[int, tuple[str, str]] = {}
        self.inflight: dict[int, str] = {}
        self.refused: dict[int, str] = {}  # turn id -> digest of a text the embedder refuses
        self._refused_digests: set[str] = set()
        self.embedded = 0  # turns the embedder embedded for this channel, all told
        self._history: TurnHistory | None = None
        self._lock: Any = None
        self._mismatches: set[tuple[int, int]] = set()  # (query, turn) dimensions already warned about
        self._queued: concurrent.futures.Future | None = None
        self._last_query: tuple[str, Vector] | None = None
        self._dimension_changes = 0  # in the running pass (:meth:`_drain`)
        self._rewritten: set[int] = set()  # turns whose text changed, until they have a vector again
        self._resave: list[tuple[tuple[str, str], Vector]] = []  # cache hits of those, to save again
        # a cache that saves each vector with its message (a transcript's store, which drops the
        # vectors of removed messages): texts of removed turns, saved again when a turn brings one back
        self._by_message = getattr(self.cache, "saves_by_message", False) is True
        self._removed: dict[str, None] = {}  # digests, oldest first, at most _REMOVED_LIMIT
        self._recheck: tuple[int, int] | None = None  # (query, turn) dimensions the next pass looks into
        self._retired: set[int] = set()  # dimensions of a model replaced under this name: cached ones unused
        self._cache_failing = False  # a cache failure was warned about (until the cache works again)

    def bind(self, history: TurnHistory, lock: Any) -> None:
        """Follow ``history`` (guarded by ``lock``): its added and changed turns are queued."""
        self._history, self._lock = history, lock
        history.changed = _Changes(self._kick)

    def _bound(self) -> tuple[TurnHistory, set[int]]:
        """The history :meth:`bind` attached, and its set of changed turn ids (the
        gatekeeper that makes a channel binds it before any turn reaches it)."""
        history = self._history
        assert history is not None and history.changed is not None, "bind() the channel to a history first"
        return history, history.changed

    # -- turns (the caller holds the lock) ------------------------------------------------
    def take(self, lookup: bool | None = None) -> None:
        """Move the history's changes into ``pending``; with ``lookup`` (default: when not
        on an event loop thread) pending turns found in the vector cache get their vector
        now.  Queues a background pass when turns are left.  The caller holds the lock."""
        history, changed = self._bound()
        turns = history.turns
        for turn_id in sorted(changed, key=turns.__contains__):  # removals first: a text they held is known
            turn = turns.get(turn_id)
            text = "" if turn is None else turn_text(turn)
            digest = "" if turn is None else text_hash(text)  # before the id leaves the changes: nothing lost
            changed.discard(turn_id)
            known = self._known(turn_id)
            queued = self.pending.pop(turn_id, None)
            self.refused.pop(turn_id, None)
            if turn is None:  # its text (with a vector, or on its way to one) may come back
                self._forget_text(self.vectors.hashes.get(turn_id) or self.inflight.get(turn_id)
                                  or (queued[1] if queued else None))
                self.inflight.pop(turn_id, None)
                self.vectors.drop(turn_id)
                self._rewritten.discard(turn_id)
                continue
            if self.vectors.hashes.get(turn_id) == digest or self.inflight.get(turn_id) == digest:
                continue
            if known:
                self._rewritten.add(turn_id)
            self.inflight.pop(turn_id, None)
            self.vectors.drop(turn_id)  # its old text's vector would mislead
            if digest in self._refused_digests:
                self.refused[turn_id] = digest
            else:
                self.pending[turn_id] = (text, digest)
        if lookup is None:  # store I/O never on an event loop thread; a dict is no I/O
            lookup = getattr(self.cache, "in_memory", False) is True or not _on_loop()
        if self.pending and lookup:
            for turn_id, (_, digest) in list(self.pending.items()):
                cached = self._cached(digest)
                if cached is not None:
                    del self.pending[turn_id]
                    self._set_cached(turn_id, cached, digest)
        if self.pending or self._resave:
            self._kick()

    def _known(self, turn_id: int) -> bool:
        """Whether the channel has met this turn before (with a vector, queued, in flight
        or refused): a text it gets now is a change of the turn's text."""
        return any(turn_id in held for held in (self.vectors.hashes, self.pending, self.inflight, self.refused))

    def _set_cached(self, turn_id: int, vector: Vector, digest: str) -> None:
        """:meth:`_set` a vector found in the cache; a changed turn's vector (an undo brings
        an old text back), or, with a cache that saves by message, the vector of a text a
        removed turn held (an undone deletion brings the turn back), is also saved again by
        the next pass, so that a store keeping one vector per message holds the one of the
        message's current text."""
        self._set(turn_id, vector, digest)
        if turn_id in self._rewritten or digest in self._removed:
            self._rewritten.discard(turn_id)
            self._removed.pop(digest, None)
            self._resave.append(((self.embedder.name, digest), vector))

    def _forget_text(self, digest: str | None) -> None:
        """Note the text of a removed turn that had a vector (a cache that saves by message
        drops the vector with the message: :meth:`_set_cached` saves it again if a turn brings
        the text back).  The newest :data:`_REMOVED_LIMIT` are kept."""
        if digest is None or not self._by_message:
            return
        removed = self._removed
        removed.pop(digest, None)
        removed[digest] = None
        if len(removed) > _REMOVED_LIMIT:
            del removed[next(iter(removed))]

    def _kick(self) -> None:
        """Queue one background pass unless one is queued or the embedder is backing off."""
        if self._queued is None and not self.state.blocked():
            self._queued = self.state.documents.submit(self._drain, False)

    def _cached(self, digest: str) -> Vector | None:
        """The cache's vector of the text with ``digest``; ``None`` when it has none, one of
        another dimension, or an all-zero one (saved before such vectors were refused: the
        text is embedded again, and refused if the embedder still answers zero)."""
        try:
            vector = self.cache.get((self.embedder.name, digest))
        except Exception as exc:  # noqa: BLE001 -- a vector cache (a store) may raise anything: a miss
            self._cache_failed("read", 1, exc)
            return None
        dim = self.vectors.dim
        if vector is None or (dim is not None and len(vector) != dim) or not any(vector):
            return None
        if len(vector) in self._retired:  # the model behind this name answers another dimension now
            return None
        return vector

    def _set(self, turn_id: int, vector: Vector, digest: str) -> None:
        dropped = self.vectors.set(turn_id, vector, digest)
        if dropped:  # another dimension: the model changed; embed the others again
            self._dimension_changes += 1
            self._retired.discard(len(vector))
            self.state.answered()
            self._bound()[1].update(dropped)

    # -- the background pass (runs on the embedder's documents lane) ------------------------
    def _drain(self, explicit: bool) -> tuple[int, BaseException | None]:
        """Embed pending turns in batches until none is left: ``(turns embedded, the error
        that stopped it or None)``.  Only ``explicit`` passes call an embedder that is
        backing off.  Never holds the lock during a call or cache I/O."""
        count, lock = 0, self._lock
        with lock:
            self._queued = None
            self._dimension_changes = 0
        while True:
            if self._dimension_changes > 1:  # the model changed, then changed again: one endpoint, two models
                changing = EmbeddingError(
                    f"embedder {self.embedder.name!r} answers with vectors of changing dimensions "
                    f"(now {self.vectors.dim}); embed every text with one model"
                )
                self.state.failed(changing, self.embedder.name)
                return count, changing
            if not explicit and self.state.blocked():
                return count, None
            failure = self._check_model()
            if failure is not None:
                return count, failure
            with lock:
                self.take(lookup=False)
                chunk = list(self.pending.items())[: self.batch_size]
                resave, self._resave = self._resave, []
            self._save_again(resave)
            if not chunk:
                return count, None
            found = {t: v for t, (_, d) in chunk if (v := self._cached(d)) is not None}
            with lock:
                batch = []
                for turn_id, (text, digest) in chunk:
                    if self.pending.get(turn_id, (None, None))[1] != digest:
                        continue  # changed or removed meanwhile
                    del self.pending[turn_id]
                    if turn_id in found:
                        self._set_cached(turn_id, found[turn_id], digest)
                    else:
                        self.inflight[turn_id] = digest
                        batch.append((turn_id, text, digest))
            if batch:
                try:
                    done, refused, error = self._embed(batch)
                    count += self._land(batch, done, refused, error)
                except Exception as exc:  # noqa: BLE001 -- unexpected: the embedder's and cache's failures are handled
                    self._requeue(batch)
                    self.state.failed(exc, self.embedder.name)
                    return count, exc
                if error is not None:
                    return count, error

    def _requeue(self, batch: list[tuple[int, str, str]]) -> None:
        """Put a batch that failed unexpectedly (its vectors could not be kept) back in the
        queue: each turn still in flight with the same text is pending again."""
        with self._lock:
            for turn_id, text, digest in batch:
                if self.inflight.get(turn_id) == digest:
                    del self.inflight[turn_id]
                    self.pending[turn_id] = (text, digest)

    def _embed(self, batch: list[tuple[int, str, str]]) -> tuple[dict[int, Vector], list[int], BaseException | None]:
        """Embed a batch, splitting it on failure: ``(index -> vector, indexes of texts the
        embedder refuses alone, the error when the embedder looks down)``."""
        texts = [text for _, text, _ in batch]
        done: dict[int, Vector] = {}
        refused: list[int] = []
        try:
            done.update(enumerate(self._documents(texts)))
        except Exception as exc:  # noqa: BLE001 -- an embedder may raise anything
            if not self._answers():
                return done, refused, exc  # down: nothing is the texts' fault
            try:
                self._split(texts, list(range(len(batch))), exc, done, refused)
            except _Down as down:  # it stopped answering meanwhile: no text is known to be refused
                return done, [], down.failure
        return done, refused, None

    def _split(self, texts: list[str], idx: list[int], failure: BaseException, done: dict[int, Vector],
               refused: list[int]) -> None:
        """``texts[i]`` for ``i`` in ``idx`` failed together: a single text is tried once
        more alone if the embedder still answers (else it is down, or limiting the rate:
        :class:`_Down`), and refused when that fails too (one failure may be a passing
        error, such as a 503, that met this text by chance); more texts are split in
        halves and each tried; what is embedded goes to ``done``.  (A method, not a
        closure: a closure calling itself is a reference cycle, which would hold the
        channel until the next cyclic garbage collection.)"""
        if len(idx) == 1:
            if not self._answers():
                raise _Down(failure)
            try:
                done[idx[0]] = self._documents([texts[idx[0]]])[0]
            except Exception:  # noqa: BLE001 -- twice, alone, while the embedder answers: this text
                refused.append(idx[0])
            return
        for half in (idx[: len(idx) // 2], idx[len(idx) // 2 :]):
            try:
                vectors = self._documents([texts[i] for i in half])
            except Exception as exc:  # noqa: BLE001 -- the embedder answers (see _embed): a bad text
                self._split(texts, half, exc, done, refused)
            else:
                done.update(zip(half, vectors))

    def _answers(self) -> bool:
        try:
            self._documents([_PROBE_TEXT])
        except Exception:  # noqa: BLE001
            return False
        return True

    def _documents(self, texts: list[str]) -> list[Vector]:
        """One documents call; answered or failed, it is progress (see :meth:`embed_pending`).
        Runs on the documents lane, which times each call of a pass, not the pass."""
        self.state.documents.call_started()
        try:
            return self.embedder.embed_documents(texts)
        finally:
            self.state.progress += 1  # only the documents lane's one thread counts

    def _land(self, batch: list[tuple[int, str, str]], done: dict[int, Vector], refused: list[int],
              error: BaseException | None) -> int:
        """Save a batch's vectors, mark refused texts, put back what is left; the number embedded.
        Vectors are used at float32 precision, as caches and stores keep them: a turn selects
        alike whether its vector was just made or found in a cache."""
        done = {i: _float32(v) for i, v in done.items()}
        current = self._still_current(batch, done)
        if current:
            self._save([((self.embedder.name, batch[i][2]), done[i]) for i in current])
        if error is not None:
            self.state.failed(error, self.embedder.name)
        elif done:
            self.state.answered()
        with self._lock:
            for i, (turn_id, text, digest) in enumerate(batch):
                if self.inflight.get(turn_id) != digest:
                    continue  # changed or removed meanwhile: its new text is queued
                del self.inflight[turn_id]
                if i in done:
                    self._set(turn_id, done[i], digest)
                    self._rewritten.discard(turn_id)  # saved with the batch
                    self._removed.pop(digest, None)
                elif i in refused:
                    self.refused[turn_id] = digest
                    self._refused_digests.add(digest)
                else:
                    self.pending[turn_id] = (text, digest)
            self.embedded += len(done)
        return len(done)

    def _still_current(self, batch: list[tuple[int, str, str]], done: dict[int, Vector]) -> list[int]:
        """The indexes in ``done`` whose turn is still in flight with the text embedded: only
        their vectors go to the cache.  A text edited away or deleted while it was being
        embedded leaves no vector behind (a store would keep it for good, tied to no
        message).  Decided under the lock, with the history's latest changes taken in; the
        cache is written after it, without the lock."""
        with self._lock:
            self.take(lookup=False)
            return [i for i in done if self.inflight.get(batch[i][0]) == batch[i][2]]

    def _put(self, keyed: list[tuple[tuple[str, str], Vector]]) -> None:
        """Keep vectors in the cache (one ``put_many`` when it has one)."""
        put_many = getattr(self.cache, "put_many", None)
        if callable(put_many):
            put_many(keyed)
        else:
            for key, vector in keyed:
                self.cache.put(key, vector)

    def _save(self, keyed: list[tuple[tuple[str, str], Vector]]) -> None:
        """Keep vectors in the cache.  A cache that fails is no embedder outage: the vectors
        stay in this channel's memory (selection uses them), one warning is logged until the
        cache works again, and a text may be embedded again after a restart."""
        try:
            self._put(keyed)
        except Exception as exc:  # noqa: BLE001 -- a vector cache (a store) may raise anything
            self._cache_failed("save", len(keyed), exc)
        else:
            self._cache_failing = False

    def _cache_failed(self, what: str, count: int, exc: BaseException) -> None:
        """Warn, once until the cache works again, that it failed to ``what`` vectors."""
        if self._cache_failing:
            return
        self._cache_failing = True
        logger.warning(
            "vector cache %r could not %s %d vector(s) (%s: %s); the embedder %r is fine: its vectors are "
            "kept in memory and selection goes on with them, but texts may be embedded again after a restart "
            "(further cache failures are not logged until it works again)",
            self.cache, what, count, type(exc).__name__, exc, self.embedder.name,
        )

    def _save_again(self, keyed: list[tuple[tuple[str, str], Vector]]) -> None:
        """Save again the vectors of changed turns found in the cache (:meth:`_set_cached`).
        Only tidies what a store keeps: a cache that fails here is logged, never an outage."""
        if keyed:
            self._save(keyed)

    # -- a model replaced under the same name (:meth:`mismatched` asks, a pass answers) ------
    def _check_model(self) -> BaseException | None:
        """Answer a query/turn dimension mismatch (:meth:`mismatched`): embed one turn's text
        again.  Its new vector has the turns' old dimension: the embedder embeds queries and
        documents with two models (warned; selection stays lexical).  Another dimension: the
        model behind this name changed, so the turns' vectors go, every turn is embedded
        again, and cached vectors of the old dimension are no longer used, and the pair is
        forgotten (:attr:`_mismatches`), so a change back and forth again is checked again.  The
        error when the embedder fails (the check is tried again by the next pass), else ``None``."""
        with self._lock:
            pair, self._recheck = self._recheck, None
            if pair is None:
                return None
            self.take(lookup=False)
            history = self._bound()[0]
            sample = next((t for t in reversed(self.vectors.ids) if t in history.turns), None)
            if sample is None or self.vectors.dim != pair[1]:
                return None  # no turn vector of that dimension left: the next one embedded decides
            text, digest = turn_text(history.turns[sample]), self.vectors.hashes[sample]
        try:
            vector = _float32(self._documents([text])[0])
        except UnusableVectorError:  # no answer for this text (no outage): a turn embedded later decides
            return None
        except Exception as exc:  # noqa: BLE001 -- an embedder may raise anything
            with self._lock:
                if self._recheck is None:
                    self._recheck = pair
            self.state.failed(exc, self.embedder.name)
            return exc
        self.state.answered()
        query_dim, old = pair
        if len(vector) == old:
            logger.warning(
                "embedder %r embeds documents in %d dimensions (checked again) but queries in %d: it answers "
                "them with two models, so selection stays lexical (Selection.semantic_fallback); embed queries "
                "and documents with one model", self.embedder.name, old, query_dim,
            )
            return None
        logger.warning(
            "embedder %r now embeds documents in %d dimensions, its turns' vectors have %d: the model behind "
            "this name changed, so every turn is embedded again and cached %d-dimensional vectors are no "
            "longer used", self.embedder.name, len(vector), old, old,
        )
        with self._lock:
            self._retired.add(old)
            # answered: this pair is no longer known, so the next time it is seen (a model switched
            # back and forth under one name) it is warned about and checked again
            self._mismatches.discard(pair)
            history, changed = self._bound()
            turn = history.turns.get(sample)
            if turn is not None and text_hash(turn_text(turn)) == digest:
                self._set(sample, vector, digest)  # the others go, queued again
                keep = True
            else:  # changed meanwhile: the old vectors go all the same
                dropped = list(self.vectors.ids)
                self.vectors.clear()
                changed.update(dropped)
                keep = False
        if keep:
            self._save([((self.embedder.name, digest), vector)])
        return None

    def _stall_limit(self) -> float | None:
        """How long :meth:`embed_pending` waits without the embedder answering a single
        documents call before it gives up (``None``: for good): a batch holds up to
        ``batch_size`` texts and each may take as long as a query (``timeout``), plus
        the slack of four queries."""
        if self.timeout is None:
            return None
        return min(self.timeout * (4 + self.batch_size), threading.TIMEOUT_MAX)

    def _drain_result(self, before: int, result: tuple[int, BaseException | None]) -> int:
        if result[1] is not None:
            raise _as_error(result[1], self.embedder.name)
        return self.embedded - before

    def _stalled(self, limit: float) -> EmbeddingError:
        """The error of a wait that saw no documents call answered for ``limit`` seconds.
        Not an outage: the pass goes on in the background, and queries decide whether
        the embedder is down."""
        return EmbeddingError(
            f"embedder {self.embedder.name!r} answered no call for {limit:.1f} s while the pending turns were "
            "embedded; they stay pending (the background pass goes on): call embed_pending again to wait "
            "longer, or raise embed_timeout"
        )

    def embed_pending(self) -> int:
        """Embed every queued turn now (even while the embedder is backing off) and wait:
        the number of turns the embedder embedded meanwhile.  Failures raise
        :class:`EmbeddingError`.  With ``timeout`` the wait goes on as long as the
        embedder keeps answering (however many batches a bulk load needs), and ends
        with :class:`EmbeddingError` only once no call was answered for
        :meth:`_stall_limit` seconds.  Call without holding the lock."""
        before, limit = self.embedded, self._stall_limit()
        future = self.state.documents.submit(self._drain, True)
        seen = self.state.progress
        while True:
            try:
                return self._drain_result(before, future.result(limit))
            except concurrent.futures.TimeoutError:
                assert limit is not None
                if self.state.progress == seen:
                    raise self._stalled(limit) from None
                seen = self.state.progress

    async def aembed_pending(self) -> int:
        """:meth:`embed_pending`, awaited (the work runs on the documents lane)."""
        before, limit = self.embedded, self._stall_limit()
        future = self.state.documents.submit(self._drain, True)
        wrapped = asyncio.wrap_future(future)
        seen = self.state.progress
        while True:
            done, _ = await asyncio.wait({wrapped}, timeout=limit)
            if done:
                return self._drain_result(before, wrapped.result())
            assert limit is not None
            if self.state.progress == seen:
                wrapped.cancel()
                raise self._stalled(limit)
            seen = self.state.progress

    # -- the query (no lock held) -----------------------------------------------------------
    def _settled(self, text: str) -> tuple[Vector | None, bool] | None:
        """The answer without calling the embedder: the last query's vector again, or the
        fallback while the embedder is backing off; ``None`` when it must be asked."""
        hit = self._last_query
        if hit is not None and hit[0] == text:
            return hit[1], False
        return (None, True) if self.state.blocked() else None

    def probe(self, text: str) -> tuple[Vector | None, bool]:
        """The query's vector and whether selection falls back: ``(vector, False)``, or
        ``(None, True)`` when the embedder fails, times out, is backing off or answers an
        unusable vector.  One call at most, within ``timeout`` of its start on the query
        lane.  Only a raised error or a timeout is an outage (backoff): a call that waited
        its turn on the lane past ``timeout`` (:func:`~.runner.call_within`) or got an
        unusable vector (:class:`UnusableVectorError`: NaN, all zero) falls back for this
        query alone.  Never raises for the embedder."""
        settled = self._settled(text)
        if settled is not None:
            return settled
        try:
            if self.timeout is None:
                vector = self.embedder.embed_query(text)
            else:
                vector = call_within(self.state.queries, self.embedder.embed_query, text, self.timeout)
        except NotStarted:
            return None, True
        except UnusableVectorError as exc:
            self.state.unusable(exc, self.embedder.name)
            return None, True
        except Exception as exc:  # noqa: BLE001 -- an embedder may raise anything
            self.state.failed(exc, self.embedder.name)
            return None, True
        return self._answered(text, vector)

    async def aprobe(self, text: str) -> tuple[Vector | None, bool]:
        """:meth:`probe` without blocking the event loop: the embedder's async twin, or its
        sync method on the query lane (never the asyncio default executor)."""
        settled = self._settled(text)
        if settled is not None:
            return settled
        try:
            if self.embedder._aquery is not None:
                vector = await asyncio.wait_for(self.embedder.aembed_query(text), self.timeout)
            else:
                vector = await acall_within(self.state.queries, self.embedder.embed_query, text, self.timeout)
        except NotStarted:
            return None, True
        except UnusableVectorError as exc:
            self.state.unusable(exc, self.embedder.name)
            return None, True
        except (Exception, asyncio.TimeoutError) as exc:  # noqa: BLE001
            if isinstance(exc, asyncio.TimeoutError):
                exc = TimeoutError(f"no answer within embed_timeout={self.timeout} s")
            self.state.failed(exc, self.embedder.name)
            return None, True
        return self._answered(text, vector)

    def _answered(self, text: str, vector: Vector) -> tuple[Vector, bool]:
        self.state.answered()
        self._last_query = (text, vector)
        return vector, False

    def view(self, vector: Vector | None, min_turns: int) -> QueryView | None:
        """The query's similarities to the turns the bound history holds (a vector of a turn
        it no longer holds is never scored: :meth:`TurnVectors.view`).  The caller holds the lock."""
        if vector is None:
            return None
        return self.vectors.view(vector, min_turns, self._bound()[0].positions)

    def mismatched(self, vector: Vector) -> bool:
        """Whether the query's vector has another dimension than the turns' (the embedder
        answers queries with another model than it embedded the turns with): selection
        then falls back to lexical, and one warning per pair of dimensions is logged."""
        dim = self.vectors.dim
        query_dim = len(vector)
        if dim is None or query_dim == dim:
            return False
        if (query_dim, dim) not in self._mismatches:
            self._mismatches.add((query_dim, dim))
            self._recheck = (query_dim, dim)
            logger.warning(
                "embedder %r gave the query a %d-dimensional vector but the turns %d-dimensional ones; "
                "selection is lexical (Selection.semantic_fallback) until they agree. One turn is embedded "
                "again to tell whether the model behind this name changed (then every turn is embedded "
                "again with it)", self.embedder.name, query_dim, dim,
            )
        if self._recheck is not None:
            self._kick()  # (a pass answers it: :meth:`_check_model`; nothing while backing off)
        return True


class _Down(Exception):
    """The embedder stopped answering while a failed batch was being split (:meth:`_embed`)."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.failure = failure


_FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32
_FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32


def _float32(vector: Vector) -> Vector:
    """``vector`` rounded to float32 precision (what a cache or a store gives back).  A
    vector whose largest value float32 cannot hold (beyond 3.4e38: it would become
    infinite, or below 1.2e-38: it would fade to zero) is first divided by that value, in
    float64: its direction, all that selection uses, is kept."""
    largest = max(abs(x) for x in vector)
    if largest > _FLOAT32_MAX or 0.0 < largest < _FLOAT32_TINY:
        vector = [x / largest for x in vector]
    return array("f", vector).tolist()


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _as_error(exc: BaseException, name: str) -> EmbeddingError:
    if isinstance(exc, EmbeddingError):
        return exc
    return EmbeddingError(f"embedder {name!r} failed: {type(exc).__name__}: {exc}; the turns stay pending")
