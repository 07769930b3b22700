"""One bounded, thread-safe cache for everything computed once per text.

Token counts, anchors and vectors of a message or node depend only on its text (and the
counter, analyser or model that made them), so they are computed once and kept by a key
made of that text: :func:`text_key`.  :class:`BoundedCache` keeps the most recently used
``maxsize`` entries (least recently used out first), and, given a ``weigh`` function, no
more than ``max_weight`` in all (a cache of values that grow with their text, so that a
few huge texts cannot hold memory that ``maxsize`` ordinary ones would not).  It is safe
to share across objects and threads; a value is computed outside its lock, so a slow
embedder never blocks readers of other keys.

>>> cache = BoundedCache(maxsize=2)
>>> cache.get_or_compute("a", lambda: 1), cache.get_or_compute("a", lambda: 2)
(1, 1)
>>> cache.put("b", 2); cache.put("c", 3); "a" in cache
False
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable
from itertools import repeat
from operator import is_
from typing import Generic, TypeVar

from .errors import InvalidInputError

__all__ = ["BoundedCache", "text_key", "require_count"]

K = TypeVar("K", bound=Hashable)
_MISSING = object()
V = TypeVar("V")


def text_key(text: str) -> str:
    """A compact key for a text: the hex sha256 of its UTF-8 bytes (lone surrogates kept
    as their escape, so every string has one)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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

    >>> cache = BoundedCache(maxsize=10, weigh=lambda key, text: len(text), max_weight=5)
    >>> cache.put("a", "abc"); cache.put("b", "de"); cache.put("c", "f"); ("a" in cache, cache.weight)
    (False, 3)
    >>> cache.put("d", "too long"); "d" in cache
    False
    """

    def __init__(self, maxsize: int = 10_000, *, weigh: Callable[[K, V], int] | None = None,
                 max_weight: int | None = None) -> None:
        self.maxsize = require_count(maxsize, "maxsize", "pass how many entries to keep")
        if (weigh is None) != (max_weight is None):
            raise InvalidInputError("pass weigh and max_weight together (or neither: a bound on entries alone)")
        self.max_weight = None if max_weight is None else require_count(max_weight, "max_weight", "pass the most weight to keep")
        self._weigh = weigh
        self._weights: dict[K, int] = {}
        self.weight = 0
        """The total weight of the entries kept (0 without ``weigh``)."""
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

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
        while len(data) > self.maxsize or self.weight > self.max_weight:
            key, _ = data.popitem(last=False)
            self.weight -= self._weights.pop(key)

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
        """Forget every entry."""
        with self._lock:
            self._data.clear()
            self._weights.clear()
            self.weight = 0
