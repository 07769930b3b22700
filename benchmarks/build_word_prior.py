"""Build the general-language word-frequency prior the selector ships with.

This script derives ``shared/context_gatekeeper/selection/data/word_prior.tsv.gz`` (read by
``context_gatekeeper.selection.word_prior``) from two word-frequency lists that PyPI packages
ship.  Both packages are build-time tools only: the library never imports them, and neither is
in any extra of ``pyproject.toml``, because the data file is committed and CI does not rebuild
it.  To rebuild it::

    pip install jieba==0.42.1 symspellpy==6.10.1
    python benchmarks/build_word_prior.py            # writes the packaged file
    python benchmarks/build_word_prior.py --out /tmp/word_prior.tsv.gz

Sources and licences
--------------------
* **English**: ``frequency_dictionary_en_82_765.txt`` from ``symspellpy`` 6.10.1 (package
  licence MIT, Copyright (c) 2025 mmb L, (c) 2021 Wolf Garbe).  SymSpell's documentation says
  the list was made by intersecting the Google Books Ngram counts (CC BY 3.0) with SCOWL, the
  Spell Checker Oriented Word Lists by Kevin Atkinson (a permissive, MIT-style licence), and
  truncating it to about 80,000 words.  The counts are Google Books Ngram counts: CC BY 3.0
  asks for attribution, which the file's header gives; it is not share-alike, so the derived
  file can ship inside an MIT package.  (wordfreq's data was not used: it is CC BY-SA 4.0.)
* **Chinese**: ``dict.txt`` from ``jieba`` 0.42.1 (MIT, Copyright (c) 2013 Sun Junyi): about
  349,000 words, each with a corpus count and a part-of-speech tag.

What the file holds
-------------------
Frequencies as **Zipf values** (log10 of occurrences per billion words; "the" is about 7.6, a
word seen once per million words is 3.0), rounded to 0.1 and stored as integer tenths, in three
sections:

* ``en``: English words (``[a-z]+`` only; the selector never sees an apostrophe) with a Zipf
  value of at least ``--min-zipf``.  The total is the sum of the list's counts.
* ``en_stem``: the same counts summed per stem of the selector's own light stemmer
  (``context_gatekeeper.selection.anchors.stem``: "moves", "moved", "moving" -> "mov"), because
  the selector's word anchors are stems.  Rebuild the file when the stemmer changes
  (``tests/test_word_prior.py`` checks the two agree).
* ``zh``: single CJK characters and jieba words of 2 to 4 CJK characters.  A string's count is
  how often it occurs inside the words of jieba's corpus, as a word or as part of a longer word
  (each jieba word's count added once per occurrence of the string in it), so a character's
  value is its frequency in running text, not its rare use as a word on its own ("人" alone is
  a word 313,209 times, inside words 1,021,825 times).  The total is the sum of jieba's word
  counts, so ``zh`` values are per billion *words* like the English ones.

A line is ``<section> TAB <zipf tenths> TAB <token> <token> ...`` (tokens of one section and
value, sorted by code point), after ``# key: value`` header lines.  The output is
deterministic: the same sources give the same bytes (sorted lines, gzip with ``mtime=0`` and no
file name).
"""

from __future__ import annotations

import argparse
import gzip
import io
import math
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata, resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "shared" / "context_gatekeeper" / "selection" / "data" / "word_prior.tsv.gz"
FORMAT = "context-gatekeeper-word-prior/1"
DEFAULT_MIN_ZIPF = 3.0
"""Entries below this Zipf value (one occurrence per million words) are left out: the loader
answers ``None`` (rare) for them."""

ENGLISH_PACKAGE, ENGLISH_FILE = "symspellpy", "frequency_dictionary_en_82_765.txt"
CHINESE_PACKAGE, CHINESE_FILE = "jieba", "dict.txt"
ENGLISH_WORD = re.compile(r"[a-z]+")
CJK_WORD = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
"""The CJK ranges ``context_gatekeeper.selection.anchors`` cuts anchors from."""
MAX_CHINESE_LENGTH = 4


def zipf(count: float, total: float) -> float:
    """Zipf value: log10 of occurrences per billion words."""
    return math.log10(count / total * 1e9)


def tenths(value: float) -> int:
    """``value`` rounded half up to a multiple of 0.1, as an integer number of tenths."""
    return math.floor(value * 10 + 0.5)


def read_english(text: str) -> dict[str, int]:
    """``word -> count`` from SymSpell's ``word count`` lines, ``[a-z]+`` words only."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        word, count = line.split()
        if ENGLISH_WORD.fullmatch(word):
            counts[word] = counts.get(word, 0) + int(count)
    return counts


def read_chinese(text: str) -> dict[str, int]:
    """``word -> count`` from jieba's ``word count tag`` lines, all-CJK words only."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        word, count = line.split(" ")[:2]
        if CJK_WORD.fullmatch(word):
            counts[word] = counts.get(word, 0) + int(count)
    return counts


def stem_counts(counts: Mapping[str, int]) -> Counter[str]:
    """Counts summed per stem of the selector's stemmer."""
    from context_gatekeeper.selection.anchors import stem

    out: Counter[str] = Counter()
    for word, count in counts.items():
        out[stem(word)] += count
    return out


def in_word_counts(counts: Mapping[str, int]) -> Counter[str]:
    """How often each single character and each word of 2-4 characters occurs inside the words
    of the corpus (as the word itself or as part of a longer one)."""
    wanted = {w for w in counts if 2 <= len(w) <= MAX_CHINESE_LENGTH}
    out: Counter[str] = Counter()
    for word, count in counts.items():
        for ch in word:
            out[ch] += count
        for n in range(2, min(MAX_CHINESE_LENGTH, len(word)) + 1):
            for i in range(len(word) - n + 1):
                piece = word[i : i + n]
                if piece in wanted:
                    out[piece] += count
    return out


def section_lines(name: str, counts: Mapping[str, int], total: int, min_zipf: float) -> list[str]:
    """The lines of one section: one per Zipf tenth, highest first, tokens sorted."""
    floor = tenths(min_zipf)
    by_value: dict[int, list[str]] = {}
    for token, count in counts.items():
        value = tenths(zipf(count, total))
        if value >= floor:
            by_value.setdefault(value, []).append(token)
    return [f"{name}\t{value}\t{' '.join(sorted(by_value[value]))}" for value in sorted(by_value, reverse=True)]


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def build(english_text: str, chinese_text: str, *, min_zipf: float = DEFAULT_MIN_ZIPF,
          versions: Mapping[str, str] | None = None) -> bytes:
    """The gzipped file for the two sources' texts (pure: same input, same bytes)."""
    versions = dict(versions or {})
    english = read_english(english_text)
    chinese = read_chinese(chinese_text)
    en_total = sum(english.values())
    zh_total = sum(chinese.values())
    header = {
        "format": FORMAT,
        "unit": "Zipf value = log10(occurrences per billion words), in integer tenths",
        "min_zipf": f"{min_zipf:.1f}",
        "sections": "en (English words), en_stem (English counts summed per "
                    "context_gatekeeper.selection.anchors.stem), zh (CJK characters and 2-4 character words, "
                    "occurrences inside words)",
        "en_source": f"{ENGLISH_FILE} from the PyPI package {ENGLISH_PACKAGE} "
                     f"{versions.get(ENGLISH_PACKAGE, 'unknown')}: Google Books Ngram counts intersected "
                     f"with SCOWL (Kevin Atkinson) by Wolf Garbe for SymSpell; total {en_total} words",
        "en_licence": "CC BY 3.0 (Google Books Ngram counts; attribution: Google Books Ngram Viewer data), "
                      "SCOWL licence (permissive, MIT-style), list distributed in symspellpy under the MIT licence",
        "zh_source": f"{CHINESE_FILE} from the PyPI package {CHINESE_PACKAGE} "
                     f"{versions.get(CHINESE_PACKAGE, 'unknown')}; total {zh_total} words",
        "zh_licence": "MIT (jieba, Copyright (c) 2013 Sun Junyi)",
        "build": f"python benchmarks/build_word_prior.py --min-zipf {min_zipf:.1f}",
    }
    lines = [f"# {key}: {value}" for key, value in header.items()]
    lines += section_lines("en", english, en_total, min_zipf)
    lines += section_lines("en_stem", stem_counts(english), en_total, min_zipf)
    lines += section_lines("zh", in_word_counts(chinese), zh_total, min_zipf)
    raw = ("\n".join(lines) + "\n").encode("utf-8")
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as out:
        out.write(raw)
    return buffer.getvalue()


def installed_sources() -> tuple[str, str]:
    """The two source texts from the installed packages (``ModuleNotFoundError`` if missing)."""
    english = resources.files(ENGLISH_PACKAGE).joinpath(ENGLISH_FILE).read_text(encoding="utf-8")
    chinese = resources.files(CHINESE_PACKAGE).joinpath(CHINESE_FILE).read_text(encoding="utf-8")
    return english, chinese


def summary(data: bytes) -> Iterable[str]:
    """Per-section entry counts of a built file, for the console."""
    sizes: Counter[str] = Counter()
    for line in gzip.decompress(data).decode("utf-8").splitlines():
        if not line.startswith("#"):
            section, _, tokens = line.split("\t")
            sizes[section] += len(tokens.split(" "))
    yield f"{len(data):,} bytes gzipped"
    for section, n in sizes.items():
        yield f"{section}: {n:,} entries"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write (default: the packaged file)")
    parser.add_argument("--min-zipf", type=float, default=DEFAULT_MIN_ZIPF,
                        help="leave out entries below this Zipf value (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        english, chinese = installed_sources()
    except ModuleNotFoundError as exc:
        print(f"{exc.name} is not installed: pip install jieba==0.42.1 symspellpy==6.10.1", file=sys.stderr)
        return 2
    versions = {name: version(name) for name in (ENGLISH_PACKAGE, CHINESE_PACKAGE)}
    data = build(english, chinese, min_zipf=args.min_zipf, versions=versions)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {args.out}")
    for line in summary(data):
        print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
