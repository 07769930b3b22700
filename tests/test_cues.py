"""Discourse cues: reference, switch and return cues; English whole words, Chinese substrings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper.selection.anchors import extract, normalise
from context_gatekeeper.selection.cues import RETURN_CUES, REFERENCE_CUES, SWITCH_CUES, Cues, find_cues, strip_cues


def cues(text: str) -> Cues:
    return find_cues(normalise(text))


# -- English: whole words only -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "the item list",  # "it" inside "item"
        "a unit test",  # "it" inside "unit"
        "a thistle",  # "this" inside "thistle"
        "thatch roof",  # "that" inside "thatch"
        "the theme",  # "the" ... "them" inside "theme"
        "give feedback to users",  # "back to" inside "feedback to"
        "bitwise btwx",  # "btw" inside a longer word
        "the hereafter",  # "he", "her", "here" inside
        "suchlike",  # "such"
    ],
)
def test_english_cues_do_not_match_inside_words(text):
    assert cues(text) == Cues()
    assert not cues(text)


def test_english_cues_match_as_words_in_any_case():
    assert cues("Does IT scale?").reference == ("it",)
    assert cues("What is this item?").reference == ("this",)
    assert cues("It works; is it fast?").reference == ("it",)  # reported once


def test_longer_cue_wins_over_its_prefix():
    assert cues("I prefer that one").reference == ("that one",)
    assert cues("Back to Redis").returning == ("back to",)


def test_punctuation_and_hyphens_bound_words():
    assert "this" in cues("this-one, please").reference
    assert cues("(btw) how is Go?").switch == ("btw",)


def test_multi_word_cues_and_full_width_text():
    assert cues("By The Way, what about Go?") == Cues(reference=("what about",), switch=("by the way",))
    assert cues("Ａｂｏｖｅ").reference == ("above",)  # NFKC folds full-width letters


def test_possessive_contraction_is_its_own_cue():
    assert cues("it's fine").reference == ("it's",)


@pytest.mark.parametrize("text", ["that's too expensive", "they're too slow", "it'll break"])
def test_contracted_reference_pronouns_are_reference_cues(text):
    assert cues(text).reference


# -- Chinese: substrings ---------------------------------------------------------------------


def test_chinese_cues_match_inside_a_sentence():
    assert cues("这个锁怎么续租").reference == ("这个",)
    assert cues("它的价格呢").reference == ("它",)


@pytest.mark.parametrize(("text", "cue"), [
    ("那边冬天冷不冷", "那边"), ("这边能停车吗", "这边"), ("这玩意儿要一直吃吗", "这玩意儿"), ("这玩意好用吗", "这玩意"),
    ("这东西多少钱", "这东西"), ("那东西还在吗", "那东西"),
])
def test_chinese_there_and_this_thing_are_reference_cues_as_in_english(text, cue):
    # "there" and "this" are English reference cues; these are their Chinese counterparts
    assert cues(text).reference == (cue,)


def test_chinese_switch_and_return_cues():
    assert cues("换个话题，聊聊猫").switch == ("换个话题",)
    found = cues("回到之前的锁")
    assert found.returning == ("回到",)
    assert cues("回到刚才的锁").returning == ("回到刚才",)
    assert cues("刚才的锁").reference == ("刚才",)


def test_longest_chinese_cue_wins():
    # "顺便问一下", "顺便问" and "顺便" overlap: the longest one is reported, once.
    assert cues("我想顺便问一下").switch == ("顺便问一下",)
    assert cues("我想顺便问问").switch == ("顺便问",)
    assert cues("再回到上次").returning == ("再回到",)


# -- switch and return ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "switch"),
    [
        ("btw, how do I bake bread?", "btw"),
        ("On another note, what is Rust?", "on another note"),
        ("Let's talk about cats", "let's talk about"),
        ("Moving on to databases", "moving on"),
        ("另外，北京天气怎么样", "另外"),
        ("换个事儿问：婚后一起还贷的房子怎么分？", "换个事儿"),
        ("还有个跟这个没关系的问题：电动牙刷真的比手动的干净吗？", "跟这个没关系"),
        ("跟刚才的无关：信用卡分期划算吗？", "跟刚才的无关"),
        ("Totally different thing - my basil keeps bolting, how do I stop it?", "totally different"),
        ("Different thing: how should I build up to 1500m?", "different thing"),
    ],
)
def test_switch_cues(text, switch):
    found = cues(text)
    assert found.switch == (switch,)
    assert not found.returning
    assert not set(found.reference) & {"这个", "刚才"}  # not when inside the switch phrase


@pytest.mark.parametrize(
    ("text", "returning"),
    [
        ("Going back to the lock question", "going back"),
        ("As we discussed, the TTL", "as we discussed"),
        ("说回之前的方案", "说回"),
        ("前面提到的那个库", "前面提到"),
    ],
)
def test_return_cues(text, returning):
    assert returning in cues(text).returning


def test_a_text_may_hold_several_kinds():
    found = cues("btw, back to that lock")
    assert found.switch == ("btw",)
    assert found.returning == ("back to",)
    assert found.reference == ("that",)
    assert bool(found)


def test_cues_are_reported_without_repeats():
    found = cues("that and that and this and this")
    assert sorted(found.reference) == ["that", "this"]
    assert len(found.reference) == len(set(found.reference))


def test_no_cues_is_falsy():
    assert not cues("Redis lock TTL")
    assert not Cues()
    assert Cues(switch=("btw",))


def test_cue_lists_are_normalised():
    # find_cues matches normalised text, so every listed cue must already be normalised.
    for cue in REFERENCE_CUES + SWITCH_CUES + RETURN_CUES:
        assert cue == normalise(cue) and cue == cue.strip()


@pytest.mark.parametrize("cue", REFERENCE_CUES)
def test_every_reference_cue_is_found_on_its_own(cue):
    assert cues(cue).reference == (cue,)


@pytest.mark.parametrize("cue", SWITCH_CUES)
def test_every_switch_cue_is_found_on_its_own(cue):
    assert cues(cue).switch == (cue,)


@pytest.mark.parametrize("cue", RETURN_CUES)
def test_every_return_cue_is_found_on_its_own(cue):
    assert cues(cue).returning == (cue,)


@given(st.text(max_size=120))
def test_find_cues_never_raises_and_reports_listed_cues(text):
    found = find_cues(normalise(text))
    assert set(found.reference) <= set(REFERENCE_CUES)
    assert set(found.switch) <= set(SWITCH_CUES)
    assert set(found.returning) <= set(RETURN_CUES)
    normalised = normalise(text)
    for cue in found.reference + found.switch + found.returning:
        assert cue in normalised


# -- cues are not content -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept_words"),
    [
        ("Back to the moka pot, what grind?", {"moka", "pot", "grind"}),
        ("By the way, anyway, how do I repot a cactus?", {"repot", "cactus"}),
        ("Going back to Redis: TTL?", {"redis", "ttl"}),
    ],
)
def test_strip_cues_leaves_only_content_words(text, kept_words):
    found, content = strip_cues(text)
    assert found
    assert set(extract(content, query=True).counts) == kept_words


@pytest.mark.parametrize("text", ["回到刚才 Redis 的锁", "换个话题，顺便问下猫粮", "题外话，咖啡"])
def test_chinese_cue_words_leave_no_anchor_behind(text):
    found, content = strip_cues(text)
    anchors = set(extract(content, query=True).counts)
    for cue in (*found.switch, *found.returning, *found.reference):
        assert not any(a in cue for a in anchors if len(a) > 1), (cue, anchors)


@pytest.mark.parametrize("char", list("\u00ad\u200b\u200c\u200d\u2060\ufeff"))
def test_invisible_characters_split_neither_a_cue_nor_a_word(char):
    # soft hyphen, zero-width space / non-joiner / joiner, word joiner, byte-order mark
    found, content = strip_cues(f"By the way{char}, back{char} to Kuber{char}netes: is i{char}t up?")
    assert found.switch == ("by the way",)
    assert found.returning == ("back to",)
    assert found.reference == ("it",)
    assert content.split() == [",", "Kubernetes:", "is", "up?"]
    assert find_cues(normalise(f"{char}换个{char}话题")).switch == ("换个话题",)


def test_strip_cues_keeps_case_for_identifiers_and_folds_full_width():
    found, content = strip_cues("ＢＹ ＴＨＥ ＷＡＹ, TaskGroup?")
    assert found.switch == ("by the way",)
    assert "TaskGroup" in content


@pytest.mark.parametrize("text, cue", [
    ("先不管这个了，帮我写个请假条", "先不管这个"),
    ("算了不说这个了，周末去哪玩", "不说这个了"),
    ("never mind that, what's a good name for a cat?", "never mind that"),
    ("Never mind, how do I descale a kettle?", "never mind"),
    ("Actually scratch that, can you explain what a Docker volume is?", "scratch that"),
])
def test_closing_the_topic_is_a_switch_cue_not_a_reference(text, cue):
    # "这个" / "that" inside a closing do not point back: the whole phrase sets the topic aside
    cues, content = strip_cues(text)
    assert cues.switch == (cue,) and not cues.reference
    assert cue not in content.lower()


@pytest.mark.parametrize("text", [
    "Can I just forget it during the load and let autovacuum rebuild statistics afterwards?",
    "Should I drop that index before the bulk insert?",
    "面团先放一放再擀会不会更好？",
])
def test_phrases_that_also_occur_inside_follow_ups_are_not_closings(text):
    assert not strip_cues(text)[0].switch


_ASCII_WORDS = sorted({w for c in (*REFERENCE_CUES, *SWITCH_CUES, *RETURN_CUES) if c.isascii() for w in c.split()})


@given(st.lists(st.one_of(st.sampled_from(_ASCII_WORDS), st.sampled_from(["It", "BY", "tHe", "wAy", "'", "it's", "x_it",
                                                                            "-", ".", "?", " ", "  ", "\n", "9", "_"])),
                max_size=12).map(" ".join))
def test_ascii_text_is_scanned_lowered_as_the_case_insensitive_pattern_scans_it(text):
    """ASCII text is scanned lower-cased and led by a space with a case-sensitive pattern that
    matches the character before each cue (faster): the cues and spans are what the one
    case-insensitive pattern finds."""
    from context_gatekeeper.selection import cues as module

    assert all(c == c.lower() for c in module._KINDS if c.isascii())
    expected = [(m.span(), module._canonical(m.group(0))) for m in module._CUES.finditer(text)]
    found = [((m.start(1) - 1, m.end(1) - 1), m.group(1)) for m in module._ASCII_CUES.finditer(" " + text.lower())]
    assert found == expected
    assert module._scan(text)[1] == [span for span, _ in expected]
