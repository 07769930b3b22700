"""Topics and segments: a pure function of the turn list, each turn gated against the topics before it."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_gatekeeper.selection.anchors import extract
from context_gatekeeper.selection.cues import find_cues, strip_cues
from context_gatekeeper.selection.params import SelectionParams
from context_gatekeeper.selection.segments import (
    SegmentInput,
    affinity,
    best_other_topic,
    next_label,
    segment_all,
    topic_profiles,
)

P = SelectionParams()


def turn(user: str, assistant: str = "") -> SegmentInput:
    """The segmentation input of one turn, built as the gatekeeper builds it."""
    anchors = frozenset(extract(user).counts) | frozenset(extract(assistant).counts)
    cues, content = strip_cues(user)
    answered = len(anchors) > len(frozenset(extract(user).counts))
    return SegmentInput(tuple(extract(content, query=True).counts), cues, anchors, answered)


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
    "The lock expires and another client may acquire the lock.",
)
MOKA = turn(
    "How much coffee goes into a moka pot?",
    "Fill the moka basket level with medium-fine coffee, about 15 g, and do not tamp it.",
)
MOKA_FOLLOW = turn(
    "Should the moka pot bottom chamber get hot water?",
    "Yes: hot water in the bottom chamber keeps the moka pot from cooking the coffee.",
)


# -- topic_profiles, affinity, best_other_topic ---------------------------------------------------------


def test_a_topic_fades_with_its_own_turns_not_with_the_turns_between():
    turns = [bare("a"), bare("x"), bare("b"), bare("y"), bare("c")]
    labels = [0, 1, 0, 1, 0]
    profiles = topic_profiles(labels, turns, end=5, lookback=10, size=4, decay=0.5)
    # topic 0: c is its latest turn, b the one before (two positions back), a the third.
    assert profiles == {0: {"c": 1.0, "b": 0.5, "a": 0.25}, 1: {"y": 1.0, "x": 0.5}}


def test_profiles_keep_the_most_recent_strength_and_at_most_size_turns():
    turns = [bare("a"), bare("old"), bare("a")]
    assert topic_profiles([0, 0, 0], turns, end=3, lookback=10, size=2, decay=0.1) == {0: {"a": 1.0, "old": 0.1}}


def test_profiles_see_only_the_lookback_before_end():
    turns = [bare("a"), bare("b"), bare("later")]
    assert topic_profiles([0, 1, 2], turns, end=2, lookback=1, size=4, decay=0.5) == {1: {"b": 1.0}}
    assert topic_profiles([0, 1, 2], turns, end=0, lookback=4, size=4, decay=0.5) == {}


def test_affinity_by_hand():
    assert affinity({"a": 2.0, "b": 1.0}, {"a": 0.5}, 3.0) == pytest.approx(1.0 / 3.0)
    assert affinity({}, {"a": 1.0}, 0.0) == 0.0


def test_best_other_topic_skips_the_active_one():
    profiles = {0: {"a": 1.0}, 1: {"b": 1.0}, 2: {"a": 0.5}}
    assert best_other_topic(profiles, 0, {"a": 1.0, "b": 1.0}) == (2, 0.25) or best_other_topic(
        profiles, 0, {"a": 1.0, "b": 1.0}
    ) == (1, 0.5)
    assert best_other_topic(profiles, 0, {"a": 1.0, "b": 1.0}) == (1, 0.5)
    assert best_other_topic({0: {"a": 1.0}}, 0, {"a": 1.0}) is None


# -- segment_all on hand-made conversations -------------------------------------------------------


def test_empty_and_single_turn():
    assert segment_all([], P) == ([], [])
    assert segment_all([REDIS], P) == ([0], [0.0])


def test_interleaved_topics_give_four_runs_of_two_recurring_topics():
    labels, _ = segment_all([REDIS, MOKA, REDIS_FOLLOW, MOKA_FOLLOW], P)
    # a topic's label is the position of the turn that opened it
    assert labels == [0, 1, 0, 1]


def test_explicit_switch_cue_starts_a_topic_and_a_reference_follow_up_stays():
    turns = [
        REDIS,
        REDIS_FOLLOW,
        turn("By the way, how do I bake sourdough bread at home?", "Feed the starter, mix flour and water, bake hot."),
        turn("What flour does it need?", "Bread flour with high protein works best."),
    ]
    labels, novelty = segment_all(turns, P)
    assert labels == [0, 0, 2, 2]
    # "What flour does it need?": flour was in the answer before; nothing new.
    assert novelty[3] == 0


def test_an_answered_exchange_no_recent_topic_holds_opens_a_topic_without_a_cue():
    turns = [REDIS, REDIS_FOLLOW, turn("How do I bake sourdough bread at home?", "Feed the starter, bake it hot.")]
    labels, novelty = segment_all(turns, P)
    assert novelty[2] == pytest.approx(4 * unseen_idf(2))  # bake, sourdough, bread, home
    assert labels == [0, 0, 2]


def test_an_unanswered_message_with_modest_new_content_keeps_its_topic():
    # Without an answer the topic is read from the user's words alone: four unseen words
    # are modest new content, and the switch score reads a new angle, not a new topic.
    turns = [REDIS, REDIS_FOLLOW, turn("How do I bake sourdough bread at home?")]
    labels, novelty = segment_all(turns, P)
    assert novelty[2] == pytest.approx(4 * unseen_idf(2))
    assert labels == [0, 0, 0]


def test_a_lot_of_new_content_switches_without_a_cue_or_an_answer():
    turns = [REDIS, REDIS_FOLLOW, turn("How do I bake sourdough bread with rye flour at home?")]
    labels, novelty = segment_all(turns, P)
    assert novelty[2] == pytest.approx(6 * unseen_idf(2))
    assert labels == [0, 0, 2]


def test_a_reference_cue_yields_to_a_lot_of_new_content():
    text = "Can it bake sourdough bread with rye flour at home?"
    assert strip_cues(text)[0].reference
    labels, novelty = segment_all([REDIS, REDIS_FOLLOW, turn(text)], P)
    assert novelty[2] == pytest.approx(6 * unseen_idf(2))  # "it" is a cue, not content
    assert labels == [0, 0, 2]


def test_return_cue_goes_back_to_the_earlier_topic():
    turns = [
        REDIS,
        REDIS_FOLLOW,
        turn("By the way, how do I bake sourdough bread at home?", "Feed the starter and bake hot."),
        turn("Back to the Redis lock: what TTL for the watchdog?", "About three times the renewal interval."),
    ]
    labels, _ = segment_all(turns, P)
    assert labels == [0, 0, 2, 0]


def test_cue_words_are_not_content():
    turns = [REDIS, MOKA, turn("Back to the moka pot: is a finer grind better?", "Medium-fine; too fine clogs the moka.")]
    assert "back" not in turns[2].user
    assert segment_all(turns, P)[0] == [0, 1, 1]


def test_labels_do_not_depend_on_later_turns():
    turns = [REDIS, MOKA, REDIS_FOLLOW, turn("By the way, how do I bake bread?"), turn("What flour does it need?")]
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
    turns = _three_turns()
    labels = [0, 1]
    # With the true counts, redis / lock / ttl were seen in topic 0: the third turn returns there.
    true_df = Counter(turns[0].anchors | turns[1].anchors).__getitem__
    label, new_weight = next_label(labels, turns, 2, true_df, P)
    assert label == 0
    assert new_weight == pytest.approx(unseen_idf(2))  # only watchdog is new
    # Told that nothing was seen, the same words count as new content (the profiles,
    # built from the turns themselves, still find topic 0).
    label, new_weight = next_label(labels, turns, 2, lambda a: 0, P)
    assert label == 0
    assert new_weight == pytest.approx(4 * unseen_idf(2))


def test_next_label_asks_df_only_about_the_turn_and_reads_no_later_turn():
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
    assert asked and set(asked) <= set(turns[2].user) | turns[2].anchors


def test_first_turn_is_segment_zero_whatever_it_says():
    assert next_label([], [turn("btw, back to it")], 0, lambda a: 99, P) == (0, 0.0)


def test_a_new_topic_is_labelled_with_its_own_position():
    turns = [bare("a"), bare("a"), turn("By the way, what about sourdough bread baking?")]
    assert next_label([0, 0], turns, 2, lambda a: 0, P)[0] == 2


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
def test_topics_are_prefix_stable_and_labelled_by_their_opening_turn(chosen):
    turns = [turn(u, a) for u, a in chosen]
    labels, novelty = segment_all(turns, P)
    assert len(labels) == len(novelty) == len(turns)
    if labels:
        assert labels[0] == 0
    for position, label in enumerate(labels):
        # a turn joins a topic opened before it, or opens one labelled with its position
        assert label == position or (label < position and labels[label] == label and label in labels[:position])
    assert all(n >= 0 for n in novelty)
    for k in range(len(turns)):
        assert segment_all(turns[:k], P) == (labels[:k], novelty[:k])


def test_a_reply_to_the_answers_question_keeps_its_topic_once_added_as_it_did_at_query_time():
    from context_gatekeeper import ContextGatekeeper

    gk = ContextGatekeeper(token_budget=2000)
    gk.add_turn("I'd like to learn an instrument as an adult.", "Great idea. Which instrument are you drawn to?")
    reply = "Maybe the cello, my grandmother played one"
    assert gk.explain(reply).decision == "continue" and gk.explain(reply).gate.asks
    gk.add_turn(reply)  # unanswered: the topic is read from the user's words and the question before
    assert gk.topics() == {0: (1, 2)}
    assert not gk.explain("Which strings are best for a beginner cello?").gate.asks


def test_features_built_at_once_equal_the_constructors() -> None:
    """The gate builds its features by writing their fields at once, skipping the frozen
    ``__init__``: only right while ``GateFeatures`` has no ``__post_init__`` (a check added
    there would be skipped), and the result must equal the constructor's, unnamed fields at
    their defaults."""
    import dataclasses

    from context_gatekeeper.selection.cues import Cues
    from context_gatekeeper.selection.gate import GateFeatures, _features

    assert not hasattr(GateFeatures, "__post_init__")
    values = {"overlap": 0.25, "new_anchor_ratio": 0.5, "elsewhere_ratio": 0.25, "new_weight": 1.5,
              "earlier_segment": 3, "earlier_overlap": 0.4, "cues": Cues(reference=("it",)), "query_weight": 2.0,
              "established": True, "history_turns": 7, "asks": True, "contributions": (("bias", -1.0),)}
    built = _features(values)
    expected = GateFeatures(**values)  # type: ignore[arg-type]
    assert built == expected and repr(built) == repr(expected) and hash(built) == hash(expected)
    assert list(vars(built)) == [f.name for f in dataclasses.fields(GateFeatures)]
    assert type(built) is GateFeatures and built.closes is False and built.semantic_contributions == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.overlap = 1.0  # type: ignore[misc]


_names = st.sampled_from(["lock", "redis", "ttl", "锁", "脑裂", "#3.11", "`ttl`", "the"])


@given(
    user=st.lists(_names, max_size=6),
    anchors=st.frozensets(_names),
    counts=st.dictionaries(_names, st.integers(0, 9)),
    extra=st.frozensets(_names, max_size=2),
)
def test_user_weights_read_from_the_turns_weights_equal_the_formula(user, anchors, counts, extra):
    """A user text's weights taken from its turn's (where the turn holds them all, or only
    some) are those anchor_weights gives the user's anchors, in order, stopwords left out."""
    from context_gatekeeper.selection.gate import anchor_weights
    from context_gatekeeper.selection.cues import Cues
    from context_gatekeeper.selection.segments import _user_weights

    params = SelectionParams(extra_stopwords=extra)
    df = lambda a: counts.get(a, 0)  # noqa: E731
    turn = SegmentInput(tuple(user), Cues(), anchors)
    whole = anchor_weights(anchors, df, 5, params)
    expected = anchor_weights(user, df, 5, params)
    assert list(_user_weights(turn, whole, df, 5, params).items()) == list(expected.items())


ALTERNATING = [("How long should a Redis lock TTL be?", "Longer than the longest job holding the lock."),
               ("Best espresso grind for a moka pot?", "Medium fine, a little coarser than espresso."),
               ("How should the Redis lock renewal watchdog work?", "Extend the lock TTL from a watchdog thread."),
               ("Which beans for a moka pot?", "A medium roast works well.")]


@pytest.mark.parametrize("boilerplate", ["", " I hope this helps! Feel free to ask if anything is unclear.",
                                         "\n\nLet me know if anything is unclear, I am happy to elaborate."])
def test_an_assistants_repeated_boilerplate_ties_no_topics_together(boilerplate: str) -> None:
    from context_gatekeeper import ContextGatekeeper

    gk = ContextGatekeeper(token_budget=3000)
    for user, answer in ALTERNATING:
        gk.add_turn(user, answer + boilerplate)
    assert gk.topics() == {0: (1, 3), 1: (2, 4)}
    assert gk.explain("What Redis lock TTL for a 30 second job?").turn_ids == (1, 3)


def test_voice_anchors_are_the_words_only_a_repeated_sentence_holds() -> None:
    from context_gatekeeper.selection.history import prepared_turn
    from context_gatekeeper.selection.segments import voice_anchors

    def segment(answer: str) -> SegmentInput:
        return prepared_turn("q", answer, (), P.max_query_chars).segment

    before = segment("Use a watchdog. I hope this helps!  Ask about Redis anytime.")
    now = segment("Moka pots need a medium grind. i hope THIS helps! Ask about Redis anytime.")
    # "redis" sits in a repeated sentence only; "hope"/"helps" too; "moka" is the answer's own
    assert voice_anchors(now, before) == frozenset(extract("I hope this helps! Ask about Redis anytime.").counts)
    again = segment("Redis is fine here. I hope this helps!")
    assert "redis" not in {a.lower() for a in voice_anchors(again, before)}  # also said in a sentence of its own
    assert voice_anchors(segment("Nothing repeats."), before) == frozenset()


def test_a_long_passage_repeated_is_content_not_voice() -> None:
    from context_gatekeeper.selection.history import prepared_turn
    from context_gatekeeper.selection.segments import VOICE_LONGEST, voice_anchors

    log = "ERROR replica lag exceeded on pg-standby-2 " + "while streaming WAL segment " * 12
    assert len(log) > VOICE_LONGEST
    before = prepared_turn("q", log + "\nI hope this helps!", (), P.max_query_chars).segment
    now = prepared_turn("q", log + "\nI hope this helps!", (), P.max_query_chars).segment
    voice = voice_anchors(now, before)
    assert voice and not voice & frozenset(extract(log).counts)  # the log's words stay the topic's


def test_voice_is_read_in_the_answers_own_case_and_sentences() -> None:
    from context_gatekeeper.selection.history import prepared_turn
    from context_gatekeeper.selection.segments import answer_sentences, voice_anchors

    assert answer_sentences("Use asyncio.gather here. Python 3.11 is fine!\n好的。谢谢！") == [
        "Use asyncio.gather here.", "Python 3.11 is fine!", "好的。", "谢谢！"]

    def segment(answer: str) -> SegmentInput:
        return prepared_turn("q", answer, (), P.max_query_chars).segment

    before = segment("Pick a user. I hope this helps the user!")
    now = segment("Call getUserName now. I hope this helps the user!")
    # "user" is in the repeated sentence and in the new one (getUserName's parts): the content's
    assert "user" not in voice_anchors(now, before) and "hop" in voice_anchors(now, before)
