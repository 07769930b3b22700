"""Anchor extraction: the small units of text that selection matches on.

An anchor is one of (the technical report's list, extended; see
``docs/architecture.md#data-flow-of-a-select``):

* a CJK character bigram (``"脑裂"``) or single character (``"锁"``), within the
  pieces left after cutting a run at stopwords, particles and pronouns: Chinese
  has no spaces, so n-grams stand in for words;
* an English word, lower-cased and lightly stemmed (``"paintings"`` → ``"paint"``),
  stopwords removed; numbers of two or more digits;
* the parts of a code identifier (``asyncio.gather`` → ``asyncio``, ``gather``;
  ``TaskGroup`` → ``task``, ``group``; ``max_retries`` → ``max``, ``retries``), and
  the whole identifier as an *exact* anchor (``"#asyncio.gather"``);
* a version number (``"#3.11"``), a backtick code span (``"`ttl`"``) and a quoted
  phrase (``'"fencing token"'``), all exact anchors;
* for a Chinese technical term of :mod:`glossary`, the English words engineers use
  for it (``"索引"`` → ``"index"``), so mixed-language chat meets itself.

Exact anchors start with ``#``, a backtick or a double quote, so an anchor's kind
is a pure function of its text (:func:`anchor_kind`).  All functions here are pure.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from functools import lru_cache

from .glossary import TERMS
from .stopwords import CHINESE_SPLIT_CHARS, CHINESE_STOP_CHARS, CHINESE_STOPWORDS, ENGLISH_STOPWORDS

__all__ = [
    "AnchorKind",
    "TextAnchors",
    "normalise",
    "visible",
    "without_invisible",
    "without_reasoning_scaffold",
    "stem",
    "split_identifier",
    "extract",
    "anchor_set",
    "anchors_near",
    "anchor_kind",
    "trie_pattern",
    "has_cjk",
]


class AnchorKind:
    """The kinds an anchor can have (see :func:`anchor_kind`)."""

    WORD = "word"
    CJK_BIGRAM = "cjk_bigram"
    CJK_CHAR = "cjk_char"
    EXACT = "exact"


@dataclass(frozen=True)
class TextAnchors:
    """The anchors of one text.

    Attributes:
        counts: anchor -> number of occurrences (term frequency).
        length: total occurrences; the document length that BM25 normalises by.
    """

    counts: Counter[str]
    length: int

    @classmethod
    def of(cls, anchors: Iterable[str]) -> "TextAnchors":
        items = anchors if isinstance(anchors, list) else list(anchors)  # its length without a second pass
        return cls(Counter(items), len(items))


_CJK_CLASS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_ALL = "*+" if sys.version_info >= (3, 11) else "*"
"""``*`` for the runs of an identifier, possessive where the engine has it (3.11): the same
matches (a run always ends before a character it cannot hold, and a joiner is none of
them, so giving characters back never lets the pattern match differently), without the
engine keeping a way back at each character: the identifier scans run about 40% faster."""
_QUOTED = re.compile(r'"([^"\n]{1,60})"|“([^”\n]{1,60})”|「([^」\n]{1,60})」|『([^』\n]{1,60})』')
_CODE = re.compile(r"`([^`\n]{1,80})`")
_VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+)+(?![\w])", re.IGNORECASE)
_START = rf"[^\W\d{_CJK_CLASS}]"  # a letter (any script but CJK) or "_"
_REST = rf"[^\W{_CJK_CLASS}]{_ALL}"  # letters, digits, "_"
_IDENTIFIER = re.compile(rf"{_START}{_REST}(?:(?:\.|::|->){_START}{_REST}){_ALL}")
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_DIGIT = re.compile(r"\d")  # what _VERSION and the numbers of _TOKEN_OR_NUMBER need to match at all
_DOTTED = re.compile(r"\d\.\d")  # what _VERSION needs to match at all
_NUMBER = re.compile(r"\d\d")  # what the numbers of _TOKEN_OR_NUMBER need to match at all
_TOKEN_OR_NUMBER = re.compile(rf"({_IDENTIFIER.pattern})|(\d{{2,}})")
"""An identifier-like token, or a number of two digits or more outside one ("100-150元",
"in 2022"; not the "2" of "v2" nor the "12" of "sha12")."""
_ASCII_IDENTIFIER = re.compile(rf"[A-Za-z_]\w{_ALL}(?:(?:\.|::|->)[A-Za-z_]\w{_ALL}){_ALL}", re.ASCII)
_ASCII_TOKEN_OR_NUMBER = re.compile(rf"({_ASCII_IDENTIFIER.pattern})|(\d{{2,}})", re.ASCII)
"""The two patterns above for ASCII text, where they match exactly the same (a letter is
``[A-Za-z]``, ``\\w`` is ``[A-Za-z0-9_]``), with plain ASCII classes: faster to scan."""
_ASCII_WORD = re.compile(rf"[A-Za-z_]\w{_ALL}", re.ASCII)
_ASCII_WORD_OR_NUMBER = re.compile(rf"({_ASCII_WORD.pattern})|(\d{{2,}})", re.ASCII)
"""The two ASCII patterns without their joined parts: where no joiner is followed by a
letter or "_" (:func:`_joined`) they match the same as the two above.  :func:`extract` reads
such text from its word runs instead (:func:`_word_runs`, :func:`_words_and_numbers`, about a
third of a scan's cost); these patterns are what the tests check the runs against."""
_DOT_START = re.compile(r"\.[A-Za-z_]")
_SPACED = bytes(c if chr(c).isascii() and (chr(c).isalnum() or chr(c) == "_") else 32 for c in range(256))
"""A ``bytes.translate`` table turning every byte but ``[A-Za-z0-9_]`` (``\\w`` of the ASCII
patterns) into a space."""
_DIGITS = "0123456789"


def _joined(text: str) -> bool:
    """Whether ``text`` may hold an identifier joined by ``.``, ``::`` or ``->`` (a joiner
    followed by what starts an identifier; for "::" and "->", their mere presence)."""
    return "::" in text or "->" in text or _DOT_START.search(text) is not None
_SEPARATORS = re.compile(r"\.|::|->|_")
_LOWER_UPPER = re.compile(r"[a-z][A-Z]")
_LETTER_DIGIT = re.compile(r"[A-Za-z]\d|\d[A-Za-z]")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_VOWELS = frozenset("aeiouy")
_ENDS_IN_ED = frozenset(
    "embed speed bleed breed greed proceed exceed succeed indeed shred hundred naked wicked sacred "
    "kindred seaweed tweed sled".split()
)
"""Words whose "-ed" is not a past tense (so "embed" meets "embedding")."""
_UNDOUBLE = frozenset("bdgmnprt")


_INVISIBLE = re.compile("[\u00ad\u200b\u200c\u200d\u2060\ufeff]")
"""Characters that show nothing and may sit inside a word of text pasted from a web page or a
PDF: soft hyphen, zero-width space, zero-width non-joiner and joiner, word joiner, byte-order
mark.  None is a word character, so each would split its word ("Kuber\u00adnetes" into "kuber"
and "net"); :func:`visible` removes them.  (Bidirectional marks are left alone: they sit between
words, not inside them.)  A character class, not ``str.translate``: on text beyond ASCII the
engine's scan costs about a tenth of a translation through a table, and finding none returns
the text itself."""


def without_invisible(text: str) -> str:
    """``text`` with the invisible characters of :data:`_INVISIBLE` removed, nothing else
    changed (ASCII text holds none and is returned as it is)."""
    return text if text.isascii() else _INVISIBLE.sub("", text)


def visible(text: str) -> str:
    """``text`` NFKC-normalised (full-width → half-width) with the invisible characters of
    :data:`_INVISIBLE` removed first (:func:`without_invisible`): what every anchor and cue
    is read from.  They are removed before normalising (no character normalises to one of
    them), so the result is NFKC-normal: a combining mark after a removed joiner composes
    with its letter.  ASCII text is returned as it is.

    >>> visible("Kuber\u00adnetes\u200b ｖ２"), visible("plain")
    ('Kubernetes v2', 'plain')
    """
    if text.isascii():
        return text
    return unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))


_REASONING_START = re.compile(r"\s*Thought:")
_REASONING_LINE = re.compile(
    r"^[ \t]*(?:Thought:[^\n]*(?:\n|$)|(?:Action Input|Action|Observation|Final Answer|Answer(?: \(Starts With\))?):[ \t]*)",
    re.MULTILINE,
)


def without_reasoning_scaffold(text: str) -> str:
    """An agent's ReAct reasoning as its content alone: a text that starts with ``Thought:``
    (LlamaIndex's ``ReActAgent`` stores each answer so, LangChain's ReAct prompts write the
    same) loses its ``Thought:`` lines and the ``Action:``, ``Action Input:``,
    ``Observation:`` and ``Answer:`` labels; the tool names, inputs, observations and the
    answer stay.  Every answer carries the same scaffold ("I can answer without using any
    more tools. I'll use the user's language to answer"), so read as words it tied every
    topic to every other and a return kept the other topic's turns.  Any other text is
    returned as it is.  What is read, not what is priced: the scaffold is sent.

    >>> without_reasoning_scaffold("Thought: I can answer now.\\nAnswer: Use a watchdog.")
    'Use a watchdog.'
    >>> without_reasoning_scaffold("Answer: this starts with no thought")
    'Answer: this starts with no thought'
    """
    if not _REASONING_START.match(text):
        return text
    return _REASONING_LINE.sub("", text)


def normalise(text: str) -> str:
    """:func:`visible` and case-folded, for cue matching."""
    return visible(text).casefold()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light English stemmer: plurals, ``-ing``, ``-ed`` and a final ``-e``, so
    "move", "moves", "moved" and "moving" meet; words of three letters or fewer stay.

    >>> [stem(w) for w in ("paintings", "painted", "running", "studies", "class", "moved", "move")]
    ['paint', 'paint', 'run', 'study', 'class', 'mov', 'mov']
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word in _ENDS_IN_ED:
        return word
    for suffix in ("ing", "ed"):
        base = word[: -len(suffix)]
        if word.endswith(suffix) and len(base) >= 3 and _VOWELS.intersection(base):
            if len(base) >= 4 and base[-1] == base[-2] and base[-1] in _UNDOUBLE:
                base = base[:-1]
            return base
    if word.endswith("e") and len(word) >= 4:
        word = word[:-1]
    return word


def split_identifier(identifier: str) -> list[str]:
    """Split a code identifier into lower-case parts.

    >>> split_identifier("asyncio.gather"), split_identifier("TaskGroup"), split_identifier("max_retries")
    (['asyncio', 'gather'], ['task', 'group'], ['max', 'retries'])
    """
    parts: list[str] = []
    for chunk in _SEPARATORS.split(identifier):
        if chunk.isascii():
            parts.extend(piece.lower() for piece in _CAMEL.findall(chunk))
        elif chunk:
            parts.append(chunk.casefold())  # no camelCase outside ASCII: "Müller" stays whole
    return parts


def _is_compound(identifier: str) -> bool:
    return (
        any(sep in identifier for sep in (".", "_", "::", "->"))
        or _LOWER_UPPER.search(identifier) is not None
        or _LETTER_DIGIT.search(identifier) is not None
    )


def _word_anchors(word: str) -> tuple[str, ...]:
    if word in ENGLISH_STOPWORDS or len(word) < 2:
        return ()
    stemmed = stem(word)
    return () if stemmed in ENGLISH_STOPWORDS else (stemmed,)  # "lote" stems to "lot"


def _compute_token_anchors(token: str) -> tuple[str, ...]:
    """Anchors of one identifier-like token (:func:`_token_anchors` keeps them)."""
    if token.isalpha() and token.isascii() and token[1:].islower():
        # the common word ("lock", "Redis"): one part, its lower case, and no exact anchor
        # (no separator, no case change inside, no digit); what the general path gives it
        return _word_anchors(token.lower())
    parts = split_identifier(token)
    out: list[str] = []
    if (len(parts) > 1 or _is_compound(token)) and max(map(len, parts), default=0) > 1:
        out.append("#" + token.casefold())  # not for "e.g." or "U.S."
    for part in parts:
        out.extend(_word_anchors(part))
    return tuple(out)


TOKEN_CACHE_SIZE = 131_072
"""Tokens whose anchors the process keeps (:func:`_tokens_anchors`), in a plain dict emptied
when full: new texts are made of words already seen, and a dict lookup costs about a fifth
of a call through ``lru_cache``.  About 100 bytes an entry beyond the strings and tuples:
some 13 MB when full of chat's words (measured: 23 MB of distinct 7-letter words, 38 MB of
distinct log ids, 82 MB of distinct 47-character identifiers of five parts, the most).  A
token longer than :data:`TOKEN_CACHE_MAX_CHARS` is not kept (a blob without separators, a
long dotted path: rare, and each could hold kilobytes); its anchors are computed each time."""
TOKEN_CACHE_MAX_CHARS = 48
_TOKEN_ANCHORS: dict[str, tuple[str, ...]] = {}


def _tokens_anchors(tokens: Iterable[str]) -> list[str]:
    """The anchors of ``tokens``, in order: each token's read from :data:`_TOKEN_ANCHORS`, the
    missing ones computed (:func:`_compute_token_anchors`) and kept (the dict emptied first
    when it would grow past :data:`TOKEN_CACHE_SIZE`).  Safe across threads: the second pass
    reads a local mapping, so another thread emptying the dict meanwhile changes nothing."""
    known = _TOKEN_ANCHORS
    tokens = tokens if isinstance(tokens, list) else list(tokens)
    try:
        return list(chain.from_iterable(map(known.__getitem__, tokens)))
    except KeyError:
        found: dict[str, tuple[str, ...]] = {}
        missing: dict[str, tuple[str, ...]] = {}
        for token in tokens:
            if token not in found:
                anchors = known.get(token)  # (a stopword's is (): test for None, not for truth)
                if anchors is None:
                    anchors = _compute_token_anchors(token)
                    if len(token) <= TOKEN_CACHE_MAX_CHARS:
                        missing[token] = anchors
                found[token] = anchors
        if len(known) + len(missing) > TOKEN_CACHE_SIZE:
            known.clear()
        if len(missing) <= TOKEN_CACHE_SIZE:  # (a text of more new tokens than that keeps none)
            known.update(missing)
        return list(chain.from_iterable(map(found.__getitem__, tokens)))


def _token_anchors(token: str) -> tuple[str, ...]:
    """Anchors of one identifier-like token, computed once (:data:`_TOKEN_ANCHORS`)."""
    found = _TOKEN_ANCHORS.get(token)
    return found if found is not None else tuple(_tokens_anchors([token]))


def _tokens_and_numbers(text: str, pattern: re.Pattern[str] = _TOKEN_OR_NUMBER) -> tuple[list[str], list[str]]:
    """Identifier-like tokens and free-standing numbers (two digits or more, not inside an
    identifier) of ``text``, each in order: one scan instead of finding the tokens, blanking
    them out and finding the numbers in what is left (every letter starts a token, so a
    number the scan reaches is never part of one)."""
    tokens: list[str] = []
    numbers: list[str] = []
    for token, number in pattern.findall(text):
        if token:
            tokens.append(token)
        else:
            numbers.append(number)
    return tokens, numbers


def _word_runs(text: str) -> list[str]:
    """The maximal runs of ``[A-Za-z0-9_]`` in ASCII ``text``, in order: every other character
    turned into a space by one pass of a byte table, then split.  Where ``text`` holds no
    digit they are what :data:`_ASCII_WORD` finds (each run starts with a letter or "_"
    and the scan reads it whole), at about a third of the scan's cost."""
    return text.encode("ascii").translate(_SPACED).decode("ascii").split()


def _words_and_numbers(text: str) -> tuple[list[str], list[str]]:
    """``_tokens_and_numbers(text, _ASCII_WORD_OR_NUMBER)`` for ASCII ``text`` where no joiner
    starts an identifier (:func:`_joined`), read from its runs (:func:`_word_runs`): the scan
    reaches each run at its start and reads its leading digits as a number when there are
    two or more (one is skipped), then the rest of the run, if any, as one word."""
    tokens: list[str] = []
    numbers: list[str] = []
    for run in _word_runs(text):
        if run[0] in _DIGITS:
            word = run.lstrip(_DIGITS)
            lead = len(run) - len(word)
            if lead >= 2:
                numbers.append(run[:lead])
            if word:
                tokens.append(word)
        else:
            tokens.append(run)
    return tokens, numbers


_MAX_STOPWORD = max(len(w) for w in CHINESE_STOPWORDS)


def _cjk_pieces(run: str) -> list[str]:
    """Split a CJK run at multi-character stopwords (longest match first) and at particles."""
    pieces: list[str] = []
    start = i = 0
    while i < len(run):
        size = next(
            (n for n in range(min(_MAX_STOPWORD, len(run) - i), 1, -1) if run[i : i + n] in CHINESE_STOPWORDS),
            1 if run[i] in CHINESE_SPLIT_CHARS else 0,
        )
        if size:
            if i > start:
                pieces.append(run[start:i])
            i += size
            start = i
        else:
            i += 1
    if start < len(run):
        pieces.append(run[start:])
    return pieces


def _cjk_anchors(run: str, query: bool) -> list[str]:
    """Bigrams of each piece; single characters too in documents, and in queries
    only where a character stands alone (so "并发性能" does not match every "并")."""
    out: list[str] = []
    for piece in _cjk_pieces(run):
        if not query or len(piece) == 1:
            out.extend(ch for ch in piece if ch not in CHINESE_STOP_CHARS)
        out.extend(piece[i : i + 2] for i in range(len(piece) - 1))
    return out


def trie_pattern(words: list[str]) -> str:
    """A regular expression matching any of ``words``, longest first, shaped as a
    character trie: at each position the engine follows one branch instead of trying
    every word in turn (the cue and glossary lists hold a few hundred)."""
    root: dict[str, dict] = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(root)


_GLOSSARY = re.compile(trie_pattern(list(TERMS)))


@lru_cache(maxsize=65536)
def _glossary_anchors(run: str) -> tuple[str, ...]:
    """English anchors of the technical terms in a CJK run ("加了索引" -> "index"; see :mod:`glossary`)."""
    out: list[str] = []
    for match in _GLOSSARY.finditer(run):
        for word in TERMS[match.group(0)].split():
            out.extend(_word_anchors(word))
    return tuple(out)


def _has_ascii_digit(text: str) -> bool:
    """Whether ``text`` holds one of 0-9: ten substring tests, each a fast scan, instead of
    the regular expression engine visiting every character (for ASCII text, where these
    are the only digits)."""
    return any(digit in text for digit in "0123456789")


def extract(text: str, *, query: bool = False) -> TextAnchors:
    """All anchors of ``text`` with their counts.

    With ``query=True`` single CJK characters are kept only where they stand
    alone; documents keep them all, so a query's "锁" still finds "锁续租".

    >>> sorted(extract("Redis 锁续租为什么会脑裂？").counts)
    ['brain', 'redis', 'split', '会脑', '租', '续', '续租', '脑', '脑裂', '裂', '锁', '锁续']
    """
    text = visible(text)  # NFKC, no invisible character splitting a word
    anchors: list[str] = []
    is_ascii = text.isascii()
    # Each scan below runs only when the characters it needs are there (a quote, a
    # backtick, a digit, a character beyond ASCII): most chat text has few of them.
    if '"' in text or not is_ascii:
        for match in _QUOTED.finditer(text):
            phrase = next(g for g in match.groups() if g is not None).strip().casefold()
            if phrase:
                anchors.append('"' + phrase + '"')
    if "`" in text:
        for match in _CODE.finditer(text):
            code = match.group(1).strip().casefold()
            if code:
                anchors.append("`" + code + "`")
    numbers: list[str] = []
    # ASCII text where no joiner starts an identifier (most chat) is read from its word runs
    # (a version's blank, below, joins nothing: the scanned text has no other joiner)
    runs = is_ascii and not _joined(text)
    words = _word_runs(text) if runs else []
    tokens: list[str]
    if runs and (not words or min(words)[0] > "9"):
        # no run starts with a digit ("0" < "9" < "A" < "_" < "a"): no number and no version
        # (a version's digits after its "." start a run), and the runs are the tokens
        tokens = words
    else:
        ascii_scans = (_ASCII_IDENTIFIER, _ASCII_TOKEN_OR_NUMBER)  # for joined ASCII identifiers
        identifier, token_or_number = ascii_scans if is_ascii else (_IDENTIFIER, _TOKEN_OR_NUMBER)
        digit = _DIGIT.search(text) if not is_ascii or _has_ascii_digit(text) else None
        if digit is None:
            tokens = words if runs else identifier.findall(text)
        else:
            first = digit.start()  # the scans below need a digit: none starts before this one
            scanned = text
            if _DOTTED.search(text, first) is not None:
                versions = _VERSION.findall(text)
                anchors.extend("#" + v.lower().lstrip("v") for v in versions)
                scanned = _VERSION.sub(" ", text) if versions else text
            if runs:
                tokens, numbers = _words_and_numbers(scanned)
            elif _NUMBER.search(text, first) is not None:
                tokens, numbers = _tokens_and_numbers(scanned, token_or_number)
            else:  # no two digits in a row: no number, and the plain scan finds the same tokens
                tokens = identifier.findall(scanned)
    anchors.extend(_tokens_anchors(tokens))
    if not is_ascii:
        for run in _CJK_RUN.findall(text):
            anchors.extend(_cjk_anchors(run, query))
            anchors.extend(_glossary_anchors(run))
    anchors.extend(numbers)
    return TextAnchors.of(anchors)


def _plain(text: str) -> bool:
    """Whether ``text`` is ASCII with no quote, backtick, digit or joiner (most prose and
    chat): :func:`extract` reads its anchors from its word runs alone, each run's apart
    (NFKC leaves ASCII as it is)."""
    return (text.isascii() and '"' not in text and "`" not in text and not _has_ascii_digit(text)
            and not _joined(text))


def anchor_set(text: str) -> frozenset[str]:
    """The distinct anchors of ``text``: ``frozenset(extract(text).counts)``, for callers that
    ask only which anchors a text holds (coverage selection reads no count).

    Plain text (:func:`_plain`) is read the way :func:`extract` reads it, from its word
    runs, but each distinct run once and no count kept; other text is extracted.
    ``tests/test_anchors.py`` checks it against :func:`extract` on real and random texts.

    >>> sorted(anchor_set("Redis locks, Redis leases and TaskGroup"))
    ['#taskgroup', 'group', 'leas', 'lock', 'redis', 'task']
    """
    if _plain(text):
        return frozenset(_tokens_anchors(set(_word_runs(text))))
    return frozenset(extract(text).counts)


def anchors_near(text: str, parts: Iterable[str]) -> frozenset[str] | None:
    """For plain ``text`` (:func:`_plain`): the anchors of its word runs whose lower case
    contains one of ``parts`` (each a non-empty run of ``[a-z0-9_]``); None for other text.

    Every anchor of a word run is made of lower-cased letters, digits and "_" of the run
    (an exact anchor is "#" and the whole run), so a caller looking for anchors whose
    lower-cased text (or stem) ``parts`` holds finds each one that ``text`` holds here,
    without reading the runs that hold none: a run is found from each place a part
    occurs in the text.  ``tests/test_anchors.py`` checks it against :func:`extract`.

    >>> sorted(anchors_near("Redis locks and TaskGroup leases", ["lock", "group"]))
    ['#taskgroup', 'group', 'lock', 'task']
    """
    if not _plain(text):
        return None
    spaced = text.encode("ascii").translate(_SPACED).decode("ascii")  # runs apart, each in its case
    lowered = spaced.lower()
    runs: set[str] = set()
    for part in parts:
        at = lowered.find(part) if part else -1
        while at >= 0:
            start = lowered.rfind(" ", 0, at) + 1
            end = lowered.find(" ", at + len(part))
            if end < 0:
                end = len(lowered)
            runs.add(spaced[start:end])
            at = lowered.find(part, end)
    return frozenset(_tokens_anchors(runs))


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a CJK character (the only text where :func:`extract`'s
    ``query`` mode changes anything)."""
    return not text.isascii() and _CJK_RUN.search(text) is not None  # ASCII text: no scan of each character


@lru_cache(maxsize=262144)
def anchor_kind(anchor: str) -> str:
    """The :class:`AnchorKind` of an anchor, read from its text."""
    first = anchor[0]
    if first in '#`"':
        return AnchorKind.EXACT
    if "\u3400" <= first <= "\u9fff" or "\uf900" <= first <= "\ufaff":
        return AnchorKind.CJK_CHAR if len(anchor) == 1 else AnchorKind.CJK_BIGRAM
    return AnchorKind.WORD
