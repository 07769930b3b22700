"""Node and query vectors for :class:`~llamaindex_gatekeeper.postprocessor.GatekeeperNodePostprocessor`:
``node.embedding`` and ``QueryBundle.embedding`` when they are usable (finite numbers of
one dimension), else a bounded cache by ``(embedder name, text hash)`` shared by every
postprocessor (:data:`VECTORS`), else the embedder.  A node whose text the embedder answers,
alone, with an unusable vector (all zero, NaN, ...) stays lexical; the other nodes keep their
vectors (the core's rule for turns).  The bundle's embedding is compared only with vectors of
its dimension: when the embedder's have another (the retriever embeds with another model), the
query is embedded with the embedder instead (logged once).  Kept apart so the postprocessor's
module stays short."""

from __future__ import annotations

import asyncio
import logging
import math
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any, Callable, List

from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from context_gatekeeper import EmbeddingError, as_embedder
from context_gatekeeper.integration import (
    BoundedCache, UnusableVectorError, acall_within, call_within, state_of, text_hash, unit_rows,
)

__all__ = ["NodeVectors", "VECTORS", "query_embedding"]

VECTORS: BoundedCache[tuple[str, str], array] = BoundedCache(maxsize=10_000)
"""Node vectors by ``(embedder name, text_hash(text))`` (the key every vector cache of the
core uses), shared across calls, postprocessors and threads (an embedder's name identifies
its model: :func:`context_gatekeeper.as_embedder`).  Kept as float32 arrays: 10,000
vectors of 1,536 dimensions take about 60 MB.  Only usable vectors are kept: a text the
embedder answered with an unusable one is asked again with the next call's missing nodes."""

def query_embedding(query: Any) -> list[float] | None:
    """The first usable embedding found on ``query`` and the bundles it wraps (one with
    NaN, infinite or non-numeric values is ignored, with a debug log)."""
    while isinstance(query, QueryBundle):
        if query.embedding:
            vector = _finite(query.embedding)
            if vector is not None:
                return vector
            logger.debug("QueryBundle.embedding ignored: not a list of finite numbers")
        query = query.query_str
    return None


def _finite(vector: Any) -> list[float] | None:
    """``vector`` as a list of floats when it is a non-empty sequence of finite numbers, not
    all zero (a zero vector has no direction: it would read as unrelated to everything)."""
    try:
        floats = [float(x) for x in vector]
    except (TypeError, ValueError):
        return None
    return floats if floats and all(math.isfinite(x) for x in floats) and any(floats) else None


logger = logging.getLogger("llamaindex_gatekeeper.postprocessor")  # the postprocessor's own logger


class NodeVectors:
    """Node and query vectors for the postprocessor: ``node.embedding`` when filled, else
    a bounded cache by ``(embedder name, text hash)`` (``cache``; default :data:`VECTORS`,
    or this object's own of ``max_vectors`` entries), else one document call for the
    missing nodes (each asked alone when that call's answer holds an unusable vector: a
    text that gets one alone leaves its node lexical, the rest keep theirs).  Failures
    and timeouts give ``None``.  Calls run on the embedder's own
    lanes and share its outage state with every gatekeeper using it
    (:mod:`context_gatekeeper.selection.semantic.runner`): a hung call holds one thread,
    not one per call; after a failure the embedder is left alone for the backoff, and one
    warning is logged per outage.  ``timeout`` counts from a call's start on its lane: a
    call that waited its turn behind other requests' calls that long is dropped (lexical
    for this request, no outage: :func:`~context_gatekeeper.selection.semantic.runner.call_within`).
    ``timeout`` is checked by the postprocessor (the core's rule)."""

    def __init__(
        self,
        embedder: Any,
        timeout: float | None = None,
        max_vectors: int | None = None,
        cache: BoundedCache[tuple[str, str], array] | None = None,
    ) -> None:
        from context_gatekeeper.integration import load_numpy

        load_numpy()  # fail now, not at the first query, when numpy is missing
        self.embedder = as_embedder(embedder)
        self.timeout = timeout
        if cache is None:
            cache = VECTORS if max_vectors is None else BoundedCache(maxsize=max_vectors)
        self._cache = cache
        self._state = state_of(self.embedder)
        self._unusable_nodes = 0  # nodes refused alone so far: the first is a warning
        self._dimension: int | None = None  # the embedder's documents' (its first query's until one is embedded)
        self._warned: set[str] = set()  # the dimension disagreements logged (once each)

    def _missing(
        self, nodes: List[NodeWithScore], own: list[list[float] | None], dimension: int
    ) -> tuple[list[Any], list[tuple[int, str, tuple[str, str]]]]:
        """Each node's vector (its ``own`` embedding when it has the query's ``dimension``,
        else the cache's when it has the embedder's dimension, or any while that is unknown)
        and the nodes left to embed.  A cache hit becomes the most recently used entry."""
        vectors: list[Any] = []
        todo = []
        known = self._dimension
        for i, item in enumerate(nodes):
            vector: Sequence[float] | None = _node_embedding(item.node, own[i], dimension)
            if vector is None:
                text = item.node.get_content(metadata_mode=MetadataMode.EMBED)
                key = (self.embedder.name, text_hash(text))
                vector = self._cache.get(key)
                if vector is not None and known is not None and len(vector) != known:  # two models under one name
                    vector = None
                if vector is None:
                    todo.append((i, text, key))
            vectors.append(vector)
        return vectors, todo

    def _remember(self, nodes: List[NodeWithScore], vectors: list[Any],
                  todo: list[tuple[int, str, tuple[str, str]]], found: list[Sequence[float] | None]) -> None:
        """Keep the embedded nodes' vectors in the cache as float32 (4 bytes a value), of unit
        length (only their direction is used, and a value float32 cannot hold, beyond 3.4e38,
        would become infinite), and use them as kept: a node scores alike whether its vector
        was just made or found again.  A node whose vector was unusable (``None`` in
        ``found``) is selected by its words in this call, and its text asked again next time."""
        kept = []
        for (i, _, key), vector in zip(todo, found):
            if vector is None:
                continue
            vectors[i] = held = array("f", unit_rows(vector)[0].tolist())
            kept.append((key, held))
            self._dimension = len(held)
        self._cache.put_many(kept)

    def _usable_rows(self, nodes: List[NodeWithScore], todo: list[tuple[int, str, tuple[str, str]]],
                     exc: UnusableVectorError) -> list[Sequence[float] | None]:
        """The documents call's usable vectors when only some were unusable (all zero, NaN):
        those nodes alone go lexical, for this call, logged (a warning for this postprocessor's
        first, debug logs after); the embedder answered, so no outage.  A reply that cannot be
        split by text (a wrong count or dimension) is raised, and the call is lexical."""
        if exc.rows is None:
            raise exc
        self._state.answered()
        bad = [nodes[i].node.node_id for (i, _, _), row in zip(todo, exc.rows) if row is None]
        first, self._unusable_nodes = self._unusable_nodes == 0, self._unusable_nodes + len(bad)
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "node(s) %s: the embedder answered with an unusable vector (%s); those nodes are selected by their "
            "words only in this call, the others by meaning too, no backoff%s",
            ", ".join(bad), exc, " (further ones are logged at debug level)" if first else "",
        )
        return list(exc.rows)

    def _embed(self, nodes: List[NodeWithScore], todo: list[tuple[int, str, tuple[str, str]]]) -> list[Any]:
        """The missing nodes' vectors, in one documents call (:meth:`_usable_rows` when some
        come back unusable)."""
        try:
            return list(self._call(self.embedder.embed_documents, [t for _, t, _ in todo], self._state.documents))
        except UnusableVectorError as exc:
            return self._usable_rows(nodes, todo, exc)

    async def _aembed(self, nodes: List[NodeWithScore], todo: list[tuple[int, str, tuple[str, str]]]) -> list[Any]:
        """:meth:`_embed` with the embedder's async twin awaited."""
        embedder = self.embedder
        try:
            return list(await self._await(embedder.aembed_documents, embedder._adocuments is not None,
                                          embedder.embed_documents, [t for _, t, _ in todo], self._state.documents))
        except UnusableVectorError as exc:
            return self._usable_rows(nodes, todo, exc)

    def similarities(self, nodes: List[NodeWithScore], text: str, query: list[float] | None) -> tuple[Any, bool]:
        """``(each node's similarity or None, whether the embedder failed)``; ``(None, True)``
        when the query could not be embedded.  The query bundle's embedding (``query``) is
        used while it has the dimension of the vectors it is compared with; when the
        embedder's vectors have another (the retriever's model is not the embedder's), the
        query is embedded with the embedder instead (:meth:`_settled`)."""
        own = _own_embeddings(nodes)
        query = _agreeing(query, own)
        try:
            while True:
                asked = query is None
                if query is None:
                    query = self._asked(self._call(self.embedder.embed_query, text, self._state.queries))
                vectors, todo = self._missing(nodes, own, len(query))
                if todo:
                    self._remember(nodes, vectors, todo, self._embed(nodes, todo))
                if self._settled(query, vectors, asked):
                    break
                query = None
        except Exception as exc:  # noqa: BLE001 -- an embedder may raise anything: select lexically
            return self._fail(exc)
        return self._ok(query, vectors)

    async def asimilarities(self, nodes: List[NodeWithScore], text: str, query: list[float] | None) -> tuple[Any, bool]:
        """:meth:`similarities` with the embedder's async twins awaited."""
        own = _own_embeddings(nodes)
        query = _agreeing(query, own)
        embedder = self.embedder
        try:
            while True:
                asked = query is None
                if query is None:
                    query = self._asked(await self._await(embedder.aembed_query, embedder._aquery is not None,
                                                          embedder.embed_query, text, self._state.queries))
                vectors, todo = self._missing(nodes, own, len(query))
                if todo:
                    self._remember(nodes, vectors, todo, await self._aembed(nodes, todo))
                if self._settled(query, vectors, asked):
                    break
                query = None
        except Exception as exc:  # noqa: BLE001
            return self._fail(exc)
        return self._ok(query, vectors)

    def _asked(self, query: list[float]) -> list[float]:
        """The embedder's query vector, which gives its dimension while none of its document
        vectors was seen (so the cache's vectors of another model under its name go unused)."""
        if self._dimension is None:
            self._dimension = len(query)
        return query

    def _settled(self, query: list[float], vectors: list[Any], asked: bool) -> bool:
        """Whether every node vector compares with ``query``.  Not so for the query bundle's
        vector (``asked`` False) beside the embedder's of another dimension: the retriever's
        model is another, so the query is to be embedded with the embedder (logged once;
        False).  Not so for the embedder's own query vector: it answers queries and documents
        in two dimensions, so this call is lexical, with no outage (:class:`_Mismatch`, logged once)."""
        other = next((len(v) for v in vectors if v is not None and len(v) != len(query)), None)
        if other is None:
            return True
        if not asked:
            self._once(
                "bundle", logging.WARNING,
                "QueryBundle.embedding has %d dimensions but the embedder %r gives the nodes %d (the retriever "
                "embeds with another model): the query is embedded with the embedder too; pass the index's "
                "embedding model as embedder= to save that call", len(query), self.embedder.name, other,
            )
            return False
        failure = (f"embedder {self.embedder.name!r} embeds queries in {len(query)} dimensions but documents in "
                   f"{other}; embed queries and documents with one model")
        self._once("embedder", logging.WARNING, "%s: the nodes are selected by their words (semantic_fallback)",
                   failure)
        raise _Mismatch(failure)

    def _once(self, what: str, level: int, message: str, *args: Any) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.log(level, message, *args)

    def _call(self, fn: Callable[[Any], Any], arg: Any, lane: Any) -> Any:
        """``fn(arg)``: at once without a timeout, else on ``lane`` (one of the embedder's)
        within it, counted from the call's start
        (:func:`~context_gatekeeper.selection.semantic.runner.call_within`);
        :class:`_BackingOff` while the embedder is left alone after a failure."""
        if self._state.blocked():
            raise _BackingOff()
        result = fn(arg) if self.timeout is None else call_within(lane, fn, arg, self.timeout)
        self._state.answered()
        return result

    async def _await(self, twin: Callable[[Any], Any], native: bool, sync: Callable[[Any], Any], arg: Any,
                     lane: Any) -> Any:
        """``await twin(arg)`` within the timeout: the embedder's own async method when it
        has one (``native``), else its ``sync`` method on ``lane``, the timeout counted from
        the call's start as :meth:`_call` counts it."""
        if self._state.blocked():
            raise _BackingOff()
        if self.timeout is None:
            result = await twin(arg)
        elif not native:
            result = await acall_within(lane, sync, arg, self.timeout)
        else:
            try:
                result = await asyncio.wait_for(twin(arg), self.timeout)
            except asyncio.TimeoutError:
                raise self._timed_out() from None
        self._state.answered()
        return result

    def _timed_out(self) -> EmbeddingError:
        """The failure of an embedder call past ``embed_timeout`` (logged by :meth:`_fail`,
        never raised to the caller: the nodes are then selected lexically)."""
        return EmbeddingError(
            f"no answer within embed_timeout={self.timeout} s; "
            "raise embed_timeout, or pass embed_timeout=None to wait"
        )

    def _ok(self, query: list[float], vectors: list[Any]) -> tuple[Any, bool]:
        from context_gatekeeper.integration import unit_rows

        q = unit_rows(query)[0]
        sims: list[float | None] = []
        for vector in vectors:
            row = None if vector is None else unit_rows(vector)[0]
            sims.append(None if row is None or row.shape != q.shape else float(row @ q))
        return sims, False

    def _fail(self, exc: BaseException) -> tuple[Any, bool]:
        """Lexical for this call; a failure (not a call skipped while backing off, nor one
        that waited its turn on the lane too long) starts or extends the embedder's outage,
        which warns once (:meth:`EmbedderState.failed`)."""
        if isinstance(exc, UnusableVectorError):  # the query's (a node's is kept apart): no outage, this call lexical
            self._state.unusable(exc, self.embedder.name)
        elif not isinstance(exc, (_BackingOff, _Mismatch)):
            self._state.failed(exc, self.embedder.name)  # which ignores a call that never ran
        return None, True


class _BackingOff(Exception):
    """The embedder is being left alone after a failure: this call selects lexically."""


class _Mismatch(Exception):
    """The embedder's query and document vectors have two dimensions (logged once): this
    call selects lexically, with no outage (the embedder answers)."""


def _own_embeddings(nodes: List[NodeWithScore]) -> list[list[float] | None]:
    """Each node's ``node.embedding`` as floats when it is filled with finite numbers, else None."""
    return [_finite(n.node.embedding) if n.node.embedding else None for n in nodes]


def _node_embedding(node: BaseNode, vector: list[float] | None, dimension: int) -> list[float] | None:
    """``vector`` (the node's embedding as finite floats) when it has ``dimension``, else
    None (with a debug log when the node's embedding was filled): the node is then
    embedded like one without it."""
    if not node.embedding:
        return None
    if vector is None or len(vector) != dimension:
        logger.debug(
            "node %s: embedding ignored (%s)", node.node_id,
            "not finite numbers" if vector is None else f"dimension {len(vector)}, the query's is {dimension}",
        )
        return None
    return vector


def _agreeing(query: list[float] | None, own: list[list[float] | None]) -> list[float] | None:
    """The query's own embedding, unless the nodes' ``own`` embeddings mostly have another
    dimension (then it is ignored, with a debug log, and the query is embedded)."""
    if query is None:
        return None
    dims = Counter(len(v) for v in own if v is not None)
    if dims and dims.most_common(1)[0][0] != len(query) and dims[len(query)] * 2 <= sum(dims.values()):
        logger.debug("QueryBundle.embedding ignored: dimension %d, the nodes' is %d",
                     len(query), dims.most_common(1)[0][0])
        return None
    return query
