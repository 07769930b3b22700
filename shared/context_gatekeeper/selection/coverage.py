"""Coverage selection over arbitrary texts: keep the few that cover a query.

The chat selector's minimum-coverage step (:func:`selector.greedy_cover`, here
evaluated lazily: the same picks), offered on its own for any list of candidate texts:
retrieved chunks, search hits, tool outputs.  Given a query and candidates with token costs, :func:`select_covering`
keeps a small subset that covers the query's informative anchors within a token
budget, picking greedily by newly covered anchor weight per ``cost ** alpha``.

Anchor weights are IDF (:func:`gate.anchor_weights`, the formula named by
:class:`SelectionParams`), with document frequencies taken from

* the candidates themselves (the default): an anchor most candidates hold is
  common *here*, so covering it is worth little; or
* a :class:`CoverageCorpus` the caller builds once from a larger collection (the
  whole document set an index was built from), which knows which words are
  common in the domain even when only a handful of chunks were retrieved.

Every candidate gets a :class:`CoverageExplanation`: kept (``"covers"``, or
``"fallback"``) or dropped (``"irrelevant"``, ``"no new coverage"``, ``"duplicate"``,
``"over budget"``, ``"target reached"``), with the anchors, gain and cost behind it.
The result keeps input order.  Pure functions; no framework imports.

With ``similarities`` (each candidate's similarity to the query, from any embedding
model), meaning joins the words under the same precision rules: similarities are
calibrated on the candidate set itself (z-scores), a candidate counts as semantic
evidence only at or above ``params.semantic_floor`` (and only among at least
``params.semantic_min_turns`` candidates with a similarity), it breaks ties in the
greedy step, and up to ``params.semantic_max_keep`` candidates that hold *none* of
the query's terms are kept on their meaning (``"semantic"``) when the budget allows.

>>> texts = ["Redis locks need a TTL.", "Redis locks need a TTL.", "Bake bread at 220 degrees."]
>>> result = select_covering("How long should a Redis lock TTL be?", texts, costs=[6, 6, 6])
>>> result.kept
[0]
>>> [e.reason for e in result.explanations]
['covers', 'no new coverage', 'irrelevant']
"""

from __future__ import annotations

import numbers
import re
from collections import Counter
from heapq import heapify, heappop, heappush
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .anchors import anchors_near, extract, visible
from .cues import strip_cues
from ..errors import InvalidInputError, InvalidTypeError
from .gate import anchor_weights
from .params import SelectionParams
from .scoring import coverage_gain
from .semantic.coverage import SEMANTIC, calibrated, tie_break, with_meaning
from ..tokens import TokenCounterLike, resolve_token_counter
from ..validation import require_budget

__all__ = [
    "CoverageCorpus",
    "CoverageExplanation",
    "CoverageResult",
    "select_covering",
    "kept_covering",
    "may_match",
    "held_anchors",
    "COVERS",
    "FALLBACK",
    "SEMANTIC",
    "IRRELEVANT",
    "NO_NEW_COVERAGE",
    "DUPLICATE",
    "OVER_BUDGET",
    "TARGET_REACHED",
]

COVERS = "covers"
"""Kept: it newly covered query anchors when the greedy step picked it."""
FALLBACK = "fallback"
"""Kept without lexical evidence: the query has no informative anchor, or no candidate
holds one (semantic retrieval in other words), so candidates are kept in order while
they fit (``fallback=True``), each text once (see :data:`DUPLICATE`)."""
IRRELEVANT = "irrelevant"
"""Dropped: it holds none of the query's informative anchors."""
NO_NEW_COVERAGE = "no new coverage"
"""Dropped: every query anchor it holds is covered by kept candidates (a duplicate)."""
DUPLICATE = "duplicate"
"""Dropped by the fallback: its text (not blank) is the text of a candidate kept before it
(``repeats``), compared with each run of whitespace read as one space (a chunk with a
trailing newline, or a line broken elsewhere, says the same): a retriever's repeat, or one
paragraph in two documents.  With no lexical
evidence either way, the fallback keeps each text once and leaves the budget a repeat
would spend to the next distinct candidate (where there is evidence, a repeat adds no
coverage: :data:`NO_NEW_COVERAGE`)."""
OVER_BUDGET = "over budget"
"""Dropped: it would add coverage but costs more than the budget left."""
TARGET_REACHED = "target reached"
"""Dropped: the coverage target was met before it was needed (``target < 1``)."""


class CoverageCorpus:
    """Document frequencies of anchors over a collection, built once and reused.

    Pass one to :func:`select_covering` (``corpus=``) to weigh query anchors by how
    rare they are in the whole collection instead of among the few candidates.
    Build it from the texts the candidates come from (for LlamaIndex, the nodes of
    the index); anchors are extracted exactly as for candidates.

    >>> corpus = CoverageCorpus.from_texts(["redis lock ttl", "redis cluster", "bread"])
    >>> corpus.n_docs, corpus.df("redis"), corpus.df("bread"), corpus.df("absent")
    (3, 2, 1, 0)
    >>> CoverageCorpus.from_dict(corpus.to_dict()).df("redis")
    2
    """

    __slots__ = ("doc_freq", "n_docs")

    def __init__(self, doc_freq: Mapping[str, int] | None = None, n_docs: int = 0) -> None:
        if n_docs < 0:
            raise InvalidInputError(f"n_docs must be >= 0, got {n_docs!r}; pass the number of documents counted")
        self.doc_freq: dict[str, int] = dict(doc_freq or {})
        """anchor -> number of documents holding it (each at most ``n_docs``)."""
        self.n_docs: int = n_docs
        """Number of documents the frequencies were counted over."""

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> "CoverageCorpus":
        """Count, for each anchor, the texts that hold it."""
        corpus = cls()
        corpus.add_texts(texts)
        return corpus

    def add_texts(self, texts: Iterable[str]) -> None:
        """Add documents (for a collection that grows); not thread-safe against readers.

        Raises:
            InvalidTypeError: (a ``TypeError``) ``texts`` is not an iterable of strings (a
                single string, a number, an item that is not a ``str``); nothing is added.
        """
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise InvalidTypeError(
                f"texts must be an iterable of strings (the documents to count), got {type(texts).__name__}; "
                "pass a list of texts, e.g. CoverageCorpus.from_texts([text, ...])"
            )
        counts: Counter[str] = Counter()
        added = 0
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidTypeError(
                    f"texts[{index}] must be a str (a document's text), got {type(text).__name__}; "
                    "pass the documents' texts"
                )
            counts.update(extract(text).counts.keys())
            added += 1
        for anchor, n in counts.items():
            self.doc_freq[anchor] = self.doc_freq.get(anchor, 0) + n
        self.n_docs += added

    def df(self, anchor: str) -> int:
        """Documents holding ``anchor`` (0 when unseen)."""
        return self.doc_freq.get(anchor, 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (``from_dict`` reads it back)."""
        return {"n_docs": self.n_docs, "doc_freq": dict(self.doc_freq)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CoverageCorpus":
        """The corpus :meth:`to_dict` wrote."""
        return cls(data["doc_freq"], int(data["n_docs"]))

    def __repr__(self) -> str:
        return f"CoverageCorpus(n_docs={self.n_docs}, anchors={len(self.doc_freq)})"


@dataclass(frozen=True)
class CoverageExplanation:
    """Why one candidate was kept or dropped.

    Attributes:
        index: the candidate's position in the input.
        kept: whether it is in the result.
        reason: one of the module's reason constants (``"covers"``, ``"fallback"``,
            ``"irrelevant"``, ``"no new coverage"``, ``"duplicate"``, ``"over budget"``,
            ``"target reached"``).
        cost: its token cost.
        matched: the informative query anchors it holds (query order).
        covered: for a ``"covers"`` candidate, the anchors it newly covered when picked;
            for a dropped one, those it would still add (empty unless over budget or
            target reached).
        gain: newly covered weight per ``cost ** alpha`` at its pick (kept), or what it
            would still gain now (dropped); 0 when it adds nothing.
        pick: 1-based order in which the greedy step picked it; None if not picked.
        similarity: its similarity to the query (None without similarities).
        similarity_z: that similarity calibrated on the candidates' (None when too few
            candidates have one).
        semantic: whether its similarity is evidence (z at or above the floor).
        decisive: whether it is kept because of its meaning alone (reason ``"semantic"``).
        repeats: for a ``"duplicate"``, the index of the kept candidate whose text it
            repeats; None otherwise.
    """

    index: int
    kept: bool
    reason: str
    cost: int
    matched: tuple[str, ...]
    covered: tuple[str, ...]
    gain: float
    pick: int | None = None
    similarity: float | None = None
    similarity_z: float | None = None
    semantic: bool = False
    decisive: bool = False
    repeats: int | None = None

    def __str__(self) -> str:
        text = self._text()
        if self.similarity is None:
            return text
        z = "" if self.similarity_z is None else f", z {self.similarity_z:+.2f}"
        role = "; decisive" if self.decisive else "; evidence" if self.semantic else ""
        return f"{text} [similarity {self.similarity:.3f}{z}{role}]"

    def _text(self) -> str:
        anchors = ", ".join(self.covered or self.matched) or "-"
        if self.reason == SEMANTIC:
            return f"kept #{self.index}: similar in meaning, no shared term ({self.cost} tokens)"
        if self.reason == COVERS:
            return f"kept #{self.index}: covers {anchors} (gain {self.gain:.3f}, {self.cost} tokens, pick {self.pick})"
        if self.reason == FALLBACK:
            return f"kept #{self.index}: fallback, no lexical evidence either way ({self.cost} tokens)"
        if self.reason == IRRELEVANT:
            return f"dropped #{self.index}: irrelevant, holds none of the query's informative terms"
        if self.reason == DUPLICATE:
            return f"dropped #{self.index}: duplicate, the same text as kept #{self.repeats} ({self.cost} tokens)"
        if self.reason == NO_NEW_COVERAGE:
            return f"dropped #{self.index}: no new coverage ({anchors} already covered by kept candidates)"
        if self.reason == OVER_BUDGET:
            return f"dropped #{self.index}: over budget (would cover {anchors} but costs {self.cost} tokens)"
        return f"dropped #{self.index}: {self.reason} (would still cover {anchors})"


@dataclass(frozen=True)
class CoverageResult:
    """What :func:`select_covering` chose, and why.

    Attributes:
        kept: indices of the kept candidates, in input order.
        explanations: one per candidate, in input order.
        weights: informative query anchor -> weight (IDF times kind weight).
        coverable_weight: weight of the query anchors some candidate holds.
        covered_weight: weight of those the kept candidates cover.
        tokens_kept: total cost of the kept candidates.
        tokens_total: total cost of all candidates.
        budget: the token budget (None: unlimited).
        semantic_fallback: set by callers whose embedder failed (the result is lexical).
    """

    kept: list[int]
    explanations: list[CoverageExplanation]
    weights: dict[str, float]
    coverable_weight: float
    covered_weight: float
    tokens_kept: int
    tokens_total: int
    budget: int | None
    semantic_fallback: bool = False

    @property
    def coverage(self) -> float:
        """Share of the coverable query weight covered (1.0 when nothing was coverable)."""
        return self.covered_weight / self.coverable_weight if self.coverable_weight > 0 else 1.0

    def __str__(self) -> str:
        head = (
            f"kept {len(self.kept)} of {len(self.explanations)} candidates, "
            f"{self.tokens_kept} of {self.tokens_total} tokens, coverage {self.coverage:.0%}"
        )
        return "\n".join([head, *map(str, self.explanations)])


_EXPLANATION_DEFAULTS = {"pick": None, "similarity": None, "similarity_z": None, "semantic": False, "decisive": False,
                         "repeats": None}


_IRRELEVANT = {**_EXPLANATION_DEFAULTS, "kept": False, "reason": IRRELEVANT, "matched": (), "covered": (), "gain": 0.0}


def _explanation(
    index: int, kept: bool, reason: str, cost: int, matched: tuple[str, ...], covered: tuple[str, ...],
    gain: float, pick: int | None = None, repeats: int | None = None,
) -> CoverageExplanation:
    """``CoverageExplanation(...)`` without the frozen dataclass's per-field ``__setattr__``
    (one per candidate, hundreds per call: the postprocessor's hot path); equal to it."""
    e = object.__new__(CoverageExplanation)
    e.__dict__.update(_EXPLANATION_DEFAULTS, index=index, kept=kept, reason=reason, cost=cost, matched=matched,
                      covered=covered, gain=gain, pick=pick, repeats=repeats)
    return e


def _require_query(query: Any, function: str) -> None:
    """:class:`InvalidTypeError` unless ``query`` is a ``str``."""
    if not isinstance(query, str):
        raise InvalidTypeError(
            f"{function}: query must be a str (what the candidates should cover), got {type(query).__name__}; "
            f"pass the query first and the candidates second: {function}(query, texts)"
        )


def _require_texts(texts: Any) -> None:
    """:class:`InvalidTypeError` unless ``texts`` is a list (a sized iterable) of ``str``."""
    if isinstance(texts, (str, bytes, Mapping)) or not isinstance(texts, Sized) or not isinstance(texts, Iterable):
        raise InvalidTypeError(
            f"select_covering: texts must be a list of strings (the candidates), got {type(texts).__name__}; "
            "pass a list, e.g. select_covering(query, [text, ...])"
        )
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidTypeError(
                f"select_covering: texts[{index}] must be a str (a candidate's text), got {type(text).__name__}; "
                "pass the candidates' texts"
            )


def _costs(texts: Sequence[str], costs: Sequence[int] | None, token_counter: TokenCounterLike) -> list[int]:
    """Each text's cost: ``costs`` checked (one whole number of tokens ``>= 0`` per text, as
    :func:`~context_gatekeeper.validation.require_budget` asks of a budget: ``bool`` refused,
    NumPy integers taken as ints; a float is refused, not truncated, so the kept texts never
    cost more than the budget), or each text counted with ``token_counter``."""
    if costs is None:
        count = resolve_token_counter(token_counter)
        return [count(t) for t in texts]
    if isinstance(costs, (str, bytes, Mapping)) or not isinstance(costs, Sized) or not isinstance(costs, Iterable):
        raise InvalidTypeError(
            f"costs must be a list of ints (one token count per text), got {type(costs).__name__}; "
            "pass a list, or None to count them"
        )
    if len(costs) != len(texts):
        raise InvalidInputError(f"got {len(costs)} costs for {len(texts)} texts; pass one cost per text")
    checked: list[int] = []
    for index, cost in enumerate(costs):
        if type(cost) is not int:
            if isinstance(cost, bool) or not isinstance(cost, numbers.Integral):
                raise InvalidTypeError(
                    f"costs[{index}] must be an int >= 0 (a number of tokens), got {type(cost).__name__} "
                    f"{cost!r:.60}; pass whole token counts (round a fraction up: math.ceil), or costs=None "
                    "to count them"
                )
            cost = int(cost)  # a NumPy integer
        if cost < 0:
            raise InvalidInputError(
                f"costs[{index}] must be an int >= 0 (a number of tokens), got {cost!r}; pass the tokens the "
                "text costs, or costs=None to count them"
            )
        checked.append(cost)
    return checked


def _fallback(
    costs: list[int], budget: int | None, matched: list[tuple[str, ...]], text: Callable[[int], str] | None
) -> list[CoverageExplanation]:
    """The fallback's choice: candidates in order while they fit, but a candidate whose
    text (``text(i)``; not blank) is a kept one's, whitespace aside (:data:`DUPLICATE`), is
    dropped as a duplicate, and its budget left to the next distinct one.  ``text`` None:
    repeats cannot be told apart."""
    left = budget if budget is not None else sum(costs)
    first: dict[str, int] = {}  # each kept text, its whitespace runs one space -> the candidate kept with it
    out: list[CoverageExplanation] = []
    for i, cost in enumerate(costs):
        said = " ".join(text(i).split()) if text is not None else ""
        repeats = first.get(said) if said else None
        if repeats is not None:
            out.append(_explanation(i, False, DUPLICATE, cost, matched[i], (), 0.0, repeats=repeats))
            continue
        fits = cost <= left
        if fits:
            left -= cost
            first.setdefault(said, i)
        out.append(_explanation(i, fits, FALLBACK if fits else OVER_BUDGET, cost, matched[i], (), 0.0))
    return out


def _asked(query: str, params: SelectionParams) -> tuple[str, ...]:
    """The query's anchors, in query order (its first ``params.max_query_chars``
    characters, cues stripped: they never match)."""
    return _read_query(query[: params.max_query_chars])


@lru_cache(maxsize=1024)
def _read_query(query: str) -> tuple[str, ...]:
    """:func:`_asked` of a query already cut to its read length: a pure function of it,
    kept for the last queries (the node postprocessor reads each query twice, in
    :func:`held_anchors` and :func:`kept_covering`)."""
    return tuple(extract(strip_cues(query)[1], query=True).counts)


def _core(anchor: str) -> str:
    """What the lower-cased text of an ASCII candidate holding ``anchor`` must contain:
    a quoted phrase's or code span's text, an exact anchor's identifier or version, a
    word's stem (less a final "y", which may stand for "ies": "studies" -> "study"; every
    other stem is the start of its word), a number.  ``tests/test_coverage.py`` checks it
    on every anchor of thousands of real and random texts."""
    if anchor[0] in '"`':
        return anchor[1:-1]
    if anchor[0] == "#":
        return anchor[1:]
    return anchor[:-1] if anchor.endswith("y") else anchor


def may_match(query: str, params: SelectionParams | None = None) -> Callable[[str], bool]:
    """A quick test of a candidate text, before its anchors are extracted: False only
    when it holds none of ``query``'s anchors (as :func:`select_covering` reads them), so
    it would be found irrelevant; True when it may hold one, and for any text beyond
    ASCII (NFKC and case folding may change it).  A caller that extracts anchors only for
    the texts it passes (and gives the others none) keeps what it would keep otherwise.

    >>> test = may_match("How long should a Redis lock TTL be?")
    >>> test("Redis locks need a TTL."), test("Bake bread at 220 degrees."), test("Ｒｅｄｉｓ")
    (True, False, True)
    """
    cores = tuple(dict.fromkeys(_core(a) for a in _asked(query, params or SelectionParams())))

    def test(text: str) -> bool:
        if not text.isascii():
            return True
        lowered = text.lower()
        return any(core in lowered for core in cores)

    return test


_NONE_HELD: frozenset[str] = frozenset()
_RUN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
_ASCII_BYTES = bytes(range(128))
_WORD_CHAR = re.compile(r"\w")
_QUOTE_MARKS = frozenset("\u201c\u201d\u300c\u300d\u300e\u300f")  # the quotes beyond ASCII that extract reads


def _ascii_stand_in(text: str) -> str | None:
    """For a text beyond ASCII: an ASCII text with the same anchors (each character beyond
    ASCII a ``?``), or None when there may be none.

    It is read from ``text`` as :func:`~context_gatekeeper.selection.anchors.extract` reads it
    (:func:`~context_gatekeeper.selection.anchors.visible`: NFKC-normalised, invisible characters
    such as a soft hyphen or zero-width space removed, so "Kuber\u00adnetes" stands in as
    "Kubernetes"), and exists when that text holds no ``"`` nor backtick (a quoted phrase or
    code span would hold those characters), and none of its characters beyond ASCII is a word character (a
    letter, digit or CJK character: ``\\w``) or a quote mark extract reads (``\u201c\u201d\u300c\u300d\u300e\u300f``): dashes,
    emoji, joiners and curly apostrophes in English chat.  Each pattern of extract then
    treats such a character as it treats a ``?`` (it is in no word, identifier, joiner,
    number or version, and is neither ``\\w`` nor ``.`` to a version's look-around), and
    the text holds no CJK run; so the stand-in, read with the ASCII scans (which match what
    the others match on ASCII text), gives the same anchors.  The characters beyond ASCII
    are found without a scan in Python or by the regular expression engine: the UTF-8
    bytes of ``text`` less its ASCII bytes are theirs.  ``tests/test_coverage.py`` checks
    it against extract on real and random texts.

    >>> _ascii_stand_in("Great run \u2014 see you \U0001f4aa"), _ascii_stand_in("caf\u00e9"), _ascii_stand_in('say \u201chi\u201d')
    ('Great run ? see you ?', None, None)
    """
    text = visible(text)
    if '"' in text or "`" in text:
        return None
    beyond = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_BYTES).decode("utf-8", "surrogatepass")
    if _WORD_CHAR.search(beyond) is not None or not _QUOTE_MARKS.isdisjoint(beyond):
        return None
    return text.encode("ascii", "replace").decode("ascii")


def held_anchors(query: str, params: SelectionParams | None = None) -> Callable[[str], frozenset[str] | None]:
    """:func:`may_match`, telling more: ``held(text)`` is a set that holds each of
    ``query``'s anchors (as :func:`select_covering` reads them) that ``text`` holds, and no
    other of them (it may hold other anchors of ``text``); empty when :func:`may_match`
    finds none may be there; None when that cannot be told without extracting ``text``'s
    anchors (text beyond ASCII without an ASCII stand-in (:func:`_ascii_stand_in`), or with a quote, backtick,
    digit or joiner: see :func:`~context_gatekeeper.selection.anchors.anchors_near`; text
    beyond ASCII with a stand-in is read as its stand-in).  A caller that gives
    :func:`kept_covering` these sets for the texts it has not analysed keeps what it would
    keep with every text's anchors.

    >>> held = held_anchors("How long should a Redis lock TTL be?")
    >>> sorted(held("Redis locks need a TTL.")), held("Bake bread at 220 degrees."), held("v1.2 of Redis")
    (['lock', 'redis', 'ttl'], frozenset(), None)
    """
    cores = tuple(dict.fromkeys(_core(a) for a in _asked(query, params or SelectionParams())))
    in_runs = tuple(c for c in cores if _RUN_CHARS.issuperset(c))  # the others are never a word run's

    def held(text: str) -> frozenset[str] | None:
        if not text.isascii():
            stand_in = _ascii_stand_in(text)
            if stand_in is None:
                return None
            text = stand_in
        lowered = text.lower()
        for core in cores:
            if core in lowered:
                return anchors_near(text, [c for c in in_runs if c in lowered])
        return _NONE_HELD

    return held


def _query_terms(
    query: str, docs: Sequence[Mapping[str, int]], corpus: CoverageCorpus | None, params: SelectionParams
) -> tuple[dict[str, float], dict[int, list[str]], float]:
    """``(weights, found, coverable weight)``: each informative query anchor's weight, each
    candidate holding one -> the ones it holds (query order), and the weight of those
    some candidate holds (summed in query order, so every process gets the same figure)."""
    asked = _asked(query, params)
    holding = {a: [i for i, d in enumerate(docs) if a in d] for a in asked}  # one pass per query anchor
    if corpus is not None:
        df, n = corpus.df, corpus.n_docs
    else:
        df, n = (lambda anchor: len(holding.get(anchor, ()))), len(docs)
    weights = {a: w for a, w in anchor_weights(asked, df, n, params).items() if w > 0}
    found: dict[int, list[str]] = {}
    for a in weights:  # each candidate's informative anchors, in the query's order
        for i in holding[a]:
            found.setdefault(i, []).append(a)
    return weights, found, sum(w for a, w in weights.items() if holding[a])


def _greedy(
    found: dict[int, list[str]], weights: Mapping[str, float], cost: Callable[[int], int],
    semantic: Callable[[int], float], target: float, budget: int, alpha: float,
    floor: Callable[[int], int] | None = None,
) -> tuple[list[tuple[int, int, list[str]]], float]:
    """The chat selector's greedy step (:func:`selector.greedy_cover`) over the candidates
    in ``found`` (each holding an informative query anchor), with the same picks in the
    same order and the same covered weight, evaluated lazily.

    ``greedy_cover`` recomputes every candidate's gain at each pick; a gain can only fall
    as anchors get covered, so here candidates wait in a heap by their last gain (then
    score, then input order: ``greedy_cover``'s ties) and only the one on top is brought
    up to date: once its gain is current it beats every other candidate's current gain.
    A candidate's score is ``greedy_cover``'s ``Candidate.total`` (its query weight plus
    its semantic tie-break), computed the same way.  Returns ``([(index, cost, anchors) in
    pick order], covered weight)``; ``tests/test_coverage.py`` checks it against
    ``greedy_cover``.

    ``floor(i)``, when given (``alpha >= 0``), is a lower bound of ``cost(i)``, cheaper to
    have: a candidate first waits by the gain its floor would give (no lower than its
    own), and ``cost(i)`` is asked only when that bound reaches the top of the heap.  The
    picks are the same; candidates that never come near the top are never counted."""
    lazy = floor is not None and alpha >= 0  # a gain falls as the cost rises only for alpha >= 0
    heap: list[tuple[float, float, int, int]] = []
    held: dict[int, tuple[int | None, list[str], int]] = {}  # cost (None: not asked yet), anchors, cost waited by
    for i in sorted(found):
        anchors = found[i]
        c = None if lazy else cost(i)
        new = weights[anchors[0]] if len(anchors) == 1 else sum(weights[a] for a in anchors)  # sum([w]) is w
        total = new + 0.0 + 0.0 + 0.0 + semantic(i)  # Candidate.total: user, assistant, exact, recency, semantic
        bound = floor(i) if c is None else c  # type: ignore[misc]  # lazy: floor is set
        held[i] = (c, anchors, bound)
        heap.append((-coverage_gain(new, bound, alpha), -total, i, 0))
    heapify(heap)
    covered: set[str] = set()
    covered_weight = 0.0
    chosen: list[tuple[int, int, list[str]]] = []
    while heap and covered_weight < target:
        neg_gain, neg_total, i, stamp = heappop(heap)
        c, anchors, bound = held[i]
        if c is None:  # its floor's gain is on top: count it
            c = cost(i)
            held[i] = (c, anchors, c)
            if c != bound:  # it waited by a higher gain than its own: brought up to date below
                stamp = -1
        if c > budget:  # the budget only shrinks: it never fits again
            continue
        if stamp != len(chosen):  # picks since its gain was computed: bring it up to date
            new = sum(weights[a] for a in anchors if a not in covered)
            gain = coverage_gain(new, c, alpha)
            if new > 0 and (gain, -neg_total) > (0.0, 0.0):  # else it never adds coverage again
                heappush(heap, (-gain, neg_total, i, len(chosen)))
            continue
        chosen.append((i, c, anchors))
        budget -= c
        for a in anchors:
            if a not in covered:
                covered.add(a)
                covered_weight += weights[a]
    return chosen, covered_weight


def kept_covering(
    query: str,
    anchors: Sequence[Mapping[str, int]],
    cost: Callable[[int], int],
    *,
    token_budget: int | None = None,
    corpus: CoverageCorpus | None = None,
    target: float = 1.0,
    fallback: bool = True,
    params: SelectionParams | None = None,
    floor: Callable[[int], int] | None = None,
    text: Callable[[int], str] | None = None,
) -> list[int]:
    """``select_covering(...).kept`` (lexical), asking each candidate's cost only when the
    choice needs it.

    For callers whose costs are dear to count (a node postprocessor meeting new texts):
    ``cost(i)`` is called for the candidates that hold an informative query anchor, and
    for every candidate only when the ``fallback`` keeps candidates in order within a
    budget.  The arguments mean what they mean for :func:`select_covering`, with each
    text given by its anchor counts (``anchors``); ``cost(i)`` must give an ``int >= 0``.
    ``floor(i)``, with a budget: a cheap lower bound of ``cost(i)``
    (:func:`~context_gatekeeper.tokens.token_floor`); a candidate is then counted only
    when the bound says it may be the next pick, and the kept ones are the same.
    ``text(i)``: candidate ``i``'s text, asked by the fallback alone, which keeps each text
    once (:data:`DUPLICATE`) as :func:`select_covering` does; without it the fallback cannot
    tell a repeat and keeps it.

    >>> texts = ["Redis locks need a TTL.", "Redis locks need a TTL.", "Bake bread at 220 degrees."]
    >>> anchors, asked = [extract(t).counts for t in texts], []
    >>> kept_covering("How long should a Redis lock TTL be?", anchors,
    ...               lambda i: asked.append(i) or 6, token_budget=100), asked
    ([0], [0, 1])
    >>> asked.clear()
    >>> kept_covering("How long should a Redis lock TTL be?", anchors,
    ...               lambda i: asked.append(i) or 6, token_budget=100, floor=lambda i: 6), asked
    ([0], [0])
    """
    _require_query(query, "kept_covering")
    params = params or SelectionParams()
    if token_budget is not None:
        require_budget(token_budget)
    if not 0 < target <= 1:
        raise InvalidInputError(f"target must be in (0, 1], got {target!r}; pass the share of anchors to cover")
    weights, found, coverable_weight = _query_terms(query, anchors, corpus, params)
    if coverable_weight <= 0:  # no lexical evidence: found is empty
        if not fallback:
            return []
        if token_budget is None and text is None:  # every candidate fits, and repeats cannot be told
            return list(range(len(anchors)))
        # without a budget every candidate fits: its cost is not asked
        costs = [0 if token_budget is None else cost(i) for i in range(len(anchors))]
        return [e.index for e in _fallback(costs, token_budget, [()] * len(costs), text) if e.kept]
    if token_budget is None:  # the candidates' own total bounds the greedy step as every cost's would
        asked = {i: cost(i) for i in sorted(found)}
        budget, cost, floor = sum(asked.values()), asked.__getitem__, None
    else:
        budget = token_budget
    chosen, _ = _greedy(found, weights, cost, lambda i: 0.0,
                        target * coverable_weight * (1 - 1e-9), budget, params.cost_exponent, floor)
    return sorted(i for i, _, _ in chosen)


def select_covering(
    query: str,
    texts: Sequence[str],
    *,
    token_budget: int | None = None,
    costs: Sequence[int] | None = None,
    token_counter: TokenCounterLike = None,
    corpus: CoverageCorpus | None = None,
    target: float = 1.0,
    fallback: bool = True,
    params: SelectionParams | None = None,
    similarities: Sequence[float | None] | None = None,
    anchors: Sequence[Mapping[str, int]] | None = None,
    explain: bool = True,
) -> CoverageResult:
    """Keep the candidates that cover ``query``'s informative anchors, within a budget.

    Args:
        query: what the candidates should cover (its first ``params.max_query_chars``
            characters are read).
        texts: the candidate texts, in their order of preference (ties go to the earlier).
        token_budget: most tokens the kept candidates may cost together; None: no limit.
        costs: each text's token cost, an ``int >= 0`` (NumPy integers too); counted with
            ``token_counter`` when omitted.
        token_counter: any form :func:`tokens.resolve_token_counter` accepts (default:
            tiktoken ``cl100k_base``, offline).
        corpus: document frequencies for anchor weights; default: the candidates'.
        target: share of the coverable query weight to cover before stopping.  1.0 (the
            default) covers every query anchor some candidate holds, as far as the budget
            allows; the chat selector's ``params.coverage_target`` (0.85) leaves the tail.
        fallback: when the query has no informative anchor or no candidate holds one,
            keep candidates in order while they fit (True, the default: lexical evidence
            says nothing, and semantic retrieval may have found them in other words), each
            text once (a repeat of a kept text is dropped as ``"duplicate"``); False drops
            them all as irrelevant.
        params: IDF formula, kind weights, cost exponent, stopwords (default
            :class:`SelectionParams`), and the semantic floor, top z, weight, minimum
            count and most kept on meaning.
        similarities: each candidate's similarity to the query (``None`` where unknown),
            or ``None`` for lexical coverage alone.  See the module docstring; when no
            candidate has lexical evidence but some have semantic evidence, those are kept
            instead of the ``fallback``.
        anchors: each text's anchor counts as :func:`anchors.extract` gives them
            (``extract(text).counts``), for callers that keep them per text (the node
            postprocessor does); extracted from ``texts`` when omitted.
        explain: False leaves ``explanations`` empty, for callers that need only what is
            kept (the node postprocessor's ``postprocess_nodes``); the choice and every
            figure are the same.

    Raises:
        BudgetError: a ``token_budget`` that is not an ``int >= 0`` (:func:`~context_gatekeeper.validation.require_budget`).
        InvalidInputError: (a ``ValueError``) ``costs`` or ``anchors`` of the wrong length, a
            negative cost; ``target`` outside (0, 1].
        InvalidTypeError: (a ``TypeError``) a ``query`` that is not a ``str``, ``texts``
            that is not a list of ``str``, ``costs`` that is not a list, or a cost that is
            not an int (a float, a bool, NaN, a string, None).
    """
    _require_query(query, "select_covering")
    _require_texts(texts)
    params = params or SelectionParams()
    if token_budget is not None:  # None: no limit
        require_budget(token_budget)
    if not 0 < target <= 1:
        raise InvalidInputError(f"target must be in (0, 1], got {target!r}; pass the share of anchors to cover")
    cost_list = _costs(texts, costs, token_counter)
    if anchors is not None and len(anchors) != len(texts):
        raise InvalidInputError(f"got {len(anchors)} anchor counts for {len(texts)} texts; pass one per text")
    docs = [extract(t).counts for t in texts] if anchors is None else anchors
    weights, found, coverable_weight = _query_terms(query, docs, corpus, params)
    matched: list[tuple[str, ...]] = [()] * len(docs)
    for i, held in found.items():
        matched[i] = tuple(held)
    total = sum(cost_list)
    zs = calibrated(similarities, len(texts), params)
    if similarities is None:
        evidence = [False] * len(zs)
    else:
        evidence = [z is not None and z >= params.semantic_floor for z in zs]
    if coverable_weight <= 0 and fallback and not any(evidence):
        fitted = _fallback(cost_list, token_budget, matched, texts.__getitem__)
        kept = [e.index for e in fitted if e.kept]
        return CoverageResult(
            kept, with_meaning(fitted, similarities, zs, evidence) if explain else [], weights, 0.0, 0.0,
            sum(cost_list[i] for i in kept), total, token_budget,
        )

    budget = token_budget if token_budget is not None else total
    chosen, covered_weight = _greedy(
        found, weights, cost_list.__getitem__, lambda i: tie_break(zs[i], params) if evidence[i] else 0.0,
        target * coverable_weight * (1 - 1e-9), budget, params.cost_exponent,
    )

    picks: dict[int, tuple[int, tuple[str, ...], float]] = {}
    covered: set[str] = set()
    for order, (index, spent, held) in enumerate(chosen, 1):
        new = tuple(a for a in held if a not in covered)
        gain = sum(weights[a] for a in new) / max(spent, 1) ** params.cost_exponent
        picks[index] = (order, new, gain)
        covered.update(new)
    left = budget - sum(spent for _, spent, _ in chosen)
    by_meaning: set[int] = set()
    meaning_only = (i for i in range(len(texts)) if evidence[i] and not matched[i]) if any(evidence) else ()
    for i in sorted(meaning_only, key=lambda i: -(zs[i] or 0.0)):  # evidence[i]: zs[i] is a number
        if len(by_meaning) < params.semantic_max_keep and cost_list[i] <= left:
            by_meaning.add(i)
            left -= cost_list[i]

    kept = sorted({*picks, *by_meaning})
    explanations: list[CoverageExplanation] = []
    for i, cost in enumerate(cost_list if explain else ()):
        if i in picks:
            order, new, gain = picks[i]
            explanations.append(_explanation(i, True, COVERS, cost, matched[i], new, gain, order))
            continue
        if i in by_meaning:
            explanations.append(_explanation(i, True, SEMANTIC, cost, (), (), 0.0))
            continue
        if not matched[i]:  # most candidates, the cheap way
            e = object.__new__(CoverageExplanation)
            e.__dict__.update(_IRRELEVANT, index=i, cost=cost)
            explanations.append(e)
            continue
        rest = tuple(a for a in matched[i] if a not in covered)
        gain = sum(weights[a] for a in rest) / max(cost, 1) ** params.cost_exponent
        if not rest:
            reason = NO_NEW_COVERAGE
        elif cost > left:
            reason = OVER_BUDGET
        else:
            reason = TARGET_REACHED
        explanations.append(_explanation(i, False, reason, cost, matched[i], rest, gain))
    return CoverageResult(kept, with_meaning(explanations, similarities, zs, evidence), weights, coverable_weight,
                          covered_weight, sum(cost_list[i] for i in kept), total, token_budget)
