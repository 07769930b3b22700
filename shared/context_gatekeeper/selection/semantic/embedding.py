"""Embedders: one small interface over LangChain, LlamaIndex and plain callables.

:func:`as_embedder` turns whatever the user holds into an :class:`Embedder`:

* a LangChain ``Embeddings`` (``embed_documents`` / ``embed_query`` and their
  ``aembed_*`` twins);
* a LlamaIndex ``BaseEmbedding`` (``get_text_embedding_batch`` /
  ``get_query_embedding`` and their ``aget_*`` twins);
* a callable ``list[str] -> list[list[float]]``, with an optional async twin as its
  ``aembed`` attribute (or ``as_embedder(fn, aembed=...)``).

Frameworks are recognised by duck typing: nothing here imports them, or numpy.
Vectors come back as lists of floats, checked (one per text, one dimension, finite, not
all zero: :class:`UnusableVectorError` otherwise).

A *vector cache* is any object with ``get(key) -> list[float] | None`` and
``put(key, vector)`` (``put_many(items)`` optional), keyed by
``(embedder name, text_hash(text))``; :class:`DictVectorCache` is the in-process default
(bounded, float32).
"""

from __future__ import annotations

import asyncio
import dis
import functools
import hashlib
import inspect
import itertools
import math
import threading
import types
import uuid
import weakref
from array import array
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from ...caching import BoundedCache, require_count
from ...errors import InvalidInputError, InvalidTypeError, ModelUnavailableError
from ..records import Turn

__all__ = [
    "require_vector_cache",
    "Embedder",
    "EmbeddingError",
    "UnusableVectorError",
    "VectorCache",
    "DictVectorCache",
    "as_embedder",
    "text_hash",
    "turn_text",
    "is_local_name",
]

Vector = list[float]
Key = tuple[str, str]


class EmbeddingError(ModelUnavailableError):
    """An embedder failed, timed out, or returned unusable vectors.  Selection never
    raises it (it falls back to lexical scoring); explicit ``embed_pending`` does."""


class UnusableVectorError(EmbeddingError):
    """An embedder answered, but with vectors that cannot be used (NaN or infinite values,
    an all-zero vector, the wrong count or dimensions).  Not an outage: a query falls back
    to lexical scoring for that call only; a turn whose text gets one alone stays lexical.

    ``rows``: when the answer had the right count and one dimension and only some vectors
    are unusable, each text's vector in order, ``None`` for the unusable ones (a caller may
    keep the others); else ``None``."""

    def __init__(self, message: str, rows: list[list[float] | None] | None = None) -> None:
        super().__init__(message)
        self.rows = rows


def text_hash(text: str) -> str:
    """sha256 hex digest of the text's UTF-8 bytes: the text part of a vector's key (lone
    surrogates kept as their escape, as :func:`~context_gatekeeper.caching.text_key` does, so
    every string has one; any other text's digest is its plain UTF-8 one)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def turn_text(turn: Turn) -> str:
    """The text a turn is embedded as: its non-empty user, assistant and tool texts,
    joined by newlines."""
    return "\n".join(part for part in (turn.user, turn.assistant, *turn.tool_texts) if part)


@runtime_checkable
class VectorCache(Protocol):
    """Where vectors are kept between calls, keyed by ``(embedder name, text hash)``."""

    def get(self, key: Key) -> Vector | None: ...

    def put(self, key: Key, vector: Vector) -> None: ...


def require_vector_cache(cache: Any) -> Any:
    """Return ``cache`` if it is ``None`` or has ``get(key)`` and ``put(key, vector)`` methods."""
    if cache is not None and not (callable(getattr(cache, "get", None)) and callable(getattr(cache, "put", None))):
        raise InvalidTypeError(
            f"vector_cache needs get(key) and put(key, vector) methods, got {type(cache).__name__}; "
            "pass a VectorCache (see embedding.VectorCache) or None"
        )
    return cache


class DictVectorCache:
    """The default vector cache, in this process: the ``max_vectors`` most recently used
    vectors (least recently used out first), each kept as float32 (4 bytes a value, as
    stores keep them: 20,000 vectors of 1,536 dimensions take about 120 MB).

    A gatekeeper's vectors of its current turns live in its own matrix; this cache keeps
    vectors by text, so that a text seen again (an undo, a turn replaced back, a history
    set anew) is not embedded again.  ``clear()`` releases them all."""

    in_memory = True  # no I/O: selection may read it on an event loop thread (other caches: off the loop)

    def __init__(self, max_vectors: int = 20_000) -> None:
        self.max_vectors = require_count(max_vectors, "max_vectors", "pass how many vectors to keep")
        self._vectors: BoundedCache[Key, array] = BoundedCache(max_vectors)

    def get(self, key: Key) -> Vector | None:
        """The vector kept for ``key`` (float32 precision), or None."""
        held = self._vectors.get(key)
        return None if held is None else held.tolist()

    def put(self, key: Key, vector: Sequence[float]) -> None:
        self._vectors.put(key, array("f", vector))

    def put_many(self, items: Iterable[tuple[Key, Sequence[float]]]) -> None:
        self._vectors.put_many((key, array("f", vector)) for key, vector in items)

    def clear(self) -> None:
        """Forget every vector."""
        self._vectors.clear()

    def __len__(self) -> int:
        return len(self._vectors)


def check_vectors(vectors: Any, count: int, name: str) -> list[Vector]:
    """``count`` vectors of one dimension with finite values, none all zero, as lists of
    floats, or :class:`UnusableVectorError` naming what is wrong.  An all-zero vector
    (what some models or wrappers answer for a text they could not embed) has no
    direction: its similarity to everything would be 0, read as "unrelated"."""
    try:
        out = [list(map(float, v.tolist() if hasattr(v, "tolist") else v)) for v in vectors]
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an int too big for a float
        raise UnusableVectorError(f"embedder {name!r} returned something other than lists of numbers: {exc}") from exc
    if len(out) != count:
        raise UnusableVectorError(f"embedder {name!r} returned {len(out)} vectors for {count} texts")
    dims = {len(v) for v in out}
    if len(dims) > 1 or 0 in dims:
        raise UnusableVectorError(f"embedder {name!r} returned vectors of dimensions {sorted(dims)}; expected one, > 0")
    nonfinite = [not all(map(math.isfinite, v)) for v in out]
    zero = [not any(v) for v in out]
    if any(nonfinite) or any(zero):
        rows: list[list[float] | None] = [None if a or b else v for v, a, b in zip(out, nonfinite, zero)]
        what = ("a vector with NaN or infinite values" if any(nonfinite)
                else "an all-zero vector, which has no direction to compare")
        raise UnusableVectorError(f"embedder {name!r} returned {what}", rows)
    return out


class Embedder:
    """One embedding model behind four methods; build it with :func:`as_embedder`.

    Args:
        name: identifies the model in vector caches (a different model must have a
            different name).
        documents: ``list[str] -> vectors`` for turns.
        query: ``str -> vector`` for queries.
        adocuments / aquery: async twins; without them the sync call runs on this
            embedder's own daemon thread (:mod:`~context_gatekeeper.selection.semantic.runner`),
            never the asyncio default executor, so a hung call cannot starve it or keep the
            process from exiting.
    """

    def __init__(
        self,
        name: str,
        documents: Callable[[list[str]], Any],
        query: Callable[[str], Any],
        adocuments: Callable[[list[str]], Awaitable[Any]] | None = None,
        aquery: Callable[[str], Awaitable[Any]] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidTypeError(
                f"an embedder's name must be a non-empty string, got {name!r}; name it (e.g. the model's name), "
                "so its cached vectors are told apart"
            )
        self.name = name
        self._documents, self._query = documents, query
        self._adocuments, self._aquery = adocuments, aquery

    def __repr__(self) -> str:
        return f"Embedder({self.name!r})"

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        return check_vectors(self._documents(texts), len(texts), self.name) if texts else []

    def embed_query(self, text: str) -> Vector:
        return check_vectors([self._query(text)], 1, self.name)[0]

    async def aembed_documents(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        if self._adocuments is not None:
            vectors = await self._adocuments(texts)
        else:
            vectors = await _on_lane(self, "documents", self._documents, texts)
        return check_vectors(vectors, len(texts), self.name)

    async def aembed_query(self, text: str) -> Vector:
        if self._aquery is not None:
            vector = await self._aquery(text)
        else:
            vector = await _on_lane(self, "queries", self._query, text)
        return check_vectors([vector], 1, self.name)[0]


async def _on_lane(embedder: Embedder, lane: str, fn: Callable[[Any], Any], arg: Any) -> Any:
    """``fn(arg)`` on the embedder's documents or query lane, awaited (cancelling the
    await drops the call if it has not started yet): :func:`~.runner.acall_within`, unbounded."""
    from .runner import acall_within, state_of

    return await acall_within(getattr(state_of(embedder), lane), fn, arg, None)


NAME_LIMIT = 200
"""The longest embedder name a store keeps (:func:`~context_gatekeeper.stores.vectors.checked_embedder`):
a longer default name is cut to it (:func:`_fitting`)."""
_NAME_DIGEST = 16  # hex characters of sha256 that keep a cut name apart from every other


def _fitting(name: str) -> str:
    """``name`` if it is at most :data:`NAME_LIMIT` characters, else its start and a short
    sha256 of the whole (a stable name, apart from any other: a local model's long path
    still names one model, and a store can keep its vectors)."""
    if len(name) <= NAME_LIMIT:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_NAME_DIGEST]
    return f"{name[: NAME_LIMIT - _NAME_DIGEST - 1]}#{digest}"


_MODEL_ATTRS = ("model", "model_name", "model_id", "model_path", "repo_id", "name_or_path", "deployment")
"""Attributes that name the model behind an object: one of them makes a default name stable."""
_SHAPE_ATTRS = ("size", "embed_dim", "dimensions")
"""Attributes that, with the class, tell instances apart (``DeterministicFakeEmbedding(size=16)``)."""
LOCAL_PREFIX = "local:"
"""How a default name starts when nothing names the model (see :func:`is_local_name`)."""
_NONCE = uuid.uuid4().hex[:8]  # this process: local names of two processes never match
_LOCAL_TOKENS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
_LOCAL_COUNTER = itertools.count(1)
_LOCAL_LOCK = threading.Lock()


def is_local_name(name: str) -> bool:
    """Whether ``name`` is a process-local default name: the embedder is a lambda, a
    function or an object with no model attribute, so nothing tells its model apart
    from another's.  Its vectors are shared only within this process (stores do not
    persist them); pass ``as_embedder(obj, name="model-id")`` to persist them."""
    return name.startswith(LOCAL_PREFIX)


def _attr(obj: Any, attr: str) -> Any:
    try:
        value = getattr(obj, attr, None)
    except Exception:  # noqa: BLE001 -- a property may raise; it just doesn't name the model
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool) and value not in ("", "unknown"):
        return value
    return None


def _local_token(anchor: Any, detail: str) -> int:
    """A number for ``(anchor, detail)``, the same while ``anchor`` lives, never reused."""
    with _LOCAL_LOCK:
        try:
            tokens = _LOCAL_TOKENS.setdefault(anchor, {})
        except TypeError:  # not weak-referenceable: a fresh number each time (never a collision)
            return next(_LOCAL_COUNTER)
        if detail not in tokens:
            tokens[detail] = next(_LOCAL_COUNTER)
        return tokens[detail]


def _default_name(obj: Any) -> str:
    """The name of an embedder's model, for vector caches.

    * the object's own ``name`` attribute (a non-empty str), if it has one;
    * a ``functools.partial`` is named by what it wraps plus its keyword arguments when they
      are plain values (``module.embed[model=b]``), by a process-local name when it binds
      positional arguments or objects; a bound method by its object
      (``module.Class.method``); an object (or a method's object) by its class plus its
      model attributes (``model``, ``model_name``, ``model_id``, ...) and shape attributes
      (``size``, ``embed_dim``, ``dimensions``): ``module.Class[model=e5-small]``;
    * when no such attribute names the model (a lambda, a plain function, an object
      without one), a process-local name (:func:`is_local_name`) tied to that object:
      two such embedders never share vectors, and their vectors are not persisted.
    """
    own = _attr(obj, "name")
    if isinstance(own, str):
        return own
    outer = obj
    bound: list[str] = []  # a partial's arguments choose its model as much as what it wraps does
    while isinstance(obj, functools.partial):
        if obj.args or any(not isinstance(v, (str, int, float, bool, type(None))) for v in obj.keywords.values()):
            return f"{LOCAL_PREFIX}{_NONCE}.{_local_token(outer, '')}:{_default_name(obj.func)}"
        bound = [f"{k}={v}" for k, v in sorted(obj.keywords.items())] + bound
        obj = obj.func
    if bound:
        inner = _default_name(obj)
        if is_local_name(inner):  # the wrapped function names nothing: the partial is its own model
            return f"{LOCAL_PREFIX}{_NONCE}.{_local_token(outer, '')}:{inner.split(':', 2)[-1]}[{','.join(bound)}]"
        return f"{inner}[{','.join(bound)}]"
    method = ""
    owner = getattr(obj, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType) and hasattr(obj, "__func__"):
        method, obj = f".{getattr(obj, '__name__', '?')}", owner  # a bound method: its object names it
        own = _attr(obj, "name")
        if isinstance(own, str):
            return own + method
    function = isinstance(obj, (types.FunctionType, types.BuiltinFunctionType))
    kind = obj if function else type(obj)
    base = f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', type(obj).__name__)}{method}"
    named = [f"{a}={v}" for a in _MODEL_ATTRS if (v := _attr(obj, a)) is not None]
    shape = [f"{a}={v}" for a in _SHAPE_ATTRS if (v := _attr(obj, a)) is not None]
    if named or shape:
        return f"{base}[{','.join(named + shape)}]"
    return f"{LOCAL_PREFIX}{_NONCE}.{_local_token(obj, method)}:{base}"


_LANGCHAIN_BASE = ("langchain_core.embeddings.embeddings", "Embeddings")
_LLAMAINDEX_BASE = ("llama_index.core.base.embeddings.base", "BaseEmbedding")


def _inherited(obj: Any, method: str, base: tuple[str, str]) -> bool:
    """Whether ``obj``'s ``method`` is the one the framework's base class ``base`` (module,
    name) defines, not an override (read from the class, without importing the framework)."""
    for klass in type(obj).__mro__:
        if method in vars(klass):
            return (klass.__module__, klass.__qualname__) == base
    return False


_AWAITING_OPS = frozenset({"GET_AWAITABLE", "GET_AITER", "GET_ANEXT"})
"""The bytecode of ``await`` / ``async with`` (GET_AWAITABLE) and ``async for`` (GET_AITER,
GET_ANEXT): the same on every Python this library supports."""


def _awaits(method: Any) -> bool:
    """Whether ``method`` is an ``async def`` whose body awaits something (``await``, ``async
    for``, ``async with``), read from its bytecode.  Only such a method can give the event
    loop back while the model works: an ``async def`` that calls the sync model and never
    awaits (as many local LlamaIndex embeddings are written) holds the loop for the whole
    call, and no timeout can interrupt it.  Anything else (a plain function returning an
    awaitable, a compiled method) counts as not awaiting: its sync twin then runs on the
    embedder's lane, which is always safe."""
    fn = inspect.unwrap(getattr(method, "__func__", method))
    if not inspect.iscoroutinefunction(fn):
        return False
    try:
        return any(instruction.opname in _AWAITING_OPS for instruction in dis.get_instructions(fn))
    except TypeError:  # no bytecode to read
        return False


def _own_async(obj: Any, method: str, base: tuple[str, str]) -> Any:
    """``obj``'s async ``method`` when it is truly async: the class overrides the framework
    ``base``'s (whose own only runs the sync one on asyncio's default thread pool) and
    awaits (:func:`_awaits`); else ``None``, and the sync method runs on the embedder's lane."""
    if _inherited(obj, method, base) or not _awaits(getattr(type(obj), method, None)):
        return None
    return getattr(obj, method, None)


def _llamaindex_async(obj: Any) -> tuple[Any, Any]:
    """A LlamaIndex embedding's ``(async batch, async query)``, each ``None`` unless the
    method it reaches is truly async (:func:`_awaits`): ``aget_query_embedding`` calls
    ``_aget_query_embedding``, which every subclass must define, often as the sync call;
    ``aget_text_embedding_batch`` calls ``_aget_text_embeddings``, whose default gathers
    ``_aget_text_embedding``, whose default calls the sync one."""
    klass = type(obj)
    batch = "_aget_text_embedding" if _inherited(obj, "_aget_text_embeddings", _LLAMAINDEX_BASE) else "_aget_text_embeddings"
    adocuments = getattr(obj, "aget_text_embedding_batch", None) if _awaits(getattr(klass, batch, None)) else None
    aquery = getattr(obj, "aget_query_embedding", None) if _awaits(getattr(klass, "_aget_query_embedding", None)) else None
    return adocuments, aquery


def as_embedder(obj: Any, *, name: str | None = None, aembed: Callable[..., Awaitable[Any]] | None = None) -> Embedder:
    """An :class:`Embedder` for a LangChain ``Embeddings``, a LlamaIndex
    ``BaseEmbedding``, a callable ``list[str] -> list[list[float]]``, or an
    ``Embedder`` (returned as is unless ``name`` is given).

    ``name`` overrides the name used in vector caches (by default the object's ``name``
    attribute, else its class and model attributes, cut to :data:`NAME_LIMIT` characters
    with a hash of the whole when longer; see :func:`_default_name`).  Two
    different models must have different names; an object nothing names (a lambda, a
    plain function, an object without a ``model``-like attribute) gets a process-local
    name, so its vectors are never mixed with another's but are not persisted either:
    give it ``name=`` to have a store keep its vectors across restarts.  ``aembed`` is a callable's async
    twin (also read from its ``aembed`` attribute).

    A framework embedding's async methods are awaited only when truly async: defined by
    its own class (not the framework's base, which runs the sync one on asyncio's default
    thread pool, or on the event loop itself) and awaiting something (:func:`_awaits`).
    Otherwise async callers run its sync method on the embedder's lane, where
    ``embed_timeout`` holds and the event loop runs on.
    """
    if isinstance(obj, Embedder):
        if name is None:
            return obj
        return Embedder(name, obj._documents, obj._query, obj._adocuments, obj._aquery)
    label = name or _fitting(_default_name(obj))
    if hasattr(obj, "embed_documents") and hasattr(obj, "embed_query"):  # LangChain Embeddings
        return Embedder(
            label, obj.embed_documents, obj.embed_query,
            _own_async(obj, "aembed_documents", _LANGCHAIN_BASE), _own_async(obj, "aembed_query", _LANGCHAIN_BASE),
        )
    if hasattr(obj, "get_text_embedding_batch") and hasattr(obj, "get_query_embedding"):  # LlamaIndex
        return Embedder(label, obj.get_text_embedding_batch, obj.get_query_embedding, *_llamaindex_async(obj))
    if callable(obj) and not asyncio.iscoroutinefunction(obj):
        twin = aembed or getattr(obj, "aembed", None)
        aquery: Callable[[str], Awaitable[Any]] | None = None
        if twin is not None:

            async def aquery_by_twin(text: str) -> Any:
                return check_vectors(await twin([text]), 1, label)[0]

            aquery = aquery_by_twin
        # one vector for the one text, checked before it is taken out of the answer: a reply of
        # none (``[]``) or of two is an unusable answer (no outage), not an IndexError
        return Embedder(label, obj, lambda text: check_vectors(obj([text]), 1, label)[0], twin, aquery)
    raise InvalidTypeError(
        f"embedder must be a LangChain Embeddings, a LlamaIndex BaseEmbedding or a callable "
        f"list[str] -> list[list[float]] (an async function goes in aembed= beside a sync one), "
        f"got {type(obj).__name__}"
    )
