"""A general-language word-frequency prior: how common a word is in the language, not in this chat.

IDF over one conversation calls a word distinctive when *this history* rarely uses it, so
"usually", "problem", "一般" or "不能" count as evidence the first time they appear.  This module
says how common a word is in general English or Chinese, so a caller can weigh that in.

The numbers come from ``data/word_prior.tsv.gz``, built by ``benchmarks/build_word_prior.py``
from two permissively licensed lists (its header names them; see :func:`prior_info`):

* English: SymSpell's ``frequency_dictionary_en_82_765.txt`` as shipped in ``symspellpy``
  (Google Books Ngram counts, CC BY 3.0, intersected with the SCOWL word lists);
* Chinese: jieba's ``dict.txt`` (MIT).

Values are **Zipf values**: log10 of occurrences per billion words, to 0.1.  "the" is 7.6, "would"
6.0, "problem" 5.4, "yeast" 4.1, a word seen once per million words 3.0.  The file keeps entries
of Zipf 3.0 and above (``prior_info()["min_zipf"]``); anything else is *rare* and gets ``None``.

Tokens
------
* English: a lower-case word (upper case is folded).  :func:`zipf` looks the word up as
  written; :func:`anchor_zipf` takes the selector's word anchors, which are stems of
  :func:`context_gatekeeper.selection.anchors.stem` ("moving" -> "mov"), and answers the
  summed frequency of all the words with that stem.
* Chinese: one CJK character or a string of 2-4 characters.  A character's value is its
  frequency inside the words of running text; a string's value is how often it occurs as a
  word or inside a longer word.  A string that is not a word of the dictionary (a bigram across
  a word boundary such as "会脑", or a new compound such as "复制槽") gets ``None``: it is *not*
  estimated from its parts, because a technical term is very often a compound of common
  characters ("复制" + "槽"), and an estimate from the parts would call it common exactly
  where it is most distinctive.

Commonness
----------
:func:`commonness_of_zipf` maps a Zipf value to [0, 1] by one linear ramp on the log scale::

    commonness = clamp((zipf - RARE_ZIPF) / (COMMON_ZIPF - RARE_ZIPF), 0, 1)      (None -> 0)

so 0 at or below one occurrence per million words (``RARE_ZIPF`` = 3.0) and 1 at or above one
per thousand (``COMMON_ZIPF`` = 6.0, function-word level: "would", "这个", "可以").  A linear ramp
in Zipf is linear in log-frequency, the scale IDF itself lives on.

The file is read once, on the first call, thread-safely, and kept for the process; each section's
table (English words 31,000 entries, English stems 23,000, Chinese 58,000) is built the first time
a lookup needs it.  Every function here is pure given the file, and uses the standard library only.
"""

from __future__ import annotations

import gzip
import threading
from importlib import resources
from itertools import repeat

from ..errors import GatekeeperError, InvalidTypeError

__all__ = [
    "preload",
    "RARE_ZIPF",
    "COMMON_ZIPF",
    "WordPriorError",
    "zipf",
    "commonness",
    "anchor_zipf",
    "anchor_commonness",
    "commonness_of_zipf",
    "prior_info",
]

RARE_ZIPF = 3.0
"""Zipf value at and below which a word has commonness 0: one occurrence per million words
(also the file's ``min_zipf``: a word not in the file is at most this common)."""

COMMON_ZIPF = 6.0
"""Zipf value at and above which a word has commonness 1: one occurrence per thousand words,
the level of function words ("would", "about", "这个", "可以")."""

DATA_FILE = "word_prior.tsv.gz"
"""The data file, in ``context_gatekeeper/selection/data/``."""

FORMAT = "context-gatekeeper-word-prior/1"
"""The format line the file must carry (``# format: ...``)."""

_SECTIONS = ("en", "en_stem", "zh")
_EXACT_PREFIXES = ("#", "`", '"')


class WordPriorError(GatekeeperError, RuntimeError):
    """The packaged word-prior data file is missing or unreadable: the installation is
    damaged; reinstall context-gatekeeper (or rebuild the file with
    ``benchmarks/build_word_prior.py`` in a checkout)."""


class _Tables:
    """The loaded file: its header, and one ``token -> Zipf tenths`` table per section, each
    built on first use (an English-only chat never builds the 58,000 Chinese entries)."""

    def __init__(self, info: dict[str, str], lines: dict[str, list[tuple[int, str]]]) -> None:
        self.info = info
        self._lines = lines  # section -> [(tenths, "token token ...")], checked by _parse
        self._built: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def table(self, section: str) -> dict[str, int]:
        """The ``token -> tenths`` table of ``section`` (built once, thread-safely)."""
        table = self._built.get(section)
        if table is None:
            with self._lock:
                table = self._built.get(section)
                if table is None:
                    table = {}
                    for value, tokens in self._lines.pop(section):  # the text is not needed after
                        table.update(zip(tokens.split(" "), repeat(value)))  # the fastest build measured
                    self._built[section] = table
        return table

    @property
    def en(self) -> dict[str, int]:
        return self.table("en")

    @property
    def en_stem(self) -> dict[str, int]:
        return self.table("en_stem")

    @property
    def zh(self) -> dict[str, int]:
        return self.table("zh")


_LOCK = threading.Lock()
_TABLES: _Tables | None = None


def _is_cjk(ch: str) -> bool:
    """The CJK ranges :mod:`anchors` cuts anchors from."""
    return "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff"


def _parse(text: str, source: str) -> _Tables:
    """The header and the checked lines of the file's text (the tables are built on first use)."""
    info: dict[str, str] = {}
    lines: dict[str, list[tuple[int, str]]] = {name: [] for name in _SECTIONS}
    try:
        for line in text.splitlines():
            if line.startswith("#"):
                key, _, value = line[1:].partition(":")
                info[key.strip()] = value.strip()
                continue
            section, value, tokens = line.split("\t")
            lines[section].append((int(value), tokens))
    except (ValueError, KeyError) as exc:
        raise WordPriorError(
            f"{source} is corrupt ({exc!r}); reinstall context-gatekeeper or rebuild the file "
            "with benchmarks/build_word_prior.py"
        ) from exc
    if info.get("format") != FORMAT:
        raise WordPriorError(
            f"{source} has format {info.get('format')!r}, this version reads {FORMAT!r}; "
            "reinstall context-gatekeeper"
        )
    return _Tables(info, lines)


def _load() -> _Tables:
    resource = resources.files(__package__ or "context_gatekeeper.selection").joinpath("data").joinpath(DATA_FILE)
    try:
        text = gzip.decompress(resource.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise WordPriorError(
            f"cannot read the word-prior file {resource} ({exc}); reinstall context-gatekeeper"
        ) from exc
    return _parse(text, str(resource))


def preload() -> None:
    """Read the file now (once per process), so no later selection reads it: a gate built
    before an event loop runs never blocks the loop with this file's I/O."""
    _tables()


def _tables() -> _Tables:
    """The loaded file, read on the first call only (thread-safe)."""
    global _TABLES
    tables = _TABLES
    if tables is None:
        with _LOCK:
            if _TABLES is None:
                _TABLES = _load()
            tables = _TABLES
    return tables


def _check(token: object, name: str) -> str:
    if not isinstance(token, str):
        raise InvalidTypeError(f"{name} must be a str, got {type(token).__name__}")
    return token


def _value(tenths: int | None) -> float | None:
    return None if tenths is None else tenths / 10


def zipf(token: str) -> float | None:
    """The Zipf value of a word (log10 of occurrences per billion words, to 0.1), or ``None``
    when the word is rare (below Zipf 3.0) or not a word of the lists.

    ``token`` is an English word (case is folded) or a Chinese string of 1-4 characters; see
    the module docstring for what a Chinese value counts and why an unknown compound is ``None``.

    >>> zipf("the"), zipf("problem"), zipf("一般"), zipf("kubernetes")
    (7.6, 5.4, 5.7, None)
    """
    token = _check(token, "token")
    if not token:
        return None
    tables = _tables()
    if _is_cjk(token[0]):
        return _value(tables.zh.get(token))
    return _value(tables.en.get(token.lower()))


def anchor_zipf(anchor: str) -> float | None:
    """The Zipf value of one of the selector's anchors (see :mod:`anchors`), or ``None``.

    A word anchor is a stem, looked up among stems (its value sums every word with that stem:
    "mov" covers "move", "moves", "moved", "moving"); a CJK anchor as in :func:`zipf`; an exact
    anchor (``#identifier``, a backtick code span, a quoted phrase) and a number are ``None``.

    >>> anchor_zipf("mov"), anchor_zipf("problem"), anchor_zipf("#asyncio.gather")
    (5.5, 5.7, None)
    """
    anchor = _check(anchor, "anchor")
    if not anchor or anchor.startswith(_EXACT_PREFIXES):
        return None
    tables = _tables()
    if _is_cjk(anchor[0]):
        return _value(tables.zh.get(anchor))
    return _value(tables.en_stem.get(anchor))


def commonness_of_zipf(value: float | None) -> float:
    """``clamp((value - RARE_ZIPF) / (COMMON_ZIPF - RARE_ZIPF), 0, 1)``; ``None`` (rare) -> 0.

    >>> commonness_of_zipf(None), commonness_of_zipf(4.5), commonness_of_zipf(7.6)
    (0.0, 0.5, 1.0)
    """
    if value is None:
        return 0.0
    return min(1.0, max(0.0, (value - RARE_ZIPF) / (COMMON_ZIPF - RARE_ZIPF)))


def commonness(token: str) -> float:
    """How common a word is in the language, in [0, 1]: 1 for a function-word-level word, 0 for
    a rare one (``commonness_of_zipf(zipf(token))``).

    >>> commonness("the"), commonness("sourdough"), commonness("这个")
    (1.0, 0.0, 1.0)
    """
    return commonness_of_zipf(zipf(token))


def anchor_commonness(anchor: str) -> float:
    """:func:`commonness` for one of the selector's anchors (``commonness_of_zipf(anchor_zipf(anchor))``)."""
    return commonness_of_zipf(anchor_zipf(anchor))


def prior_info() -> dict[str, str]:
    """The data file's header: ``format``, ``unit``, ``min_zipf``, ``sections``, the sources
    and licences (``en_source``, ``en_licence``, ``zh_source``, ``zh_licence``) and ``build``
    (the command that made it).  A copy: changing it changes nothing here."""
    return dict(_tables().info)
