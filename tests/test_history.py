"""TurnHistory's per-text work (docs/architecture.md#the-foundation): a text's anchors and
gate input are computed once per process, whatever object indexes it again, and indexing
from the cache gives exactly what indexing afresh gives."""

from __future__ import annotations

from typing import Any

import pytest

from context_gatekeeper import ContextGatekeeper
from context_gatekeeper.caching import BoundedCache
from context_gatekeeper.selection import history

TURNS = [
    ("How long should a Redis lock TTL be?", "Longer than the longest job, with a watchdog."),
    ("Which espresso grind suits a moka pot?", "Medium-fine, coarser than for espresso machines."),
    ("And the Redis lock watchdog: how often should it renew?", "Every third of the TTL."),
]


@pytest.fixture
def extractions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the history extracts anchors from (with empty per-text caches)."""
    seen: list[str] = []
    real = history.extract

    def counting(text: str, **kwargs: Any) -> Any:
        seen.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(history, "extract", counting)
    monkeypatch.setattr(history, "_anchors", BoundedCache(maxsize=1000))
    monkeypatch.setattr(history, "_gate_inputs", BoundedCache(maxsize=1000))
    return seen


def build() -> ContextGatekeeper:
    gk = ContextGatekeeper(token_budget=60, token_counter=len, message_overhead=0)
    for user, assistant in TURNS:
        gk.add_turn(user, assistant)
    return gk


def test_a_second_gatekeeper_on_the_same_texts_extracts_nothing(extractions: list[str]) -> None:
    first = build()
    # user, answer, and the user text as the gate reads it where that differs: only the
    # third user text holds a cue ("it"); the others' gate input is their own anchors
    assert len(extractions) == 2 * len(TURNS) + 1
    extractions.clear()
    second = build()
    assert extractions == []
    assert second._history.index.snapshot() == first._history.index.snapshot()
    assert second._history.labels == first._history.labels
    query = "Redis watchdog renew"
    assert second.explain(query).turn_ids == first.explain(query).turn_ids


def test_a_changed_text_is_extracted_again(extractions: list[str]) -> None:
    gk = build()
    extractions.clear()
    gk.replace_turn(gk.turns[1].id, "Which grind for a French press?", "Coarse.")
    assert sorted(extractions) == sorted(["Which grind for a French press?", "Coarse."])
    gk.replace_turn(gk.turns[1].id, "Is it fine for a French press?", "Coarse.")
    assert extractions[2:] == ["Is it fine for a French press?", "Is   fine for a French press?"]  # the cue blanked


@pytest.mark.parametrize(
    "user",
    [
        "How long should a Redis lock TTL be?",  # no cue: the document anchors serve
        "Is it thread-safe, and what about asyncio.gather?",  # cues blanked out
        "Redis 锁续租为什么会脑裂？",  # Chinese: query mode keeps fewer single characters
        "“quoted” Ｆｕｌｌ-width ＴＴＬ 2024 v1.2",  # NFKC, a version and a number
        "lock " * 900 + "watchdog",  # beyond max_query_chars (4000): cut
    ],
)
def test_the_gate_input_is_the_query_mode_anchors_of_the_text_without_cues(user: str) -> None:
    max_chars = ContextGatekeeper().params.max_query_chars
    history._gate_inputs.clear()
    anchors, cues = history._gate_input(user, max_chars, "key", history.extract(user))
    cues_found, content = history.strip_cues(user[:max_chars])
    assert (anchors, cues) == (tuple(history.extract(content, query=True).counts), cues_found)


def test_a_cache_evicts_beyond_its_bound(monkeypatch: pytest.MonkeyPatch, extractions: list[str]) -> None:
    monkeypatch.setattr(history, "_anchors", BoundedCache(maxsize=2))
    build()
    assert len(history._anchors) == 2


@pytest.fixture
def labelled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions segmentation computes a label for (with an empty label cache)."""
    seen: list[int] = []
    real = history.next_label

    def counting(labels: Any, turns: Any, position: int, df: Any, params: Any, *more: Any) -> Any:
        seen.append(position)
        return real(labels, turns, position, df, params, *more)

    monkeypatch.setattr(history, "next_label", counting)
    monkeypatch.setattr(history, "_labels", BoundedCache(maxsize=1000))
    return seen


def labels_from_scratch(gk: ContextGatekeeper, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The labels a gatekeeper with nothing cached gives the same turns."""
    with monkeypatch.context() as m:
        m.setattr(history, "_labels", BoundedCache(maxsize=1000))
        fresh = ContextGatekeeper(token_budget=60, token_counter=len, message_overhead=0, params=gk.params)
        for turn in gk.turns:
            fresh.add_turn(turn.user, turn.assistant, tool_texts=turn.tool_texts)
        return list(fresh._history.labels)


def test_the_same_turns_in_the_same_order_are_segmented_once(labelled: list[int]) -> None:
    first = build()
    assert labelled == list(range(len(TURNS)))
    labelled.clear()
    second = build()
    assert labelled == []
    assert second._history.labels == first._history.labels and second._history.novelty == first._history.novelty


def test_a_change_segments_again_from_where_the_turns_differ(
    labelled: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    gk = build()
    gk.add_turn("Back to espresso: how fine for a V60?", "Medium, like sand.")
    labelled.clear()
    removed = gk.remove_turn(gk.turns[1].id)
    assert labelled == [1, 2]  # the turns after the removed one follow other turns now
    assert gk._history.labels == labels_from_scratch(gk, monkeypatch)
    labelled.clear()
    gk.insert_turn(gk.turns[0].id, removed.user, removed.assistant)
    assert labelled == []  # the same turns as before the removal: every label is known
    assert gk._history.labels == labels_from_scratch(gk, monkeypatch)


def test_other_parameters_are_segmented_anew(labelled: list[int]) -> None:
    first = build()
    labelled.clear()
    other = ContextGatekeeper(token_budget=60, token_counter=len, message_overhead=0,
                              params=first.params.with_(topic_window=first.params.topic_window + 1))
    for user, assistant in TURNS:
        other.add_turn(user, assistant)
    assert labelled == list(range(len(TURNS)))


def test_kept_topic_profiles_are_what_a_fresh_computation_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiles the query gate reads and the next appended turn is segmented with are
    kept once; after appends, inserts, replaces, removes and new parameters, every position's
    profiles are still what topic_profiles computes from the labels and turns at that time."""
    from dataclasses import replace as with_changes

    from context_gatekeeper.selection.segments import topic_profiles

    monkeypatch.setattr(history, "_labels", BoundedCache(maxsize=1000))  # segmentation runs, not the label cache
    computed: list[int] = []
    real = history.topic_profiles
    monkeypatch.setattr(history, "topic_profiles", lambda *a: computed.append(a[2]) or real(*a))
    gk = ContextGatekeeper(token_budget=200)
    h = gk._history

    def check() -> None:
        p = h.params
        for end in range(len(h), -1, -1):  # the kept end first
            assert h.profiles_before(end) == topic_profiles(
                h.labels, h.by_position, end, p.topic_lookback, p.topic_window, p.topic_decay), end

    words = ["redis lock ttl", "espresso grind", "postgres vacuum", "redis watchdog", "espresso beans"]
    ids = [gk.add_turn(f"question about {w} {i}?", f"answer on {w}") for i, w in enumerate(words * 3)]
    gk.explain("and the redis lock?")
    computed.clear()
    gk.add_turn("more on the redis lock ttl?", "renew it")  # segmented with the profiles the query gate kept
    assert len(h) not in computed and len(h) - 1 not in computed, computed
    check()
    gk.insert_turn(ids[3], "a word on espresso?", "fine grind")
    gk.replace_turn(ids[6], "postgres autovacuum now?", "tune it")
    gk.remove_turn(ids[1])
    check()
    h.profiles_before(len(h))  # kept for the latest position
    h.params = with_changes(h.params, topic_window=1, topic_decay=0.25)  # other parameters: the kept profiles are not theirs
    check()
