"""One bounded, thread-safe cache for everything computed once per text.

Token counts, anchors and vectors of a message or node depend only on its text (and the
counter, analyser or model that made them), so they are computed once and kept by a key
made of that text: :func:`text_key`.  :class:`BoundedCache` keeps the most recently used
``maxsize`` entries (least recently used out first), and, given a ``weigh`` function, no
more than ``max_weight`` in all (a cache of values that grow with their text, so that a
few huge texts cannot hold memory that ``maxsize`` ordinary ones would not); a value that
grows in place (a thread's index) is weighed again by :meth:`BoundedCache.reweigh`.  It is
safe to share across objects and threads; a value is computed outside its lock, so a slow
embedder never blocks readers of other keys.  A cache keyed by a caller's object (a token
counter) keys it by :meth:`BoundedCache.identity_key`, which does not keep it alive.

>>> cache = BoundedCache(maxsize=2)
>>> cache.get_or_compute("a", lambda: 1), cache.get_or_compute("a", lambda: 2)
(1, 1)
>>> cache.put("b", 2); cache.put("c", 3); "a" in cache
False
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import types
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from itertools import repeat
from operator import is_
from typing import Any, Generic, TypeVar

from .errors import InvalidInputError

__all__ = ["BoundedCache", "clear_all", "text_key", "identity_key", "hashable", "payload_chars", "require_count"]

K = TypeVar("K", bound=Hashable)
_MISSING = object()
V = TypeVar("V")


def text_key(text: str) -> str:
    """A compact key for a text: the hex sha256 of its UTF-8 bytes (lone surrogates kept
    as their escape, so every string has one)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_identities: dict[int, int] = {}
"""The address of each object :func:`identity_key` keyed by a token -> that token (dropped when it dies)."""
_identities_lock = threading.RLock()  # re-entered when a collection run inside it finalises another object
_new_identity = itertools.count(1).__next__


def identity_key(value: object) -> Hashable:
    """A key standing for ``value`` itself (its identity, not its equality) that does not keep it
    alive: a cache keyed by a caller's object (a token counter, a model built per request) must
    not hold the object, its clients and sockets for as long as its entries stay.

    An object that takes weak references gets a token, the same for as long as it lives and never
    given again: once it is collected, an object born later at its address gets a new token, so
    its entries (left to age out) are never read as the new object's.  A bound method, made
    anew at each attribute read, is its object's token and its function.  An object without weak
    references is keyed by itself when hashable (a str, an int, a tuple: a value, which any key
    holds) and else by a fresh token per call (never shared: each caller keys its own entries)."""
    if isinstance(value, types.MethodType):
        return (identity_key(value.__self__), value.__func__)
    address = id(value)
    with _identities_lock:
        token = _identities.get(address)
        if token is not None:
            return token
        token = _new_identity()
        try:
            weakref.finalize(value, _forget_identity, address, token).atexit = False
        except TypeError:  # no weak reference to it
            return value if hashable(value) else token
        _identities[address] = token
        return token


def _forget_identity(address: int, token: int) -> None:
    """Called when the object :func:`identity_key` gave ``token`` dies: its address is free again."""
    with _identities_lock:
        if _identities.get(address) == token:
            del _identities[address]


def hashable(value: object) -> bool:
    """Whether ``value`` can be a dict key."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def payload_chars(value: object) -> int:
    """The characters of the strings (and bytes) ``value`` holds, in lists, tuples, sets and
    mappings (keys too), nested: what weighs in an entry whose content is opaque data (a
    message's provider parts, an image as base64, its metadata).  Other values weigh nothing."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return sum(map(payload_chars, value))
    if isinstance(value, Mapping):
        return sum(payload_chars(key) + payload_chars(item) for key, item in value.items())
    return 0


def require_count(value: object, what: str, hint: str) -> int:
    """``value`` if it is an ``int >= 1`` (``bool`` refused), else :class:`InvalidInputError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{what} must be an int >= 1, got {value!r}; {hint}")
    return value


class BoundedCache(Generic[K, V]):
    """The ``maxsize`` most recently used entries, least recently used evicted first.

    Args:
        maxsize: entries kept (at least 1).
        weigh: ``weigh(key, value) -> int >= 0``, the weight of an entry (e.g. the characters
            of the texts it holds), computed once when it is put; ``None``: count entries only.
        max_weight: the most weight kept in all (with ``weigh``): the least recently used
            entries are evicted until the rest fit; an entry heavier than this alone is not
            kept at all (:meth:`get_or_compute` still returns it).
        in_use: ``in_use(value) -> bool`` (with ``weigh``): whether a caller is using the value
            now (a thread's index a call holds the lock of); eviction passes over such entries,
            so the total may stay above ``max_weight`` until they are free and the next put or
            :meth:`reweigh` evicts them.

    >>> cache = BoundedCache(maxsize=10, weigh=lambda key, text: len(text), max_weight=5)
    >>> cache.put("a", "abc"); cache.put("b", "de"); cache.put("c", "f"); ("a" in cache, cache.weight)
    (False, 3)
    >>> cache.put("d", "too long"); "d" in cache
    False
    """

    identity_key = staticmethod(identity_key)
    """:func:`identity_key`: the key part standing for a caller's object without keeping it alive."""

    def __init__(self, maxsize: int = 10_000, *, weigh: Callable[[K, V], int] | None = None,
                 max_weight: int | None = None, in_use: Callable[[V], bool] | None = None) -> None:
        self.maxsize = require_count(maxsize, "maxsize", "pass how many entries to keep")
        if (weigh is None) != (max_weight is None):
            raise InvalidInputError("pass weigh and max_weight together (or neither: a bound on entries alone)")
        if in_use is not None and weigh is None:
            raise InvalidInputError("in_use needs weigh and max_weight: it spares entries of a cache bounded by weight")
        self.max_weight = None if max_weight is None else require_count(max_weight, "max_weight", "pass the most weight to keep")
        self._weigh = weigh
        self._in_use = in_use
        self._weights: dict[K, int] = {}
        self.weight = 0
        """The total weight of the entries kept (0 without ``weigh``)."""
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        _CACHES.add(self)

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def __repr__(self) -> str:
        weight = "" if self.max_weight is None else f", max_weight={self.max_weight}, weight={self.weight}"
        return f"BoundedCache(maxsize={self.maxsize}, entries={len(self)}{weight})"

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value for ``key`` (now the most recently used), or ``default``."""
        found = self._lookup(key)
        return default if found is _MISSING else found  # type: ignore[return-value]

    def _lookup(self, key: K) -> V | object:
        """The value for ``key`` (now the most recently used), or ``_MISSING``; counts it."""
        with self._lock:
            data = self._data
            found = data.get(key, _MISSING)  # one lookup to find it, one to touch it
            if found is _MISSING:
                self.misses += 1
                return _MISSING
            data.move_to_end(key)
            self.hits += 1
            return found

    def get_many(self, keys: Iterable[K]) -> list[V | None]:
        """:meth:`get` for each key (``None`` where missing), under one acquisition of the
        lock: a caller that looks up a whole list (a retriever's nodes) pays one.  The
        lookups and, when every key is found, the touches run without a Python step per
        key (``map`` over the dict's own methods; values compared by identity alone, so any
        value may be kept, a numpy array too)."""
        keys = keys if isinstance(keys, list) else list(keys)
        with self._lock:
            data = self._data
            out: list[V | object] = list(map(data.get, keys, repeat(_MISSING, len(keys))))
            if not any(map(is_, out, repeat(_MISSING))):  # all found (a repeat caller): touch each in order
                deque(map(data.move_to_end, keys), maxlen=0)
                self.hits += len(out)
                return out  # type: ignore[return-value]  # no _MISSING: every value a V
            found = 0
            for i, (key, value) in enumerate(zip(keys, out)):
                if value is _MISSING:
                    out[i] = None
                else:
                    data.move_to_end(key)
                    found += 1
            self.hits += found
            self.misses += len(out) - found
        return out  # type: ignore[return-value]  # _MISSING replaced by None

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` (the most recently used), evicting the least recent."""
        self.put_many(((key, value),))

    def put_many(self, items: Iterable[tuple[K, V]]) -> None:
        """:meth:`put` each ``(key, value)``, under one acquisition of the lock."""
        weigh = self._weigh
        if weigh is not None:  # weighed outside the lock (a weight may read a long text)
            weighed = [(key, value, weigh(key, value)) for key, value in items]
            with self._lock:
                for key, value, weight in weighed:
                    self._keep_weighed(key, value, weight)
                self._evict()
            return
        with self._lock:
            data = self._data
            for key, value in items:
                data[key] = value
                data.move_to_end(key)
            self._evict()

    def _keep_weighed(self, key: K, value: V, weight: int) -> None:
        """Keep a weighed entry (the lock held); one heavier than ``max_weight`` replaces
        nothing and is not kept."""
        assert self.max_weight is not None
        self._forget(key)
        if weight > self.max_weight:
            return
        self._data[key] = value
        self._weights[key] = weight
        self.weight += weight

    def _forget(self, key: K) -> None:
        """Drop ``key`` and its weight (the lock held; nothing happens when it is not kept)."""
        if self._data.pop(key, _MISSING) is not _MISSING and self._weigh is not None:
            self.weight -= self._weights.pop(key)

    def _evict(self) -> None:
        """Drop the least recently used entries until at most ``maxsize`` and ``max_weight``
        are kept (the lock held)."""
        data = self._data
        if self._weigh is None:
            while len(data) > self.maxsize:
                data.popitem(last=False)
            return
        assert self.max_weight is not None
        if self._in_use is not None:
            self._evict_sparing(_MISSING)
            return
        while len(data) > self.maxsize or self.weight > self.max_weight:
            key, _ = data.popitem(last=False)
            self.weight -= self._weights.pop(key)

    def _evict_sparing(self, kept: object) -> None:
        """:meth:`_evict`, passing over the entry of key ``kept`` (``_MISSING``: none; ``None`` is a
        key like any other) and the entries ``in_use`` (the lock held).  Walks from the least
        recently used only as far as it must."""
        assert self.max_weight is not None
        in_use, weights = self._in_use, self._weights
        count, weight = len(self._data), self.weight
        gone: list[K] = []
        for key, value in self._data.items():
            if count <= self.maxsize and weight <= self.max_weight:
                break
            if key == kept or (in_use is not None and in_use(value)):
                continue
            gone.append(key)
            count -= 1
            weight -= weights[key]
        for key in gone:
            self._forget(key)

    def reweigh(self, key: K, value: V) -> bool:
        """Weigh ``key``'s entry again, ``value`` having grown or shrunk in place (a thread's index
        after a call), when the entry still holds ``value`` (the same object); it is now the most
        recently used, and the least recently used others are evicted until the total fits
        (``in_use`` ones passed over).  The entry itself is kept even when it alone is over
        ``max_weight`` (its caller is using it; the next put evicts it once it is the least
        recently used).  Returns False, changing nothing, when the entry was replaced or dropped
        meanwhile: a value evicted while in use is not brought back."""
        weigh = self._weigh
        if weigh is None:
            raise InvalidInputError("reweigh needs a cache bounded by weight (weigh= and max_weight=)")
        weight = weigh(key, value)  # outside the lock, as put weighs
        with self._lock:
            if self._data.get(key, _MISSING) is not value:
                return False
            self._data.move_to_end(key)
            self.weight += weight - self._weights[key]
            self._weights[key] = weight
            self._evict_sparing(key)
            return True

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value, or ``compute()`` kept and returned.  ``compute`` runs outside
        the lock: two threads missing the same key may both compute it (the values are
        equal, as they depend only on the key), but no thread waits on another's work."""
        found = self._lookup(key)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        value = compute()
        self.put(key, value)
        return value

    def discard(self, key: K) -> None:
        """Forget ``key`` (nothing happens when it is not cached)."""
        with self._lock:
            self._forget(key)

    def clear(self) -> None:
        """Forget every entry (every cache at once: :func:`clear_all`)."""
        with self._lock:
            self._data.clear()
            self._weights.clear()
            self.weight = 0


_CACHES: weakref.WeakSet[BoundedCache[Any, Any]] = weakref.WeakSet()
"""Every :class:`BoundedCache` alive (held weakly: a cache goes with its owner)."""


def clear_all() -> None:
    """Forget every entry of every :class:`BoundedCache` in the process: the per-text caches
    (token counts, anchors, prepared turns, topic labels, decoded revisions), the adapters'
    node and count caches and their thread indexes.  Nothing is lost: each is computed
    again when next needed.  For a process that must forget a purged conversation's text at
    once (:meth:`~context_gatekeeper.Store.purge` drops its decoded revisions; the caches
    derived from its texts keep them until other texts push them out)."""
    for cache in list(_CACHES):
        cache.clear()
