"""The incremental inverted index: postings and totals stay consistent under add / remove."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper.selection.anchors import TextAnchors, extract
from context_gatekeeper.selection.index import AnchorIndex, IndexedTurn


def ta(*anchors: str) -> TextAnchors:
    return TextAnchors.of(anchors)


def expected_state(turns: dict[int, tuple[TextAnchors, TextAnchors]]):
    """The index state computed directly from the turns (the invariant of AnchorIndex)."""
    postings: dict[str, dict[int, tuple[int, int]]] = {}
    for turn_id, (user, assistant) in turns.items():
        for anchor in set(user.counts) | set(assistant.counts):
            postings.setdefault(anchor, {})[turn_id] = (user.counts[anchor], assistant.counts[anchor])
    return (
        postings,
        sum(u.length for u, _ in turns.values()),
        sum(a.length for _, a in turns.values()),
    )


def test_empty_index():
    index = AnchorIndex()
    assert len(index) == 0
    assert index.df("redis") == 0
    assert index.avg_user_len == index.avg_assistant_len == 0.0
    assert index.snapshot() == ({}, 0, 0)


def test_add_records_postings_per_side():
    index = AnchorIndex()
    turn = index.add(1, ta("redis", "lock", "redis"), ta("lock", "ttl"))
    assert isinstance(turn, IndexedTurn)
    assert turn.anchors == frozenset({"redis", "lock", "ttl"})
    assert (turn.user_len, turn.assistant_len) == (3, 2)
    assert index.postings == {
        "redis": {1: (2, 0)},
        "lock": {1: (1, 1)},
        "ttl": {1: (0, 1)},
    }
    assert index.turns[1] is turn
    assert (index.total_user_len, index.total_assistant_len) == (3, 2)


def test_large_term_counts_are_kept_exactly():
    index = AnchorIndex()
    index.add(1, ta(*["spam"] * 40), ta(*["spam"] * 17, "eggs"))
    assert index.postings["spam"][1] == (40, 17)
    assert index.postings["eggs"][1] == (0, 1)


def test_df_counts_turns_not_occurrences():
    index = AnchorIndex()
    index.add(1, ta("redis", "redis"), ta("redis"))
    index.add(2, ta("redis"), ta())
    index.add(3, ta("python"), ta())
    assert index.df("redis") == 2
    assert index.df("python") == 1
    assert index.df("go") == 0


def test_averages():
    index = AnchorIndex()
    index.add(1, ta("a", "b"), ta("c"))
    index.add(2, ta("a", "b", "c", "d"), ta("e", "f", "g"))
    assert len(index) == 2
    assert index.avg_user_len == 3.0
    assert index.avg_assistant_len == 2.0


def test_remove_updates_postings_and_totals():
    index = AnchorIndex()
    index.add(1, ta("redis", "lock"), ta("ttl"))
    index.add(2, ta("redis"), ta("python"))
    removed = index.remove(1)
    assert removed.anchors == frozenset({"redis", "lock", "ttl"})
    assert index.postings == {"redis": {2: (1, 0)}, "python": {2: (0, 1)}}
    assert (index.total_user_len, index.total_assistant_len) == (1, 1)
    assert index.df("redis") == 1
    assert 1 not in index.turns


def test_removing_the_last_posting_deletes_the_anchor():
    index = AnchorIndex()
    index.add(1, ta("lock"), ta())
    index.add(2, ta("lock", "fencing"), ta())
    index.remove(2)
    assert "fencing" not in index.postings  # no empty bucket left behind
    assert index.df("fencing") == 0
    index.remove(1)
    assert index.postings == {}
    assert index.snapshot() == ({}, 0, 0)


def test_double_add_raises_and_changes_nothing():
    index = AnchorIndex()
    index.add(1, ta("redis"), ta("lock"))
    before = index.snapshot()
    with pytest.raises(ValueError, match="already indexed"):
        index.add(1, ta("python"), ta())
    assert index.snapshot() == before
    assert index.df("python") == 0


def test_removing_an_unknown_turn_raises_and_changes_nothing():
    index = AnchorIndex()
    index.add(1, ta("redis"), ta())
    before = index.snapshot()
    with pytest.raises(KeyError):
        index.remove(7)
    assert index.snapshot() == before


def test_remove_then_add_again_restores_the_state():
    index = AnchorIndex()
    user, assistant = extract("How do I size a Redis lock TTL?"), extract("Longer than the longest job.")
    index.add(1, extract("asyncio.gather vs TaskGroup"), extract("TaskGroup cancels siblings."))
    index.add(2, user, assistant)
    before = index.snapshot()
    index.remove(2)
    index.add(2, user, assistant)
    assert index.snapshot() == before


def test_snapshot_is_a_copy():
    index = AnchorIndex()
    index.add(1, ta("redis"), ta())
    snap = index.snapshot()
    index.add(2, ta("redis"), ta())
    assert snap[0] == {"redis": {1: (1, 0)}}


VOCAB = ["redis", "lock", "ttl", "python", "锁", "脑裂", "#3.11", "`ttl`"]
side = st.lists(st.sampled_from(VOCAB), max_size=6).map(lambda xs: TextAnchors.of(xs))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 8), side, side),
        st.tuples(st.just("remove"), st.integers(1, 8)),
    ),
    max_size=30,
)


@given(ops)
def test_any_sequence_of_adds_and_removes_keeps_the_invariant(operations):
    index = AnchorIndex()
    model: dict[int, tuple[TextAnchors, TextAnchors]] = {}
    for op in operations:
        if op[0] == "add":
            _, turn_id, user, assistant = op
            if turn_id in model:
                with pytest.raises(ValueError):
                    index.add(turn_id, user, assistant)
                continue
            index.add(turn_id, user, assistant)
            model[turn_id] = (user, assistant)
        else:
            _, turn_id = op
            if turn_id not in model:
                continue
            index.remove(turn_id)
            del model[turn_id]
        assert index.snapshot() == expected_state(model)
        assert len(index) == len(model)
        for anchor in VOCAB:
            holders = sum(1 for u, a in model.values() if anchor in u.counts or anchor in a.counts)
            assert index.df(anchor) == holders
        assert all(bucket for bucket in index.postings.values())


@given(st.lists(st.tuples(side, side), max_size=8), st.permutations(range(8)))
def test_state_does_not_depend_on_insertion_order(turns, order):
    forward, shuffled = AnchorIndex(), AnchorIndex()
    for turn_id, (user, assistant) in enumerate(turns):
        forward.add(turn_id, user, assistant)
    for turn_id in order:
        if turn_id < len(turns):
            shuffled.add(turn_id, *turns[turn_id])
    assert forward.snapshot() == shuffled.snapshot()
    assert forward.turns == shuffled.turns
