"""collector_paused: the cyclic collector is off inside a bulk block, back on after it
however it ends, and what the block created is left in the oldest generation."""

from __future__ import annotations

import gc

import pytest

from context_gatekeeper.stores.replica import collector_paused


def _in_generation(obj: object, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


def test_collector_paused_moves_what_the_block_made_to_the_oldest_generation() -> None:
    assert gc.isenabled()
    with collector_paused(True):
        assert not gc.isenabled()
        made = [[n] for n in range(3)]
    assert gc.isenabled()
    assert _in_generation(made, 2) and not _in_generation(made, 0)
    assert not gc.get_freeze_count()  # nothing left frozen


def test_collector_paused_false_changes_nothing() -> None:
    with collector_paused(False):
        assert gc.isenabled()
        made = [[1]]
        assert _in_generation(made, 0)


def test_collector_paused_switches_the_collector_back_on_after_an_error() -> None:
    with pytest.raises(RuntimeError), collector_paused(True):
        raise RuntimeError("boom")
    assert gc.isenabled() and not gc.get_freeze_count()


def test_collector_paused_nested_leaves_the_outer_block_in_charge() -> None:
    with collector_paused(True):
        with collector_paused(True):
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collector_paused_still_frees_cycles_at_a_full_collection() -> None:
    import weakref

    class Node:
        pass

    with collector_paused(True):
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        ref = weakref.ref(a)
        del a, b
    gc.collect()
    assert ref() is None


def test_collector_paused_keeps_what_the_application_froze_frozen() -> None:
    frozen = [[0]]
    gc.freeze()
    try:
        with collector_paused(True):
            made = [[1]]
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert _in_generation(made, 0)
        assert not any(_in_generation(frozen, generation) for generation in range(3))  # still frozen
    finally:
        gc.unfreeze()
