"""Anchor extraction (docs/architecture.md#data-flow-of-a-select): CJK n-grams cut at stopwords, words, identifier parts,
exact anchors (identifiers, versions, code spans, quoted phrases)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_gatekeeper.selection.anchors import (
    AnchorKind,
    TextAnchors,
    anchor_kind,
    extract,
    normalise,
    split_identifier,
    stem,
)
from context_gatekeeper.selection.stopwords import (
    CHINESE_SPLIT_CHARS,
    CHINESE_STOP_CHARS,
    CHINESE_STOPWORDS,
    ENGLISH_STOPWORDS,
)


def anchors(text: str, *, query: bool = False) -> set[str]:
    return set(extract(text, query=query).counts)


# -- TextAnchors ---------------------------------------------------------------------------


def test_text_anchors_counts_and_length():
    ta = TextAnchors.of(["a", "b", "a", "c", "a"])
    assert ta.counts == Counter({"a": 3, "b": 1, "c": 1})
    assert ta.length == 5


def test_extract_length_is_total_occurrences():
    ta = extract("redis redis lock")
    assert ta.counts["redis"] == 2
    assert ta.length == sum(ta.counts.values()) == 3


# -- CJK -----------------------------------------------------------------------------------


def test_cjk_document_mode_keeps_bigrams_and_content_characters():
    # The module's own example: 锁续租 / 脑裂 with 为什么 (a stopword) cut out; 脑裂 is a
    # glossary term, so it also yields the English "split brain".
    assert anchors("Redis 锁续租为什么会脑裂？") == {
        "redis", "锁", "续", "租", "锁续", "续租", "会脑", "脑", "裂", "脑裂", "split", "brain",
    }


def test_cjk_query_mode_keeps_only_bigrams_of_longer_pieces():
    # In a query, "锁续租" gives bigrams only, so the query does not match every 锁.
    assert anchors("Redis 锁续租为什么会脑裂？", query=True) == {
        "redis", "锁续", "续租", "会脑", "脑裂", "split", "brain",
    }


@pytest.mark.parametrize(
    ("chinese", "english"),
    [("加了索引为什么没用上", "partial index"), ("Docker 镜像太大", "base image"), ("线程池满了", "thread pool size")],
)
def test_glossary_terms_meet_their_english_words(chinese, english):
    assert anchors(chinese) & anchors(english)


@pytest.mark.parametrize("everyday", ["跑步训练", "卫生间干湿分区", "手机内存不够", "密封的容器"])
def test_words_with_an_everyday_sense_are_not_bridged(everyday):
    assert all(not a.isascii() for a in anchors(everyday))


def test_single_character_piece_is_kept_in_query_mode():
    # "这个" (stopword) and "的", "问题" cut the run, leaving 锁 standing alone.
    assert anchors("这个锁的问题", query=True) == {"锁"}
    assert anchors("这个锁的问题") == {"锁"}


def test_query_mode_never_adds_anchors():
    for text in ("并发性能怎么样", "Redis 锁续租为什么会脑裂？", "我的猫很可爱", "分布式锁和数据库"):
        assert anchors(text, query=True) <= anchors(text)


def test_no_bigram_crosses_a_particle_or_pronoun():
    # 的 and 我 are split characters: no bigram may contain them.
    found = anchors("我的猫喜欢鱼")
    assert not any(ch in a for a in found for ch in "我的")
    assert {"猫喜", "喜欢", "欢鱼"} <= found


def test_multi_character_stopwords_are_cut_longest_first():
    # 为什么 is a stopword; so is 什么.  Cutting "为什么" whole means neither 为什 nor 什么 appears.
    found = anchors("数据库为什么慢")
    assert not found & {"为什", "什么", "库为", "么慢"}
    assert {"数据", "据库", "慢"} <= found


def test_stopword_bigrams_never_appear():
    text = "我们可以知道什么时候应该使用索引"
    found = anchors(text)
    assert not found & CHINESE_STOPWORDS
    assert {"使用", "索引"} <= found


def test_stop_characters_are_not_single_character_anchors():
    found = anchors("是在有和锁")
    assert "锁" in found
    assert not found & set("是在有和")


def test_full_width_text_is_normalised():
    assert anchors("ＡＢＣ全角") == {"abc", "全", "角", "全角"}


def test_stopword_lists_are_consistent():
    assert CHINESE_SPLIT_CHARS <= CHINESE_STOP_CHARS
    assert all(len(w) >= 2 for w in CHINESE_STOPWORDS)
    assert all(w == w.lower() for w in ENGLISH_STOPWORDS)


# -- English words ---------------------------------------------------------------------------


def test_english_stopwords_are_removed():
    assert anchors("what is the best way to do this") == set()
    assert anchors("How does the Redis lock expire?") == {"redis", "lock", stem("expire")}


def test_words_are_lower_cased_and_stemmed():
    assert anchors("Paintings PAINTED painting") == {"paint"}
    assert extract("Paintings PAINTED painting").counts["paint"] == 3


def test_single_letters_are_dropped_and_numbers_need_two_digits():
    assert anchors("x 1 22 333") == {"22", "333"}


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("paintings", "paint"),
        ("painted", "paint"),
        ("running", "run"),  # doubled consonant undone
        ("stopped", "stop"),
        ("planned", "plan"),
        ("studies", "study"),
        ("queries", "query"),
        ("classes", "class"),  # -sses -> -ss
        ("class", "class"),  # -ss kept
        ("status", "status"),  # -us kept
        ("analysis", "analysis"),  # -is kept
        ("bus", "bus"),  # three letters or fewer: untouched
        ("red", "red"),
        ("thing", "thing"),  # base "th" too short to strip -ing
        ("string", "string"),  # base "str" has no vowel
        ("tested", "test"),
        ("tests", "test"),
        ("calling", "call"),  # ll is not undoubled
        ("move", "mov"),  # a final -e goes, so move / moves / moved / moving meet
        ("moves", "mov"),
        ("moved", "mov"),
        ("moving", "mov"),
        ("use", "use"),  # three letters: untouched
        ("v2", "v2"),  # not alphabetic: untouched
    ],
)
def test_stem(word, expected):
    assert stem(word) == expected


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=14))
def test_stem_never_lengthens_and_is_stable_on_short_words(word):
    result = stem(word)
    assert 0 < len(result) <= len(word)
    if len(word) <= 3:
        assert result == word


@pytest.mark.parametrize(
    "forms",
    [
        ("paint", "paints", "painted", "painting"),
        ("deploy", "deploys", "deployed", "deploying"),
        ("merge", "merges", "merged", "merging"),
        ("cache", "caches", "cached", "caching"),
        ("stop", "stops", "stopped", "stopping"),
        ("fix", "fixes", "fixed"),
        ("index", "indexes"),
        ("query", "queries"),
    ],
)
def test_inflected_forms_share_a_stem(forms):
    assert len({stem(w) for w in forms}) == 1


@pytest.mark.parametrize("forms", [("embed", "embeds", "embedding", "embedded"), ("speed", "speeding")])
def test_base_forms_ending_in_ed_share_a_stem(forms):
    assert len({stem(w) for w in forms}) == 1


# -- identifiers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("identifier", "parts"),
    [
        ("asyncio.gather", ["asyncio", "gather"]),
        ("TaskGroup", ["task", "group"]),
        ("max_retries", ["max", "retries"]),
        ("parseJSON", ["parse", "json"]),
        ("HTTPServer", ["http", "server"]),
        ("std::vector", ["std", "vector"]),
        ("self->next", ["self", "next"]),
        ("python3", ["python", "3"]),
        ("__init__", ["init"]),
        ("redis", ["redis"]),
    ],
)
def test_split_identifier(identifier, parts):
    assert split_identifier(identifier) == parts


def test_dotted_identifier_gives_parts_and_an_exact_anchor():
    assert anchors("call asyncio.gather now") == {"call", "asyncio", "gather", "#asyncio.gather"}


def test_camel_case_gives_stemmed_parts_and_exact_anchor():
    assert anchors("TaskGroup") == {"task", "group", "#taskgroup"}


def test_snake_case_parts_are_stemmed_and_stopwords_dropped():
    # "retries" stems to "retry"; "get" is a stopword, but the exact anchor keeps the whole name.
    assert anchors("max_retries") == {"max", "retry", "#max_retries"}
    assert anchors("get_user") == {"user", "#get_user"}


def test_plain_word_is_not_an_exact_anchor():
    assert anchors("Redis") == {"redis"}


def test_letters_with_digits_count_as_an_identifier():
    assert "#python3" in anchors("python3 rocks")


# -- exact anchors --------------------------------------------------------------------------


def test_versions_are_exact_and_lose_their_v():
    found = anchors("Upgrade Python 3.11 to v3.12.1, not V2.0")
    assert {"#3.11", "#3.12.1", "#2.0"} <= found
    assert "python" in found and stem("upgrade") in found
    # The version's digits are not also read as numbers or identifiers.
    assert not found & {"11", "12", "#v3.12.1", "v3"}


def test_a_version_at_the_end_of_a_sentence():
    assert "#3.11" in anchors("I use Python 3.11.")


def test_backtick_code_span_is_exact():
    found = anchors("set `ttl` to 30")
    assert "`ttl`" in found and "ttl" in found and "30" in found


def test_code_span_is_case_folded_and_stripped():
    assert "`select * from t`" in anchors("run ` SELECT * FROM t ` please")
    assert not any(a.startswith("`") for a in anchors("empty `   ` span"))


def test_ascii_quoted_phrase():
    found = anchors('the "Fencing Token" idea')
    assert '"fencing token"' in found
    assert {"fenc", "token", "idea"} <= found


@pytest.mark.parametrize("text", ["“分布式锁”怎么实现", "「分布式锁」怎么实现", "『分布式锁』怎么实现"])
def test_chinese_quoted_phrases(text):
    assert '"分布式锁"' in anchors(text)


def test_a_one_character_quotation_is_its_own_phrase():
    assert '"a"' in anchors('say "a" now')


def test_a_short_quotation_does_not_swallow_the_next_phrase():
    found = anchors('"x" then "fencing token"')
    assert '"fencing token"' in found
    assert '"then"' not in found


@pytest.mark.parametrize(
    ("anchor", "kind"),
    [
        ("#asyncio.gather", AnchorKind.EXACT),
        ("#3.11", AnchorKind.EXACT),
        ("`ttl`", AnchorKind.EXACT),
        ('"fencing token"', AnchorKind.EXACT),
        ("脑裂", AnchorKind.CJK_BIGRAM),
        ("锁", AnchorKind.CJK_CHAR),
        ("㐀", AnchorKind.CJK_CHAR),  # extension A
        ("豈", AnchorKind.CJK_CHAR),  # compatibility ideograph
        ("redis", AnchorKind.WORD),
        ("22", AnchorKind.WORD),
        ("текст", AnchorKind.WORD),
    ],
)
def test_anchor_kind(anchor, kind):
    assert anchor_kind(anchor) == kind


# -- robustness ----------------------------------------------------------------------------


def test_mixed_scripts_and_emoji():
    found = anchors("😀 emoji 混合 текст 🚀🔥")
    assert found == {"emoji", "混合", "混", "合", "текст"}


def test_empty_and_punctuation_only_text():
    assert extract("").length == 0
    assert extract("？！。，…---!!!").counts == Counter()


def test_normalise_folds_width_and_case():
    assert normalise("ＢＹ The WAY") == "by the way"
    assert normalise("Straße") == "strasse"


_INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\ufeff"
"""Soft hyphen, zero-width space, non-joiner and joiner, word joiner, byte-order mark: text
pasted from a web page or a PDF holds them inside words."""


@pytest.mark.parametrize("char", list(_INVISIBLE))
@pytest.mark.parametrize("query", [False, True])
def test_an_invisible_character_inside_a_word_does_not_split_it(char, query):
    assert extract(f"Kuber{char}netes", query=query) == extract("Kubernetes", query=query)
    assert extract(f"Our Kuber{char}netes up{char}grade{char}", query=query).counts == Counter(
        {"kubernet": 1, "upgrad": 1})
    assert anchors(f"max{char}_retries in asyncio.{char}gather v3.{char}11") == anchors(
        "max_retries in asyncio.gather v3.11")
    assert anchors(f"锁{char}续租 ＴＴ{char}Ｌ") == anchors("锁续租 ＴＴＬ")
    assert normalise(f"BY THE{char} WAY Kuber{char}netes") == "by the way kubernetes"


def test_removing_invisible_characters_keeps_emoji_and_right_to_left_text():
    # a joiner inside an emoji sequence goes (emoji are no anchors); the words beside it stay apart
    assert anchors("family \U0001f468\u200d\U0001f469\u200d\U0001f467 trip") == {"family", "trip"}
    # right-to-left words and the bidirectional marks between them are read as before
    assert anchors("\u0645\u0631\u062d\u0628\u0627 \u200f\u0628\u0627\u0644\u0639\u0627\u0644\u0645 Redis") == {
        "\u0645\u0631\u062d\u0628\u0627", "\u0628\u0627\u0644\u0639\u0627\u0644\u0645", "redis"}
    assert anchors("\u05e9\u05dc\u05d5\u05dd\u200e Redis") == {"\u05e9\u05dc\u05d5\u05dd", "redis"}
    # a non-joiner inside a Persian word leaves the word whole
    assert anchors("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645") == {"\u0645\u06cc\u062e\u0648\u0627\u0647\u0645"}
    # removed before NFKC: a combining accent after a joiner composes with its letter
    assert anchors("cafe\u200d\u0301") == anchors("caf\u00e9")


def test_a_turn_with_an_invisible_character_inside_a_word_is_still_found():
    """A turn pasted from a web page or PDF ("Kuber\u00adnetes") is kept for a query naming
    Kubernetes, as the same turn typed plainly is."""
    from context_gatekeeper import ContextGatekeeper

    for char in ["", *_INVISIBLE]:
        gk = ContextGatekeeper(token_budget=500, token_counter=len, message_overhead=0)
        gk.add_turn(f"Our Kuber{char}netes upgrade plan for Friday", "Drain the nodes one at a time.")
        gk.add_turn("Best pizza dough hydration?", "About 65% for a home oven.")
        gk.add_turn("And the oven temperature?", "As hot as it goes, 250 C or more.")
        selection = gk.explain("Which Kubernetes version do we run?")
        assert selection.turn_ids == (1,), (hex(ord(char)) if char else "none", selection.decision)


@given(st.text(max_size=200), st.booleans())
def test_extract_never_raises_and_is_well_formed(text, query):
    ta = extract(text, query=query)
    assert ta.length == sum(ta.counts.values())
    for anchor, count in ta.counts.items():
        assert anchor and count > 0
        assert anchor_kind(anchor) in {AnchorKind.WORD, AnchorKind.CJK_BIGRAM, AnchorKind.CJK_CHAR, AnchorKind.EXACT}
        assert anchor not in ENGLISH_STOPWORDS
        assert anchor not in CHINESE_STOPWORDS
    if not query:
        assert set(extract(text, query=True).counts) <= set(ta.counts)


@given(st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x4FFF), max_size=30))
def test_extract_is_deterministic_and_query_is_a_subset(text):
    doc = extract(text)
    assert extract(text) == doc
    assert set(extract(text, query=True).counts) <= set(doc.counts)


def test_accented_latin_words_stay_whole():
    assert anchors("Müller") == {"müller"}
    assert "café" in anchors("the café menu") or stem("café") in anchors("the café menu")


@pytest.mark.parametrize(
    "text, anchor",
    [
        ("“smart quoted” text", '"smart quoted"'),  # a quotation with no ASCII quote in the text
        ("「括号内容」 ok", '"括号内容"'),
        ("call `foo.bar()` now", "`foo.bar()`"),
        ("upgrade to v1.2.3 today", "#1.2.3"),
        ("ＰＯＲＴ\u3000８０８０", "8080"),  # digits that appear only after NFKC
        ("rate ٣٣ items", "٣٣"),  # digits beyond ASCII
    ],
)
def test_each_scan_runs_when_the_characters_it_needs_appear(text, anchor):
    assert anchor in extract(text).counts


@pytest.mark.parametrize(
    "text, numbers",
    [
        ("12ab then 34", ["12", "34"]),  # a number right before an identifier, one after a space
        ("x.12 and 年12月 and 100-150元", ["12", "12", "100", "150"]),
        ("v2 and 7 stay out; 2022 stays", ["2022"]),
        ("release 3.11 of 2024", ["2024"]),  # the version is an exact anchor, not numbers
    ],
)
def test_free_standing_numbers_only_and_in_order(text, numbers):
    found = [a for a in extract(text).counts if a.isdigit()]
    assert found == list(dict.fromkeys(numbers))
    assert all(extract(text).counts[n] == numbers.count(n) for n in numbers)


def test_anchor_order_is_phrases_versions_words_chinese_numbers():
    # Counter order is first occurrence per scan; what reads the anchors in order (the gate's
    # weights, their sums) depends on it, so it must not move when the scans are reorganised.
    assert list(extract('In 2022 "moka pot" 锁 v1.2 grind-size 42').counts) == [
        '"moka pot"', "#1.2", "moka", "pot", "grind", "siz", "锁", "2022", "42"]


@given(st.text(alphabet="ab1 2_.:->`\"v3.1x9锁脑裂１２٣Ü?？!)」\n", max_size=40))
def test_one_scan_finds_what_blanking_identifiers_out_would(text):
    """Numbers are found in the same scan as identifier tokens; this is the two-pass
    definition they must equal (identifiers blanked out, then runs of two digits or more
    not after a letter)."""
    import re
    import unicodedata

    from context_gatekeeper.selection import anchors as module

    normalised = unicodedata.normalize("NFKC", text)
    latin = module._VERSION.sub(" ", normalised)
    start = r"[^\W\d\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
    expected = re.findall(rf"(?<!{start})\d{{2,}}", module._IDENTIFIER.sub(" ", latin))
    tokens, numbers = module._tokens_and_numbers(latin)
    assert numbers == expected
    assert tokens == module._IDENTIFIER.findall(latin)


@given(st.text(alphabet=[chr(i) for i in range(128)], max_size=40))
def test_ascii_patterns_scan_ascii_text_as_the_unicode_ones_do(text):
    """``extract`` scans ASCII text with plain ASCII classes (faster); on ASCII text they must
    find exactly what the Unicode patterns find: tokens, numbers and their order."""
    from context_gatekeeper.selection import anchors as module

    assert module._ASCII_IDENTIFIER.findall(text) == module._IDENTIFIER.findall(text)
    assert module._tokens_and_numbers(text, module._ASCII_TOKEN_OR_NUMBER) == module._tokens_and_numbers(text)


@given(st.text(alphabet="ab1 2_.:->`\"v3.1x9锁１２٣Ü?-", max_size=40))
def test_scans_skipped_without_their_digits_would_find_nothing(text):
    """``extract`` runs the version scan only where a digit, a dot and a digit meet, and the
    token-or-number scan only where two digits meet (else the plain identifier scan): the
    skipped scans must find no version, and no number and the same tokens, there."""
    from context_gatekeeper.selection import anchors as module

    if module._DOTTED.search(text) is None:
        assert module._VERSION.findall(text) == []
    if module._NUMBER.search(text) is None:
        assert module._tokens_and_numbers(text) == (module._IDENTIFIER.findall(text), [])


@given(st.text(alphabet="ab_Z1 2.:->`é锁Ü?-\n", max_size=40))
def test_possessive_identifier_runs_match_what_the_plain_ones_match(text):
    """The identifier scans give nothing back once a run is read (possessive, on 3.11+): they
    must match exactly what the same patterns with plain ``*`` match, joiners and all."""
    import re

    from context_gatekeeper.selection import anchors as module

    for pattern in (module._IDENTIFIER, module._ASCII_IDENTIFIER, module._TOKEN_OR_NUMBER, module._ASCII_TOKEN_OR_NUMBER):
        plain = re.compile(pattern.pattern.replace("*+", "*"), pattern.flags)
        assert pattern.findall(text) == plain.findall(text)


@given(st.text(alphabet="ab 0123456789٣１.x", max_size=30))
def test_the_digit_test_for_ascii_text_is_the_digit_scan(text):
    """``extract`` asks ten substring tests, not the regular expression, whether ASCII text holds a digit."""
    from context_gatekeeper.selection import anchors as module

    if text.isascii():
        assert module._has_ascii_digit(text) == (module._DIGIT.search(text) is not None)


def test_a_plain_words_anchors_take_the_short_path_to_the_same_result() -> None:
    """_token_anchors answers a plain ASCII word ("lock", "Redis") without splitting it as
    an identifier: on words of every case shape, and on tokens that are no plain word,
    the anchors equal those of the general path (parts, exact anchor, stemmed words)."""
    import random

    from context_gatekeeper.selection import anchors as module

    def general(token: str) -> tuple[str, ...]:
        parts = module.split_identifier(token)
        out: list[str] = []
        if (len(parts) > 1 or module._is_compound(token)) and max(map(len, parts), default=0) > 1:
            out.append("#" + token.casefold())
        for part in parts:
            out.extend(module._word_anchors(part))
        return tuple(out)

    rng = random.Random(4)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    tokens = ["lock", "Redis", "TTL", "TaskGroup", "I", "a", "Ab", "aB", "the", "The", "studies", "Paintings",
              "max_retries", "asyncio.gather", "x9", "Müller", "naïve", "ÀB", "eBay", "iOS", "USA", "Was", "being"]
    tokens += ["".join(rng.choice(letters) for _ in range(rng.randrange(1, 9))) for _ in range(3000)]
    tokens += [w.capitalize() for w in tokens[:500]] + [w.lower() for w in tokens[:500]]
    for token in tokens:
        assert module._compute_token_anchors(token) == general(token), token


def test_ascii_text_with_no_joined_identifier_is_scanned_by_the_plain_word_patterns_alike() -> None:
    """extract scans ASCII text where no joiner ('.', '::', '->') is followed by what starts
    an identifier with the word patterns, which lack the joined parts: on random ASCII
    text (joiners, digits, versions, underscores, camelCase), wherever _joined says no,
    both pattern pairs find the same tokens and numbers."""
    import random

    from context_gatekeeper.selection import anchors as module

    pool = [".", "::", "->", ":", "-", ">", "_", "a", "Foo", "x9", "1", "22", "3.11", "v2.0", " ", "\n", "e.g.",
            "max_retries", "TaskGroup", "-1", "..", "._", ".A", "asyncio", "lock", '"', "`"]
    rng = random.Random(7)
    plain = 0
    for _ in range(6000):
        text = "".join(rng.choice(pool) for _ in range(rng.randrange(1, 16)))
        if module._joined(text):
            continue
        plain += 1
        assert module._ASCII_WORD.findall(text) == module._ASCII_IDENTIFIER.findall(text), text
        assert module._ASCII_WORD_OR_NUMBER.findall(text) == module._ASCII_TOKEN_OR_NUMBER.findall(text), text
    assert plain > 1000
    for text in ("Redis locks: see e.g. docs -> TTL", "a::b and c->d in 3.11", "max_retries=22, v2.0 x.y"):
        assert module._joined(text)
    assert not module._joined("A plain line, with 22 numbers - and > signs: 3.11 too")
    assert extract("call asyncio.gather in 3.11: max_retries 22").counts == Counter(
        {"#asyncio.gather": 1, "asyncio": 1, "gather": 1, "#3.11": 1, "#max_retries": 1, "max": 1, "retry": 1,
         "call": 1, "22": 1})


@given(st.text(alphabet="ab_Z1 29.:->`\"v3x\n\t\x1c,'", max_size=60))
def test_word_runs_find_what_the_ascii_word_scans_find(text):
    """extract reads ASCII text where no joiner starts an identifier from its runs of
    [A-Za-z0-9_] (a byte table and a split) instead of the word scans: without a digit the
    runs are the scan's tokens, and with digits the tokens and numbers of the runs are the
    token-or-number scan's, in order (a defect in either would change anchors)."""
    from context_gatekeeper.selection import anchors as module

    if module._joined(text):
        return
    if not module._has_ascii_digit(text):
        assert module._word_runs(text) == module._ASCII_WORD.findall(text)
    assert module._words_and_numbers(text) == module._tokens_and_numbers(text, module._ASCII_WORD_OR_NUMBER)


_PLAIN_WORDS = ["studies", "Study", "running", "runs", "moved", "embedding", "classes", "HTTPServer", "max_retries",
                "TaskGroup", "it's", "flies", "lied", "buses", "ok", "by", "Cooking", "hopping", "agreed", "_x",
                "__init__", "a", "Redis", "redis", "locks", "the", "Caroline", "LGBTQ", "ABCdef", "x_Y_z"]


@given(st.one_of(st.text(alphabet="ab_Z 2.:->`\"v3x\n\t\x1c,'éÅ锁ﬁ-", max_size=60),
                 st.text(alphabet="ab_Zx .:->,\n\t", max_size=40),  # plain text, or joined
                 st.lists(st.sampled_from(_PLAIN_WORDS + [" ", ", ", "\n", "-", "!"]), max_size=20).map("".join)))
def test_anchor_set_is_the_set_of_extracts_anchors(text):
    """``anchor_set`` reads plain text from its distinct word runs: the same anchors as
    ``extract``, on plain and other text alike."""
    from context_gatekeeper.selection.anchors import anchor_set

    assert anchor_set(text) == frozenset(extract(text).counts)


@given(st.lists(st.sampled_from(_PLAIN_WORDS + [" ", ", ", "\n", "-", "!", "?"]), max_size=24).map("".join),
       st.lists(st.text(alphabet="abcdeilnorstuyz_gkp", min_size=1, max_size=6), max_size=4))
def test_anchors_near_finds_every_anchor_whose_text_holds_a_part(text, parts):
    """On plain text, ``anchors_near(text, parts)`` holds every anchor of the text whose
    core (its text, less a final "y") holds one of ``parts``, and only anchors of the text."""
    from context_gatekeeper.selection.anchors import anchors_near
    from context_gatekeeper.selection.coverage import _core

    near = anchors_near(text, parts)
    assert near is not None
    every = frozenset(extract(text).counts)
    assert near <= every
    assert {a for a in every if any(p in _core(a) for p in parts)} <= near


def test_anchors_near_and_anchor_set_on_real_text() -> None:
    """The hand-labelled sets' messages: ``anchor_set`` is ``extract``'s set on each, and
    ``anchors_near`` (on the plain ones) finds each anchor from its own core."""
    import json
    from pathlib import Path

    from context_gatekeeper.selection.anchors import _plain, anchor_set, anchors_near
    from context_gatekeeper.selection.coverage import _core

    data = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    texts = [m for name in ("interleaved.jsonl", "hard_cases.jsonl")
             for line in (data / name).read_text("utf-8").splitlines() if line.strip()
             for turn in json.loads(line)["turns"] for m in (turn["user"], turn["assistant"])]
    plain = 0
    for text in texts:
        every = frozenset(extract(text).counts)
        assert anchor_set(text) == every, text
        if not _plain(text):
            assert anchors_near(text, ["a"]) is None
            continue
        plain += 1
        for anchor in every:
            assert anchor in anchors_near(text, [_core(anchor)]), (anchor, text)  # type: ignore[operator]
    assert plain > 300
    assert anchors_near("v1.2 of Redis", ["redis"]) is None and anchors_near("Redis", [""]) == frozenset()


def _reference_extract(text: str, query: bool) -> TextAnchors:
    """What ``extract`` computes, by its definition and none of its short cuts: every scan run
    on every text with the Unicode patterns, each token's anchors computed anew."""
    import unicodedata

    from context_gatekeeper.selection import anchors as module

    text = unicodedata.normalize("NFKC", "".join(c for c in text if c not in _INVISIBLE))
    found: list[str] = []
    for match in module._QUOTED.finditer(text):
        phrase = next(g for g in match.groups() if g is not None).strip().casefold()
        if phrase:
            found.append('"' + phrase + '"')
    found += ["`" + m.group(1).strip().casefold() + "`" for m in module._CODE.finditer(text) if m.group(1).strip()]
    found += ["#" + v.lower().lstrip("v") for v in module._VERSION.findall(text)]
    tokens, numbers = module._tokens_and_numbers(module._VERSION.sub(" ", text))
    for token in tokens:
        found += module._compute_token_anchors(token)
    for run in module._CJK_RUN.findall(text):
        found += module._cjk_anchors(run, query) + list(module._glossary_anchors.__wrapped__(run))
    found += numbers
    return TextAnchors(Counter(found), len(found))


@given(st.one_of(
    st.text(alphabet="ab_Z1 29.:->`\"v3x\n\t,'éÅ锁脑裂１２٣?-\u00ad\u200b", max_size=60),
    st.lists(st.sampled_from(_PLAIN_WORDS + ["9abc", "22x", "x22", "v2.0", "3.11", "1", "07", "_9", " ", ", ", ". ",
                                             "\n", "-", "!", "(s0)", "e.g."]), max_size=24).map("".join)),
    st.booleans())
def test_extract_equals_its_definition_without_short_cuts(text, query):
    """``extract``'s short cuts (word runs read as tokens when none starts with a digit, the
    bounded token dict, the counting) give what the plain definition gives, anchors and
    their order of first appearance alike (a run such as "9abc" starts with a digit)."""
    got, expected = extract(text, query=query), _reference_extract(text, query)
    assert list(got.counts.items()) == list(expected.counts.items())
    assert got.length == expected.length


def test_the_token_dict_gives_what_token_anchors_give_when_it_fills(monkeypatch) -> None:
    """``_tokens_anchors`` (and ``_token_anchors``, one token) emptied whenever it would pass its
    size still answers each token with its anchors, in order, on hostile tokens (stopwords, digits, case, repeats)."""
    import random

    from context_gatekeeper.selection import anchors as module

    monkeypatch.setattr(module, "TOKEN_CACHE_SIZE", 5)
    monkeypatch.setattr(module, "_TOKEN_ANCHORS", {})
    pool = _PLAIN_WORDS + ["9abc", "x22", "the", "It", "İt", "ß", "a" * 300, "lock", "Lock", "LOCK"]
    rng = random.Random(3)
    for _ in range(300):
        tokens = [rng.choice(pool) for _ in range(rng.randrange(0, 12))]
        assert module._tokens_anchors(tokens) == [a for t in tokens for a in module._compute_token_anchors(t)]
        assert len(module._TOKEN_ANCHORS) <= 5
        for token in tokens:
            assert module._token_anchors(token) == module._compute_token_anchors(token)


def test_an_agents_reasoning_scaffold_is_read_as_its_content() -> None:
    from context_gatekeeper.selection.anchors import without_reasoning_scaffold

    react = ("Thought: The current language of the user is: English. I need to use a tool to help me answer the question.\n"
             "Action: lookup\nAction Input: {\"topic\": \"redis ttl\"}\nObservation: ttl is 30 s\n"
             "Thought: I can answer without using any more tools. I'll use the user's language to answer\n"
             "Answer: Use 30 s and renew it from a watchdog.")
    assert without_reasoning_scaffold(react) == 'lookup\n{"topic": "redis ttl"}\nttl is 30 s\nUse 30 s and renew it from a watchdog.'
    assert without_reasoning_scaffold("Thought: done\nFinal Answer: 42") == "42"
    for plain in ("Answer: a text that starts with no thought", "My thought: Action: is a word here", ""):
        assert without_reasoning_scaffold(plain) == plain
