"""The semantic methods of :class:`~gatekeeper.ContextGatekeeper`: the embedder in use,
explicit embedding, and the async twins (kept apart so the gatekeeper module stays about
selection)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .runner import run_locked
from .embedding import Embedder, Vector
from ..history import TurnHistory, excluded_ids
from .channel import SemanticChannel

if TYPE_CHECKING:
    from ..records import Selection

__all__ = ["SemanticMethods"]


class SemanticMethods:
    """The async twins and explicit embedding of :class:`~gatekeeper.ContextGatekeeper`
    (kept here so the gatekeeper module stays about selection)."""

    _semantic: SemanticChannel | None
    _history: TurnHistory
    _lock: Any

    if TYPE_CHECKING:  # provided by ContextGatekeeper

        def _select_for(self, query: str, token_budget: int | None, exclude: frozenset[int], probe: Any,
                        records: bool = True) -> Selection: ...

    def _semantic_channel(self, embedder: Any, vector_cache: Any, timeout: float | None) -> SemanticChannel | None:
        """The channel for ``embedder`` (None without one), following the history: its
        added and changed turns are queued for the background embedding."""
        if embedder is None:
            return None
        channel = SemanticChannel(embedder, vector_cache, timeout)
        channel.bind(self._history, self._lock)
        return channel

    @property
    def embedder(self) -> Embedder | None:
        """The embedder selection uses (normalised by :func:`~context_gatekeeper.selection.semantic.embedding.as_embedder`),
        or None for the lexical default."""
        return None if self._semantic is None else self._semantic.embedder

    def embed_pending(self) -> int:
        """Embed the turns queued for embedding (added or changed, not yet embedded) now,
        and wait.  A background worker does this anyway; tests and benchmarks call it for
        deterministic results, an app after a bulk load.  Returns the number of turns the
        embedder embedded while this call waited; :class:`EmbeddingError` if it fails
        (it is tried even while backing off after a failure).  With ``embed_timeout`` it
        waits as long as the embedder keeps answering batches, and raises
        :class:`EmbeddingError` (the turns stay queued, no outage is recorded) only once
        no batch was answered for ``(4 + 64) * embed_timeout`` seconds.  Without an
        embedder, 0."""
        if self._semantic is None:
            return 0
        return self._semantic.embed_pending()

    async def aembed_pending(self) -> int:
        """:meth:`embed_pending` without blocking the event loop."""
        if self._semantic is None:
            return 0
        return await self._semantic.aembed_pending()

    async def aexplain(self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()) -> Any:
        """:meth:`explain` with the query's embedding awaited; the scoring (CPU-bound, well
        under a millisecond per hundred turns) runs inline, or in a worker thread when
        another thread holds the gatekeeper's lock."""
        exclude = excluded_ids(exclude)  # checked before the embedder is asked
        probe = await self._aprobe(query)
        return await run_locked(self._lock, self._select_for, query, token_budget, exclude, probe)

    async def aselect(
        self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()
    ) -> list[dict[str, object]]:
        """:meth:`select` with the query's embedding awaited."""
        exclude = excluded_ids(exclude)
        probe = await self._aprobe(query)

        def select() -> list[dict[str, object]]:
            selection = self._select_for(query, token_budget, exclude, probe, records=False)
            return [self._history.turns[t].as_dict() for t in selection.turn_ids]

        return await run_locked(self._lock, select)

    async def abuild_prompt(self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()) -> str:
        """:meth:`build_prompt` with the query's embedding awaited (never blocking the event
        loop on the embedder)."""
        exclude = excluded_ids(exclude)
        probe = await self._aprobe(query)

        def build() -> str:
            selection = self._select_for(query, token_budget, exclude, probe, records=False)
            return selection.as_prompt(self._history.turns)

        return await run_locked(self._lock, build)

    def take_cached(self) -> None:
        """Queue the turns changed since the last selection and give those found in the
        vector cache their vector now (the cache may do store I/O: an async caller runs
        this in a worker thread; selection on the event loop leaves it to the background)."""
        if self._semantic is not None:
            with self._lock:
                self._semantic.take(lookup=True)

    def _probe(self, query: Any) -> tuple[Vector | None, bool] | None:
        channel = self._semantic
        if channel is None or not isinstance(query, str) or not query.strip():
            return None  # the selection validates the query
        return channel.probe(query[: self._history.params.max_query_chars])

    async def _aprobe(self, query: Any) -> tuple[Vector | None, bool] | None:
        channel = self._semantic
        if channel is None or not isinstance(query, str) or not query.strip():
            return None
        return await channel.aprobe(query[: self._history.params.max_query_chars])
