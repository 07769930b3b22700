"""The general-language word-frequency prior (``context_gatekeeper.selection.word_prior``) and
its builder (``benchmarks/build_word_prior.py``): the shipped file loads and says where its
numbers come from, common words are common and rare ones rare in both languages, the selector's
stemmed anchors find their stems, and the builder is deterministic."""

from __future__ import annotations

import gzip
import importlib.util
import math
import subprocess
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest

from context_gatekeeper.errors import GatekeeperError, InvalidTypeError
from context_gatekeeper.selection import word_prior
from context_gatekeeper.selection.anchors import extract, stem
from context_gatekeeper.selection.word_prior import (
    COMMON_ZIPF,
    RARE_ZIPF,
    WordPriorError,
    anchor_commonness,
    anchor_zipf,
    commonness,
    commonness_of_zipf,
    prior_info,
    zipf,
)

ROOT = Path(__file__).resolve().parents[1]
BUILDER = ROOT / "benchmarks" / "build_word_prior.py"
SHIPPED = resources.files("context_gatekeeper.selection").joinpath("data").joinpath(word_prior.DATA_FILE)

COMMON = ("the", "usually", "problem", "thing", "一般", "不能", "这个", "可以")
RARE = ("kubernetes", "sourdough", "复制槽", "酵母")


def shipped_sections() -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The shipped file read independently of the module: header and ``section -> token -> tenths``."""
    header: dict[str, str] = {}
    sections: dict[str, dict[str, int]] = {}
    for line in gzip.decompress(SHIPPED.read_bytes()).decode("utf-8").splitlines():
        if line.startswith("# "):
            key, _, value = line[2:].partition(": ")
            header[key] = value
        else:
            section, value, tokens = line.split("\t")
            table = sections.setdefault(section, {})
            for token in tokens.split(" "):
                assert token not in table, f"{token!r} twice in section {section}"
                table[token] = int(value)
    return header, sections


def load_builder() -> ModuleType:
    """``benchmarks/build_word_prior.py`` as a module, without touching ``sys.path``."""
    spec = importlib.util.spec_from_file_location("build_word_prior", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the shipped file --------------------------------------------------------------------------


def test_the_shipped_file_is_compact_and_names_permissive_sources() -> None:
    header, sections = shipped_sections()
    assert len(SHIPPED.read_bytes()) < 600_000
    assert header["format"] == word_prior.FORMAT
    assert float(header["min_zipf"]) == RARE_ZIPF
    assert set(sections) == {"en", "en_stem", "zh"}
    assert len(sections["en"]) > 25_000 and len(sections["zh"]) > 50_000
    assert "symspellpy" in header["en_source"] and "jieba" in header["zh_source"]
    assert "CC BY 3.0" in header["en_licence"] and "MIT" in header["zh_licence"]
    for licence in (header["en_licence"], header["zh_licence"]):
        assert not any(word in licence for word in ("BY-SA", "ShareAlike", "NC", "GPL")), licence
    assert header["build"].startswith("python benchmarks/build_word_prior.py")
    assert prior_info() == header


def test_prior_info_is_a_copy() -> None:
    info = prior_info()
    info["zh_licence"] = "changed"
    assert prior_info()["zh_licence"].startswith("MIT")


def test_every_english_word_finds_its_stem_with_at_least_its_own_frequency() -> None:
    """The ``en_stem`` section sums the counts per stem of the selector's stemmer: if the
    stemmer changes, this fails until the file is rebuilt (benchmarks/build_word_prior.py)."""
    _, sections = shipped_sections()
    stale = [w for w, v in sections["en"].items() if sections["en_stem"].get(stem(w), -1) < v]
    assert not stale, f"{len(stale)} words' stems missing or lower, e.g. {stale[:5]}: rebuild the file"


def test_chinese_entries_are_short_cjk_strings_no_more_common_than_their_characters() -> None:
    _, sections = shipped_sections()
    zh = sections["zh"]
    assert all(1 <= len(t) <= 4 and all(word_prior._is_cjk(ch) for ch in t) for t in zh)
    assert sum(len(t) == 1 for t in zh) > 5_000
    weaker = [t for t, v in zh.items() if len(t) > 1 and any(zh.get(ch, -1) < v for ch in t)]
    assert not weaker, weaker[:5]


# -- lookups -----------------------------------------------------------------------------------


@pytest.mark.parametrize("word", COMMON)
def test_everyday_words_are_common(word: str) -> None:
    assert commonness(word) >= 0.7, (word, zipf(word))


@pytest.mark.parametrize("word", RARE)
def test_topic_words_are_rare_or_much_less_common(word: str) -> None:
    assert commonness(word) <= 0.2, (word, zipf(word))
    assert all(commonness(word) + 0.5 <= commonness(c) for c in COMMON)


def test_function_words_are_at_the_top_and_values_are_zipf() -> None:
    assert zipf("the") == pytest.approx(7.6) and commonness("the") == 1.0
    assert commonness("这个") == 1.0 and commonness("可以") == 1.0
    assert zipf("problem") == pytest.approx(5.4)  # Google Books: 5.3 per 10,000 words, Zipf 5.4
    assert zipf("一般") == pytest.approx(5.7)


def test_english_case_is_folded_and_unknown_strings_are_rare() -> None:
    assert zipf("The") == zipf("THE") == zipf("the")
    for token in ("", "kubernetes", "会脑", "一般来说是的", "don't", "3.11", "Müller"):
        assert zipf(token) is None and commonness(token) == 0.0


def test_a_character_counts_its_occurrences_inside_words() -> None:
    """"人" on its own is a rarer word than "人" is a character of running text."""
    assert zipf("人") is not None and zipf("人") > zipf("的") - 0.5
    assert zipf("锁") is not None and zipf("复制") is not None
    assert zipf("复制槽") is None  # a compound is not estimated from its parts


def test_anchor_lookups_use_stems_and_skip_exact_anchors() -> None:
    assert anchor_zipf(stem("moving")) == anchor_zipf("mov") is not None
    assert anchor_zipf("mov") >= zipf("moving")
    assert zipf("mov") is None  # the stem is not an English word
    assert anchor_zipf(stem("problems")) == anchor_zipf("problem") >= zipf("problem")
    for anchor in ("#asyncio.gather", "`ttl`", '"fencing token"', "#3.11", "2022", ""):
        assert anchor_zipf(anchor) is None and anchor_commonness(anchor) == 0.0
    assert anchor_zipf("一般") == zipf("一般")


def test_the_selectors_anchors_of_a_message_get_sensible_commonness() -> None:
    anchors = extract("Usually the problem with sourdough is that the yeast needs time; 酵母一般不能放太久").counts
    values = {a: anchor_commonness(a) for a in anchors}
    assert values["usually"] >= 0.7 and values["problem"] >= 0.7
    assert values["sourdough"] == 0.0 and values["yeast"] < 0.5
    assert values["酵母"] < 0.2 and values["一般"] >= 0.7


def test_commonness_is_a_clamped_linear_ramp_in_zipf() -> None:
    assert commonness_of_zipf(None) == 0.0
    assert commonness_of_zipf(RARE_ZIPF) == 0.0 and commonness_of_zipf(RARE_ZIPF - 1) == 0.0
    assert commonness_of_zipf(COMMON_ZIPF) == 1.0 and commonness_of_zipf(8.0) == 1.0
    assert commonness_of_zipf((RARE_ZIPF + COMMON_ZIPF) / 2) == pytest.approx(0.5)
    ramp = [commonness_of_zipf(RARE_ZIPF + i / 10) for i in range(31)]
    assert ramp == sorted(ramp) and len(set(ramp)) == 31


@pytest.mark.parametrize("function", [zipf, commonness, anchor_zipf, anchor_commonness])
def test_a_non_string_is_refused_with_the_librarys_type_error(function) -> None:
    with pytest.raises(InvalidTypeError, match="must be a str, got int") as info:
        function(3)
    assert isinstance(info.value, TypeError)


# -- loading -----------------------------------------------------------------------------------


def test_the_file_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = word_prior._load

    def counting() -> word_prior._Tables:
        calls.append(1)
        return real()

    monkeypatch.setattr(word_prior, "_TABLES", None)
    monkeypatch.setattr(word_prior, "_load", counting)
    assert zipf("the") == zipf("the") and commonness("一般") and prior_info()
    assert calls == [1]


def test_a_section_is_built_only_when_a_lookup_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(word_prior, "_TABLES", None)
    assert zipf("usually") is not None and anchor_zipf("usual") is not None
    assert sorted(word_prior._tables()._built) == ["en", "en_stem"]  # an English-only chat builds no Chinese table
    assert anchor_zipf("一般") == zipf("一般") is not None
    assert sorted(word_prior._tables()._built) == ["en", "en_stem", "zh"]


def test_a_missing_file_raises_the_librarys_error_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(word_prior, "_TABLES", None)
    monkeypatch.setattr(word_prior, "DATA_FILE", "no_such_prior.tsv.gz")
    with pytest.raises(WordPriorError, match="reinstall context-gatekeeper") as info:
        zipf("the")
    assert isinstance(info.value, GatekeeperError) and isinstance(info.value, RuntimeError)
    assert word_prior._TABLES is None  # nothing half-loaded is kept
    monkeypatch.setattr(word_prior, "DATA_FILE", "word_prior.tsv.gz")
    assert zipf("the") == pytest.approx(7.6)


@pytest.mark.parametrize(
    "text, message",
    [
        ("# format: context-gatekeeper-word-prior/1\nen\tthe\n", "corrupt"),
        ("# format: context-gatekeeper-word-prior/1\nen\tseventy\tthe\n", "corrupt"),
        ("# format: context-gatekeeper-word-prior/1\nfr\t70\tle\n", "corrupt"),
        ("# format: other/9\nen\t76\tthe\n", "has format 'other/9'"),
    ],
)
def test_a_corrupt_file_is_refused_with_what_to_do(text: str, message: str) -> None:
    with pytest.raises(WordPriorError, match=message) as info:
        word_prior._parse(text, "word_prior.tsv.gz")
    assert "reinstall" in str(info.value)


# -- the builder -------------------------------------------------------------------------------

ENGLISH = "the 9000\nmoves 300\nmoved 200\nyeast 20\nhi 10\ndon't 50\n"
CHINESE = "一般 900 a\n一 100 m\n般若 50 n\n酵母 20 n\nB超 3 n\n一般来说 10 l\n"


def test_the_builder_is_deterministic_and_its_output_loads() -> None:
    builder = load_builder()
    data = builder.build(ENGLISH, CHINESE, min_zipf=3.0, versions={"symspellpy": "x", "jieba": "y"})
    shuffled = builder.build("".join(reversed(ENGLISH.splitlines(True))), "".join(reversed(CHINESE.splitlines(True))),
                             min_zipf=3.0, versions={"symspellpy": "x", "jieba": "y"})
    assert data == shuffled  # same counts, same bytes, whatever the input order
    assert data[4:8] == b"\0\0\0\0"  # gzip mtime 0
    tables = word_prior._parse(gzip.decompress(data).decode("utf-8"), "built")
    en_total, zh_total = 9000 + 300 + 200 + 20 + 10, 900 + 100 + 50 + 20 + 10
    assert tables.en["the"] == round(10 * math.log10(9000 / en_total * 1e9))
    assert "don't" not in tables.en  # the selector never sees an apostrophe
    assert tables.en_stem["mov"] == round(10 * math.log10(500 / en_total * 1e9))
    assert tables.zh["一"] == round(10 * math.log10((900 + 100 + 10) / zh_total * 1e9))  # in 一般, 一, 一般来说
    assert tables.zh["一般"] == round(10 * math.log10((900 + 10) / zh_total * 1e9))
    assert tables.zh["一般来说"] > 0 and "B超" not in tables.zh and "B" not in tables.zh
    assert tables.info["build"] == "python benchmarks/build_word_prior.py --min-zipf 3.0"
    assert "symspellpy x" in tables.info["en_source"] and "jieba y" in tables.info["zh_source"]


def test_the_builder_leaves_out_what_is_below_the_floor() -> None:
    builder = load_builder()
    data = builder.build(ENGLISH, CHINESE, min_zipf=8.5)
    tables = word_prior._parse(gzip.decompress(data).decode("utf-8"), "built")
    assert set(tables.en) == {"the"} and "yeast" not in tables.en_stem


def test_the_builder_on_the_installed_sources_gives_the_shipped_bytes(tmp_path: Path) -> None:
    pytest.importorskip("jieba", reason="the builder's Chinese source: pip install jieba==0.42.1")
    pytest.importorskip("symspellpy", reason="the builder's English source: pip install symspellpy==6.10.1")
    def build(name: str) -> bytes:
        subprocess.run([sys.executable, str(BUILDER), "--out", str(tmp_path / name)], check=True,
                       capture_output=True, cwd=ROOT)
        return (tmp_path / name).read_bytes()

    built = build("a.tsv.gz")
    header = word_prior._parse(gzip.decompress(built).decode("utf-8"), "built").info
    if (header["en_source"], header["zh_source"]) == (prior_info()["en_source"], prior_info()["zh_source"]):
        # the same bytes as the build that made the shipped file: the builder is reproducible
        # across runs, so a second run here would prove nothing more
        assert built == SHIPPED.read_bytes(), "the shipped file is stale: run python benchmarks/build_word_prior.py"
        return
    assert build("b.tsv.gz") == built, "two runs of the builder on the same sources differ"
    pytest.skip("other source versions are installed than the shipped file was built from (two runs agree)")
