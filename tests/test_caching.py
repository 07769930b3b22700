"""The one bounded cache: least recently used out first, thread-safe, compute outside the lock."""

from __future__ import annotations

import threading

import pytest

from context_gatekeeper.caching import BoundedCache, text_key
from context_gatekeeper.errors import InvalidInputError


def test_the_least_recently_used_entry_goes_first():
    cache: BoundedCache[str, int] = BoundedCache(maxsize=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3 and len(cache) == 2


def test_get_many_looks_up_a_list_at_once_and_refreshes_what_it_finds():
    cache: BoundedCache[str, int] = BoundedCache(maxsize=3)
    cache.put_many([("a", 1), ("b", 2), ("c", 3)])
    assert cache.get_many(["a", "x", "b"]) == [1, None, 2] and (cache.hits, cache.misses) == (2, 1)
    cache.put("d", 4)  # "c" is now the least recently used: "a" and "b" were just read
    assert "c" not in cache and cache.get_many(["a", "b", "d"]) == [1, 2, 4]


def test_get_many_is_get_for_each_key_in_order_found_or_not():
    """``get_many`` (whose all-found case touches keys without a Python step per key) leaves
    the cache exactly as ``get`` key by key would: the same values, order of recency and
    counts, for values that are falsy, None, or compare oddly (an object equal to all)."""
    import random

    class EqualToAll:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    rng = random.Random(5)
    values = [0, None, frozenset(), EqualToAll(), "v", (1, 2)]
    for _ in range(300):
        fast: BoundedCache[int, object] = BoundedCache(maxsize=6)
        slow: BoundedCache[int, object] = BoundedCache(maxsize=6)
        for _ in range(rng.randrange(9)):
            item = (rng.randrange(8), rng.choice(values))
            fast.put(*item)
            slow.put(*item)
        keys = [rng.randrange(8) for _ in range(rng.randrange(1, 7))]
        got, expected = fast.get_many(keys), [slow.get(k) for k in keys]
        assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected))
        assert list(fast._data) == list(slow._data) and all(fast._data[k] is slow._data[k] for k in slow._data)
        assert (fast.hits, fast.misses) == (slow.hits, slow.misses)


def test_a_weighed_cache_keeps_at_most_its_weight_least_recent_out_first():
    cache: BoundedCache[str, str] = BoundedCache(maxsize=10, weigh=lambda key, text: len(text), max_weight=6)
    cache.put_many([("a", "xx"), ("b", "yy"), ("c", "zz")])
    assert cache.get("a") == "xx" and cache.weight == 6  # "b" is now the least recently used
    cache.put("d", "w")
    assert "b" not in cache and list(cache._data) == ["c", "a", "d"] and cache.weight == 5
    cache.put("a", "x")  # a key put again weighs its new value only
    assert cache.weight == 4
    cache.discard("c")
    assert cache.weight == 2 and len(cache) == 2
    cache.clear()
    assert cache.weight == 0 and len(cache) == 0


def test_an_entry_heavier_than_the_whole_cache_is_computed_but_not_kept():
    cache: BoundedCache[str, str] = BoundedCache(maxsize=10, weigh=lambda key, text: len(text), max_weight=4)
    cache.put("small", "ab")
    assert cache.get_or_compute("big", lambda: "abcdef") == "abcdef"
    assert "big" not in cache and cache.get("small") == "ab" and cache.weight == 2
    cache.put("small", "abcdef")  # replaced by a value too heavy to keep: the old one goes too
    assert "small" not in cache and cache.weight == 0


@pytest.mark.parametrize("arguments", [{"weigh": len}, {"max_weight": 5}, {"weigh": len, "max_weight": 0}])
def test_a_weight_bound_needs_both_a_weigh_function_and_a_positive_weight(arguments):
    with pytest.raises(InvalidInputError):
        BoundedCache(maxsize=3, **arguments)


def test_get_or_compute_computes_once_per_key_and_counts():
    cache: BoundedCache[str, int] = BoundedCache()
    calls = []
    for _ in range(3):
        assert cache.get_or_compute("k", lambda: calls.append(1) or 7) == 7
    assert calls == [1] and (cache.hits, cache.misses) == (2, 1)


def test_compute_runs_outside_the_lock():
    # a compute that reads the cache itself would deadlock if it ran under the lock
    cache: BoundedCache[str, int] = BoundedCache()
    cache.put("x", 1)
    assert cache.get_or_compute("y", lambda: (cache.get("x") or 0) + 1) == 2


def test_threads_share_one_cache_without_losing_entries():
    cache: BoundedCache[int, int] = BoundedCache(maxsize=10_000)
    barrier = threading.Barrier(4)

    def work(offset: int) -> None:
        barrier.wait()
        for i in range(500):
            cache.get_or_compute(offset * 1000 + i, lambda i=i: i)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 2000


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_a_bad_size_is_refused(bad):
    with pytest.raises(InvalidInputError, match="maxsize must be an int >= 1"):
        BoundedCache(maxsize=bad)


def test_text_keys_are_stable_and_take_any_string():
    assert text_key("abc") == text_key("abc") != text_key("abd")
    assert len(text_key("lone \udc80 surrogate")) == 64


class _Grows:
    """A value whose weight changes in place (a thread's index as its conversation grows)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = False


def _grows_cache(max_weight: int, maxsize: int = 10) -> BoundedCache[str, _Grows]:
    return BoundedCache(maxsize=maxsize, weigh=lambda key, value: value.size, max_weight=max_weight,
                        in_use=lambda value: value.busy)


def test_reweigh_follows_a_value_that_grew_in_place_and_evicts_the_least_recent_others():
    cache = _grows_cache(max_weight=10)
    a, b, c = _Grows(3), _Grows(3), _Grows(3)
    cache.put_many([("a", a), ("b", b), ("c", c)])
    a.size = 6
    assert cache.weight == 9  # a put weighs once: the growth is not seen until reweighed
    assert cache.reweigh("a", a)
    assert list(cache._data) == ["c", "a"] and cache.weight == 9  # "b", the least recent other, went
    a.size = 1
    assert cache.reweigh("a", a) and cache.weight == 4


def test_reweigh_keeps_the_entry_it_weighs_even_over_the_bound_until_another_put():
    cache = _grows_cache(max_weight=10)
    a, b = _Grows(2), _Grows(2)
    cache.put_many([("a", a), ("b", b)])
    b.size = 12  # heavier than the whole cache: its caller is using it, so it stays for now
    assert cache.reweigh("b", b) and list(cache._data) == ["b"] and cache.weight == 12
    cache.put("c", _Grows(1))  # the next put evicts it (least recently used, not in use)
    assert list(cache._data) == ["c"] and cache.weight == 1


def test_reweigh_leaves_an_entry_replaced_or_dropped_meanwhile_alone():
    cache = _grows_cache(max_weight=10)
    old, new = _Grows(2), _Grows(3)
    cache.put("a", old)
    cache.put("a", new)
    old.size = 9
    assert not cache.reweigh("a", old) and cache.get("a") is new and cache.weight == 3
    cache.discard("a")
    assert not cache.reweigh("a", new) and "a" not in cache and cache.weight == 0


def test_eviction_passes_over_entries_in_use():
    cache = _grows_cache(max_weight=6, maxsize=3)
    a, b, c = _Grows(2), _Grows(2), _Grows(2)
    cache.put_many([("a", a), ("b", b), ("c", c)])
    a.busy = True  # a call holds "a": the least recently used, yet not evicted
    cache.put("d", _Grows(2))
    assert list(cache._data) == ["a", "c", "d"] and cache.weight == 6
    a.busy = b.busy = False
    c.busy = True
    cache.put("e", _Grows(4))  # over by count and weight: "a" and "d" go, "c" (in use) stays
    assert list(cache._data) == ["c", "e"] and cache.weight == 6


def test_in_use_needs_a_weight_bound():
    with pytest.raises(InvalidInputError, match="in_use"):
        BoundedCache(maxsize=3, in_use=lambda value: False)


def test_identity_keys_stand_for_an_object_without_keeping_it_alive():
    import gc
    import weakref

    class Counter:
        def __call__(self, text: str) -> int:
            return len(text)

        def count(self, text: str) -> int:
            return len(text)

    counter = Counter()
    key = BoundedCache.identity_key(counter)
    assert BoundedCache.identity_key(counter) == key and hash(key) == hash(BoundedCache.identity_key(counter))
    # a bound method is made anew at each read: its key is its object's and its function's
    assert BoundedCache.identity_key(counter.count) == BoundedCache.identity_key(counter.count) != key
    cache: BoundedCache[object, int] = BoundedCache()
    cache.put((key, text_key("hello")), 5)
    cache.put((BoundedCache.identity_key(counter.count), text_key("hello")), 5)
    alive = weakref.ref(counter)
    del counter
    gc.collect()
    assert alive() is None and len(cache) == 2  # the keys did not keep it
    later = [Counter() for _ in range(50)]  # some may take the dead one's address: never its key
    assert all(BoundedCache.identity_key(c) != key for c in later)


def test_identity_keys_of_objects_without_weak_references():
    value = ("cl100k_base", 1)  # hashable: keyed by itself (what has no weak reference is a value, or lives on)
    assert BoundedCache.identity_key(value) is value
    first, second = BoundedCache.identity_key([1]), BoundedCache.identity_key([1])  # unhashable, no weak reference
    assert first != second and hash(first) != hash(second)  # each a key of its own: never shared, nothing kept


def test_payload_chars_counts_the_strings_held_however_nested():
    from types import MappingProxyType

    from context_gatekeeper.caching import payload_chars

    value = ({"type": "image", "data": "x" * 100}, [b"yy", ("z",)], MappingProxyType({"k": "vvv"}), 7, None)
    assert payload_chars(value) == len("type") + len("image") + len("data") + 100 + 2 + 1 + 1 + 3
    assert payload_chars(None) == 0 and payload_chars("abc") == 3


def test_eviction_treats_the_key_none_as_any_other():
    cache = _grows_cache(max_weight=4, maxsize=2)
    cache.put(None, _Grows(2))  # a view's default thread is keyed None
    cache.put("b", _Grows(2))
    cache.put("c", _Grows(2))
    assert None not in cache and list(cache._data) == ["b", "c"]


def test_clear_all_forgets_a_purged_conversations_text_in_every_cache(tmp_path) -> None:
    """A purge drops the session's decoded revisions; the caches derived from its texts
    (prepared turns, anchors, token counts) keep them until :func:`caching.clear_all`."""
    from context_gatekeeper import Transcript
    from context_gatekeeper.caching import _CACHES, clear_all
    from context_gatekeeper.transcripts.transcript_gate import TranscriptGate

    secret = "my passport number is X1234567Q for the visa"

    def holding() -> list[object]:
        found = []
        for cache in list(_CACHES):
            with cache._lock:
                items = list(cache._data.items())
            found += [cache for key, value in items if secret in repr(key) or secret in repr(value)]
        return found

    transcript = Transcript("s", store=str(tmp_path / "chats.db"))
    transcript.append(user=secret, assistant="Noted: keep it safe.")
    TranscriptGate(transcript).select_messages("what was my passport number?")
    transcript.store.purge("s")
    transcript.close()
    assert holding()  # the derived caches still hold it (what clear_all is for)
    clear_all()
    assert holding() == []
