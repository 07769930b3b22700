"""TurnHistory's per-text work (docs/architecture.md#the-foundation): a text's anchors and
gate input are computed once per process, whatever object indexes it again, and indexing
from the cache gives exactly what indexing afresh gives."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper import ContextGatekeeper, InvalidInputError, InvalidTypeError
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
    monkeypatch.setattr(history, "_prepared", BoundedCache(maxsize=1000))
    return seen


def build() -> ContextGatekeeper:
    gk = ContextGatekeeper(token_budget=60, token_counter=len, message_overhead=0)
    for user, assistant in TURNS:
        gk.add_turn(user, assistant)
    return gk


def test_a_second_gatekeeper_on_the_same_texts_extracts_nothing(extractions: list[str]) -> None:
    first = build()
    # user and answer; the user text as the gate reads it only where blanking its cues could
    # change its anchors: the third holds a cue ("it"), but one with no anchor, so its gate
    # input is its own anchors, as the others' are
    assert len(extractions) == 2 * len(TURNS)
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
    gk.replace_turn(gk.turns[1].id, "Unrelated question: fine for a French press?", "Coarse.")
    # the cue blanked ("unrelated" has an anchor: the text without it is extracted too)
    assert extractions[2:] == ["Unrelated question: fine for a French press?", " : fine for a French press?"]


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


def test_prepared_turns_are_bounded_by_their_constant() -> None:
    assert history._prepared.maxsize == history.PREPARED_CACHE_SIZE


def test_the_process_wide_caches_are_bounded_by_the_size_of_what_they_hold() -> None:
    """A turn's prepared inputs weigh the characters of its texts, a text's anchors about their
    bytes: a few turns with long tool outputs cannot hold more memory than the bounds say."""
    assert history._prepared.max_weight == history.PREPARED_CACHE_CHARS
    assert history._anchors.max_weight == history.ANCHOR_CACHE_BYTES
    log = "\n".join(f"12:{i % 60:02d} INFO request {i} served by worker{i % 7}" for i in range(2000))
    key = (4000, "run the job", "done", (log,))
    assert history._characters(key, history.prepared_turn(*key[1:], 4000)) == len("run the job") + 4 + len(log)
    anchors = history.extract(log)
    assert history._anchor_bytes("k", anchors) == sum(map(len, anchors.counts)) + 64 * len(anchors.counts)


def test_a_turn_too_heavy_for_the_caches_is_prepared_alike_and_not_kept(
    monkeypatch: pytest.MonkeyPatch, extractions: list[str]
) -> None:
    monkeypatch.setattr(history, "_prepared", BoundedCache(maxsize=1000, weigh=history._characters, max_weight=500))
    monkeypatch.setattr(history, "_anchors", BoundedCache(maxsize=1000, weigh=history._anchor_bytes, max_weight=2000))
    log = " ".join(f"worker{i} served request{i}" for i in range(100))  # about 2,700 characters
    heavy = ContextGatekeeper(token_budget=4000, token_counter=len, message_overhead=0)
    heavy.add_turn("Why did the nightly job fail?", "The logs say:", tool_texts=(log,))
    heavy.add_turn(*TURNS[0])
    assert len(history._prepared) == 1 and history._prepared.weight <= 500  # the light turn alone
    assert history._anchors.weight <= 2000 and history.text_key(log) not in history._anchors
    with monkeypatch.context() as m:  # unbounded caches: the same state and selection
        m.setattr(history, "_prepared", BoundedCache(maxsize=1000))
        m.setattr(history, "_anchors", BoundedCache(maxsize=1000))
        fresh = ContextGatekeeper(token_budget=4000, token_counter=len, message_overhead=0)
        fresh.add_turn("Why did the nightly job fail?", "The logs say:", tool_texts=(log,))
        fresh.add_turn(*TURNS[0])
    assert heavy._history.index.snapshot() == fresh._history.index.snapshot()
    assert heavy.explain("which worker served request42?").turn_ids == fresh.explain("which worker served request42?").turn_ids


def test_prepared_turns_hold_at_most_their_bound(monkeypatch: pytest.MonkeyPatch, extractions: list[str]) -> None:
    monkeypatch.setattr(history, "_prepared", BoundedCache(maxsize=2))
    first = build()
    assert len(history._prepared) == 2
    second = build()  # the first turn was evicted: prepared again, to the same result
    assert second._history.index.snapshot() == first._history.index.snapshot()
    assert second._history.inputs == first._history.inputs


def test_a_prepared_turn_is_what_preparing_afresh_gives(monkeypatch: pytest.MonkeyPatch, extractions: list[str]) -> None:
    first = build()
    assert len(history._prepared) == len(TURNS)
    second = build()  # every turn from the cache: the same objects, the same index and inputs
    assert all(second._history.inputs[t] is first._history.inputs[t] for t in first._history.order)
    assert second._history.index.snapshot() == first._history.index.snapshot()
    monkeypatch.setattr(history, "_prepared", BoundedCache(maxsize=1000))
    monkeypatch.setattr(history, "_anchors", BoundedCache(maxsize=1000))
    monkeypatch.setattr(history, "_gate_inputs", BoundedCache(maxsize=1000))
    fresh = build()
    assert fresh._history.inputs == first._history.inputs
    assert fresh._history.index.snapshot() == first._history.index.snapshot()


def test_a_changed_text_is_not_served_a_stale_prepared_turn(extractions: list[str]) -> None:
    gk = build()
    turn_id = gk.turns[1].id
    before = gk._history.inputs[turn_id]
    gk.replace_turn(turn_id, "Which grind for a French press?", "Coarse, like sea salt.")
    after = gk._history.inputs[turn_id]
    assert after is not before and "press" in after.anchors and "moka" not in after.anchors
    assert gk._history.index.df("moka") == 0 and gk._history.index.df("press") == 1
    gk.replace_turn(turn_id, "Which espresso grind suits a moka pot?", "Coarse, like sea salt.")  # answer kept
    assert "moka" in gk._history.inputs[turn_id].anchors and "press" not in gk._history.inputs[turn_id].anchors


def test_prepared_turns_are_kept_per_query_length_limit(extractions: list[str]) -> None:
    user, assistant = TURNS[0]
    long_user = "Redis " * 50 + "watchdog"
    short, full = history.prepared_turn(long_user, assistant, (), 10), history.prepared_turn(long_user, assistant, (), 4000)
    assert short is not full and short.segment.user != full.segment.user
    assert history.prepared_turn(user, assistant, (), 4000) is history.prepared_turn(user, assistant, (), 4000)
    assert history.prepared_turn(user, assistant, ("a tool said watchdog",), 4000).postings.turn.anchors > (
        history.prepared_turn(user, assistant, (), 4000).postings.turn.anchors)


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


WORDS = ["redis", "lock", "ttl", "espresso", "grind", "moka", "postgres", "vacuum", "it", "by the way", "back to", "这个", "索引",
         "ok thanks", "好的", "shall I book it?"]  # acknowledgements, and an answer that asks


def _turns(min_size: int = 0) -> Any:
    """Turns of a few chat words, cues and Chinese terms (some empty on one side)."""
    from hypothesis import strategies as st

    text = st.builds(" ".join, st.lists(st.sampled_from(WORDS), max_size=5))
    return st.lists(st.tuples(text, text).filter(lambda t: (t[0] + t[1]).strip()), min_size=min_size, max_size=8)


def _state(gk: ContextGatekeeper) -> tuple[Any, ...]:
    h = gk._history
    return (list(h.order), dict(h.positions), dict(h.turns), dict(h.costs), h.total_cost, dict(h.inputs), list(h.labels),
            list(h.novelty), list(h.chain), h.index.snapshot(), dict(h.index.turns), h._next_id, set(h.changed or ()))


def test_turns_inserted_at_once_give_the_state_inserting_them_one_by_one_gives() -> None:
    """insert_turns is insert_turn turn after turn: the same ids, texts, costs, index, labels,
    novelty and chain, wherever the turns go (appended, at the start, in the middle)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from context_gatekeeper.selection.segments import segment_all

    @settings(max_examples=60, deadline=None)
    @given(_turns(), _turns(min_size=1), st.integers(0, 8))
    def check(before: list[tuple[str, str]], added: list[tuple[str, str]], at: int) -> None:
        at = min(at, len(before))
        states = []
        for at_once in (False, True):
            with pytest.MonkeyPatch.context() as m:  # nothing cached: both segment every turn themselves
                m.setattr(history, "_labels", BoundedCache(maxsize=1000))
                gk = ContextGatekeeper(token_budget=60, token_counter=len, message_overhead=0)
                gk._history.changed = set()
                ids = [gk.add_turn(u, a) for u, a in before]
                after = ids[at - 1] if at else None
                if at_once:
                    new = gk.insert_turns(after, added)
                else:
                    new = []
                    for u, a in added:
                        new.append(gk.insert_turn(after if not new else new[-1], u, a))
                states.append((new, _state(gk)))
                h = gk._history  # and both are the reference segmentation from scratch
                assert (h.labels, h.novelty) == segment_all([h.inputs[t] for t in h.order], h.params)
        assert states[0] == states[1]

    check()


def test_insert_turns_inserts_none_when_one_fails() -> None:
    def counter(text: str) -> int:
        return -1 if "decaf" in text else len(text)

    gk = ContextGatekeeper(token_budget=60, token_counter=counter, message_overhead=0)
    first = gk.add_turn("redis lock?", "a ttl")
    before = _state(gk)
    with pytest.raises(InvalidInputError, match="token counter"):
        gk.insert_turns(first, [("espresso grind?", "fine"), ("decaf beans?", "swiss water"), ("moka?", "medium")])
    assert _state(gk) == before
    with pytest.raises(InvalidTypeError):
        gk.insert_turns(None, ["just a string"])  # type: ignore[list-item]
    assert _state(gk) == before
    assert gk.insert_turns(None, [("moka?", "medium", ["tool says hot"])]) == [first + 1]
    assert [t.id for t in gk.turns] == [first + 1, first] and gk.turns[0].tool_texts == ("tool says hot",)


_PIECES = ["it", "It", "IT", "iT", "it's", "that", "tHat", "THey", "they", "by the way", "back to", "what about", "redis", "Redis",
           "lock", "ttlWatch", "HTTPServer", "x.it", "it.x", "a->it", "it::b", "_it", "\"it\"", "`it`", "v1.2", "42", "v", "1.",
           "这个", "锁", " ", ", ", ". ", "? ", "'", "-", "\n"]


@given(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join), st.sampled_from([4000, 12]))
def test_the_gate_input_skips_extracting_again_only_where_the_blanked_cues_held_no_anchor(user: str, max_chars: int) -> None:
    """Where blanking the cues can change nothing the gate reads, the gate input is the text's
    own anchors (no second extraction); everywhere it is the query-mode anchors of the text
    without its cues, in order."""
    from context_gatekeeper.caching import text_key
    from context_gatekeeper.selection.anchors import extract, has_cjk
    from context_gatekeeper.selection.cues import strip_cues

    with pytest.MonkeyPatch.context() as m:
        m.setattr(history, "_gate_inputs", BoundedCache(maxsize=10))
        got = history._gate_input(user, max_chars, text_key(user), extract(user))
    cues, content = strip_cues(user[:max_chars])
    assert got == (tuple(extract(content, query=True).counts), cues)
    if cues and len(user) <= max_chars and not has_cjk(content) and history._blanks_no_anchor(user, cues):
        assert got[0] == tuple(extract(user).counts)


@pytest.mark.parametrize("listing_reads", [1, 10**9])
def test_resegmenting_reads_the_same_inputs_listed_or_in_place(
    listing_reads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_resegment_from lists the segmentation inputs only where it computes many labels; read
    in place (an append to a long history), they give the labels a fresh computation gives."""
    monkeypatch.setattr(history, "_LISTING_READS", listing_reads)
    monkeypatch.setattr(history, "_labels", BoundedCache(maxsize=1000))
    gk = ContextGatekeeper(token_budget=200, token_counter=len, message_overhead=0)
    words = ["redis lock ttl", "espresso grind", "postgres vacuum", "redis watchdog", "by the way espresso beans"]
    ids = [gk.add_turn(f"question about {w} {i}?", f"answer on {w}") for i, w in enumerate(words * 4)]
    gk.insert_turns(ids[5], [("and the redis lock?", "renew it"), ("it again?", "yes")])
    gk.remove_turn(ids[2])
    monkeypatch.setattr(history, "_LISTING_READS", 1)
    assert gk._history.labels == labels_from_scratch(gk, monkeypatch)


@given(st.text(alphabet="aZbY_1 .:->\n'", max_size=30))
def test_the_joined_and_case_split_tests_of_blanks_no_anchor_match_their_plain_patterns(text):
    """``_JOINED`` and ``_CASE_SPLIT`` are written joiner or capital first (so the engine skips
    to one); they find a match exactly where their plain forms do."""
    import re

    assert (history._JOINED.search(text) is None) == (re.search(r"\w(?:\.|::|->)[A-Za-z_]", text, re.ASCII) is None)
    assert (history._CASE_SPLIT.search(text) is None) == (re.search(r"[a-z][A-Z]|[A-Z][A-Z][a-z]", text) is None)


def test_the_listed_cues_anchors_are_computed_once_alike() -> None:
    """``_ANCHORED_CUES`` holds, for each listed cue, whether a word of it has an anchor."""
    assert history._ANCHORED_CUES["back to"] and not history._ANCHORED_CUES["by the way"]
    assert all(value == history._cue_has_anchor(cue) for cue, value in history._ANCHORED_CUES.items())


def test_a_turn_whose_question_sits_in_a_tool_text_is_not_labelled_from_the_same_turn_without_tools() -> None:
    """The answer's ending (does it ask?) is read from the assistant text alone, so the label
    cache, shared by every history in the process, must not take one of these turns for the
    other: whichever is segmented first, each history's labels are its own from scratch."""
    from context_gatekeeper.selection.segments import segment_all

    weather = ("What's the weather in Tokyo on Saturday?", "Light rain, 14°C. Perfect for a museum day.")
    hotel = ("I need a hotel in Edinburgh for 3 nights.", "Motel One Royal has rooms at £120 a night.")
    asked = {"assistant": "Rooms free. Shall I book it?", "tool_texts": ()}
    in_a_tool = {"assistant": "", "tool_texts": ("Rooms free. Shall I book it?",)}
    for order in ((asked, in_a_tool), (in_a_tool, asked)):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(history, "_labels", BoundedCache(maxsize=1000))
            for turn in order:
                gk = ContextGatekeeper(token_budget=2000)
                gk.add_turn(*weather)
                gk.add_turn(*hotel)
                gk.add_turn("Any availability on the 12th?", turn["assistant"], tool_texts=turn["tool_texts"])
                gk.add_turn("perfect, thanks", "You are welcome.")
                h = gk._history
                assert (h.labels, h.novelty) == segment_all([h.inputs[t] for t in h.order], h.params)
