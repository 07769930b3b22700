"""Topic segments: a pure function of the turn list, each turn gated against what came before."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_gatekeeper.anchors import extract, normalise
from context_gatekeeper.cues import find_cues
from context_gatekeeper.params import SelectionParams
from context_gatekeeper.segments import SegmentInput, next_label, segment_all, topic_window

P = SelectionParams()


def turn(user: str, assistant: str = "") -> SegmentInput:
    """The segmentation input of one turn, built as the gatekeeper builds it."""
    anchors = frozenset(extract(user).counts) | frozenset(extract(assistant).counts)
    return SegmentInput(tuple(extract(user, query=True).counts), find_cues(normalise(user)), anchors)


def bare(*anchors: str, user: tuple[str, ...] = ()) -> SegmentInput:
    return SegmentInput(user, find_cues(""), frozenset(anchors))


def unseen_idf(position: int) -> float:
    """BM25 IDF of an anchor no earlier turn holds, at ``position`` (docs = position + prior)."""
    docs = position + P.idf_prior_docs
    return math.log(1 + (docs + 0.5) / 0.5)


REDIS = turn(
    "How should I size the Redis lock TTL for long jobs?",
    "Make the TTL longer than the longest job and renew the lock with a watchdog.",
)
REDIS_FOLLOW = turn(
    "And what happens when the watchdog renewal fails?",
    "The lock expires and another client may acquire it.",
)


# -- topic_window -----------------------------------------------------------------------------------


def test_topic_window_strength_decays_with_each_turn_back():
    turns = [bare("a"), bare("b"), bare("c", "a"), bare("d")]
    topic = topic_window(turns, end=4, size=3, decay=0.5)
    # d is in the last turn; c and a in the one before; b two back; the first turn is outside the window.
    assert topic == {"d": 1.0, "c": 0.5, "a": 0.5, "b": 0.25}


def test_topic_window_keeps_the_most_recent_strength():
    turns = [bare("a"), bare("a")]
    assert topic_window(turns, end=2, size=4, decay=0.1) == {"a": 1.0}


def test_topic_window_ends_before_end():
    turns = [bare("a"), bare("b"), bare("later")]
    assert topic_window(turns, end=2, size=4, decay=0.5) == {"b": 1.0, "a": 0.5}
    assert topic_window(turns, end=0, size=4, decay=0.5) == {}


# -- segment_all on hand-made conversations -------------------------------------------------------


def test_empty_and_single_turn():
    assert segment_all([], P) == ([], [])
    assert segment_all([REDIS], P) == ([0], [0.0])


def test_explicit_switch_cue_starts_a_segment_and_a_reference_follow_up_stays():
    turns = [
        REDIS,
        REDIS_FOLLOW,
        turn("By the way, how do I bake sourdough bread at home?", "Feed the starter, mix flour and water, bake hot."),
        turn("What flour does it need?", "Bread flour with high protein works best."),
    ]
    labels, novelty = segment_all(turns, P)
    assert labels == [0, 0, 1, 1]
    # "What flour does it need?": flour was in the answer before; nothing new.
    assert novelty[3] == 0


def test_modest_new_content_without_a_cue_is_a_weak_switch():
    # bake, sourdough, bread, home: four unseen words (how/do/I/at are stopwords).
    turns = [REDIS, REDIS_FOLLOW, turn("How do I bake sourdough bread at home?", "Feed the starter.")]
    labels, novelty = segment_all(turns, P)
    assert novelty[2] == pytest.approx(4 * unseen_idf(2))
    assert novelty[2] < P.weak_switch_factor * P.switch_min_new_weight
    assert labels == [0, 0, 0]


def test_a_lot_of_new_content_switches_without_a_cue():
    # bake, sourdough, bread, rye, flour, home: six unseen words, a strong switch.
    turns = [REDIS, REDIS_FOLLOW, turn("How do I bake sourdough bread with rye flour at home?", "Feed the starter.")]
    labels, novelty = segment_all(turns, P)
    assert novelty[2] == pytest.approx(6 * unseen_idf(2))
    assert novelty[2] >= P.weak_switch_factor * P.switch_min_new_weight
    assert labels == [0, 0, 1]


def test_a_reference_cue_yields_to_a_lot_of_new_content():
    # Six unseen words (about 19.5 IDF units) exceed reference_override * switch_min_new_weight.
    text = "Can it bake sourdough bread with rye flour at home?"
    assert find_cues(normalise(text)).reference
    labels, novelty = segment_all([REDIS, REDIS_FOLLOW, turn(text)], P)
    assert novelty[2] >= P.reference_override * P.switch_min_new_weight
    assert labels == [0, 0, 1]


BREAD = [
    turn("By the way, how do I bake sourdough bread at home?", "Feed the starter, mix flour and water, bake hot."),
    turn("How long should the dough proof?", "Overnight in the fridge."),
    turn("Which flour works best for the crust?", "Bread flour with high protein."),
    turn("What oven temperature for the loaf?", "Very hot, with steam at first."),
]


def test_a_reference_cue_keeps_a_follow_up_in_the_segment():
    # After four bread turns the Redis words lie outside the topic window.  Without a cue the
    # query mostly matches the earlier topic (a return: a new segment); with "it" it continues.
    base = [REDIS, REDIS_FOLLOW, *BREAD]
    plain = segment_all([*base, turn("Is the lock TTL renewal safe?")], P)[0]
    cued = segment_all([*base, turn("Is the lock TTL renewal safe with it?")], P)[0]
    assert plain[:-1] == cued[:-1] == [0, 0, 1, 1, 1, 1]
    assert plain[-1] == 2
    assert cued[-1] == 1


def test_return_cue_to_an_earlier_topic_starts_a_segment():
    turns = [
        REDIS,
        REDIS_FOLLOW,
        turn("By the way, how do I bake sourdough bread at home?", "Feed the starter and bake hot."),
        turn("Back to the Redis lock: what TTL for the watchdog?", "About three times the renewal interval."),
    ]
    labels, _ = segment_all(turns, P)
    assert labels == [0, 0, 1, 2]


def test_labels_do_not_depend_on_later_turns():
    turns = [REDIS, REDIS_FOLLOW, turn("By the way, how do I bake bread?"), turn("What flour does it need?")]
    full = segment_all(turns, P)
    for k in range(len(turns) + 1):
        assert segment_all(turns[:k], P) == (full[0][:k], full[1][:k])


# -- next_label uses only what it is given --------------------------------------------------------


def _three_turns() -> list[SegmentInput]:
    return [
        bare("redis", "lock", "ttl"),
        bare("python", "asyncio", user=("python", "asyncio")),
        bare("redis", "lock", "ttl", "watchdog", user=("redis", "lock", "ttl", "watchdog")),
    ]


def test_next_label_uses_the_df_it_is_given():
    p = P.with_(topic_window=1)  # the active topic is turn 1 only
    turns = _three_turns()
    labels = [0, 0]
    # With the true counts, redis / lock / ttl were seen (in turn 0, outside the topic):
    # 3 of 4 equal-ish weights seen elsewhere -> a return, so a new segment; only watchdog is new.
    true_df = Counter(turns[0].anchors | turns[1].anchors).__getitem__
    label, new_weight = next_label(labels, turns, 2, true_df, p)
    assert label == 1
    assert new_weight == pytest.approx(unseen_idf(2))
    # Told that nothing was seen, the same query is all new but modest: a weak switch, same segment.
    label, new_weight = next_label(labels, turns, 2, lambda a: 0, p)
    assert label == 0
    assert new_weight == pytest.approx(4 * unseen_idf(2))


def test_next_label_asks_df_only_about_the_query_and_reads_no_later_turn():
    turns = _three_turns()

    class Prefix(list):
        def __getitem__(self, i):
            assert isinstance(i, int) and 0 <= i <= 2, "read a turn after the gated one"
            return list.__getitem__(self, i)

    asked: list[str] = []

    def df(anchor: str) -> int:
        asked.append(anchor)
        return 1 if anchor in turns[0].anchors else 0

    next_label([0, 0], Prefix([*turns, bare("later", user=("later",))]), 2, df, P)
    assert asked and set(asked) <= set(turns[2].user)


def test_first_turn_is_segment_zero_whatever_it_says():
    assert next_label([], [turn("btw, back to it")], 0, lambda a: 99, P) == (0, 0.0)


def test_next_label_continues_from_the_previous_label():
    turns = [bare("a"), bare("a"), turn("By the way, what about sourdough bread baking?")]
    assert next_label([4, 4], turns, 2, lambda a: 0, P)[0] == 5


# -- properties -------------------------------------------------------------------------------------

SENTENCES = [
    ("How should I size the Redis lock TTL?", "Longer than the longest job."),
    ("What happens if the watchdog fails?", "The lock expires."),
    ("By the way, what is a Python TaskGroup?", "An asyncio task scope."),
    ("Does it cancel sibling tasks?", "Yes, on the first failure."),
    ("Back to Redis: what about fencing tokens?", "Use a monotonically increasing token."),
    ("换个话题，北京有什么好吃的？", "烤鸭和炸酱面。"),
    ("这个烤鸭在哪里吃？", "全聚德。"),
    ("回到分布式锁，续租失败怎么办？", "锁会过期。"),
    ("ok", ""),
    ("Recommend some Iceland travel itineraries for hiking glaciers volcanoes", "Ring road, ten days."),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(SENTENCES), max_size=10))
def test_segments_are_prefix_stable_and_numbered_in_order(chosen):
    turns = [turn(u, a) for u, a in chosen]
    labels, novelty = segment_all(turns, P)
    assert len(labels) == len(novelty) == len(turns)
    if labels:
        assert labels[0] == 0
    assert all(b - a in (0, 1) for a, b in zip(labels, labels[1:]))
    assert all(n >= 0 for n in novelty)
    for k in range(len(turns)):
        assert segment_all(turns[:k], P) == (labels[:k], novelty[:k])
