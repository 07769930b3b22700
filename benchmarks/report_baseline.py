"""The Context Gatekeeper report's algorithm, implemented as written: a baseline.

This module re-implements §3 of the project's technical report (the Context
Gatekeeper report, kept outside this repository) as literally as the report
allows, so the benchmarks can show what the library improves on.  It is *not*
the library: it is deliberately naive, and every :meth:`ReportGatekeeper.explain`
recomputes every block's anchors and the IDF table from scratch, as the report's
design does (its "future work" lists incremental computation as not done).

The pipeline, with the report's parameters:

1. **Anchors** (§3.2) of a text: CJK 2-grams and 3-grams by a sliding window over
   each run of CJK characters (no stopwords; a one-character run gives none);
   English words ``[A-Za-z0-9_]+``, lowercased; the content of backtick code spans;
   version numbers (``v3.0``, ``2.1.0``); quoted phrases (``"..."`` and ``“...”``).
   Code spans, versions and quoted phrases carry a kind prefix, so they stay
   distinct from words.  A block is one turn, user + assistant.
2. **IDF** over the blocks: ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``, the
   smoothed BM25 form (always positive, so an anchor no block contains weighs most).
   The report only says "IDF"; this form is our choice.
3. **Gate** (§3.3): the active topic ``T`` is, in our reading of a vague report,
   the anchors of the *last block*.  With ``idf`` weights,
   ``overlap = idf(A(q) ∩ A(T)) / idf(A(q))`` and
   ``new_ratio = idf(A(q) \\ A(T)) / idf(A(q))``.  A reference cue (这个 / 它 /
   上面 / 那个 / 该 / 此 / it / this / that / the above / they / them) forces
   *continue*; else ``overlap > 0.45`` continues, ``overlap < 0.20 and
   new_ratio > 0.70`` switches, and the middle band continues.  Note that
   ``overlap + new_ratio == 1``, so the second condition reduces to
   ``overlap < 0.20``.  A query with no anchors continues (nothing says
   otherwise); with no history at all the decision is *switch*.
4. **Sparse retrieval** (§3.4): ``score(b) = 1.5 lex(u_b) + 0.7 lex(a_b) +
   1.0 exact(b) + 0.2 recency(b)``, where ``lex(x)`` is the IDF share of the
   query's anchors found in ``x``; ``exact(b)`` the IDF share of the query's
   "exact" anchors (English words, code identifiers, version numbers, quoted
   phrases) found in the block; ``recency(b) = i / n`` for the i-th of n blocks.
   The top ``M = 20`` blocks are the candidates (ties: newer first).
5. **Minimum coverage** (§3.5): greedily add the candidate with the largest
   ``gain = idf(newly covered query anchors) / cost ** 0.8`` that still fits the
   budget, until 85% of the query's IDF mass is covered or nothing with a
   positive gain fits.

What a decision does to selection is not specified by the report beyond its
experiment table; our literal reading:

* *continue* with a reference cue: the two most recent blocks are forced in
  first (the table's "强制继承最近2轮"), newest first, each if it fits;
  their anchors count as covered; then the greedy step runs.
* *continue* without a cue: plain retrieval + greedy, recency term included.
* *switch* ("prevent pollution"): nothing is forced and the recency term is
  dropped, so the old active topic gets no head start; retrieval + greedy still
  run (a block sharing no anchor with the query is never selected anyway).

A block's cost is ``count_tokens(user + "\\n" + assistant)``, the benchmark's cost.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ReportGatekeeper", "ReportSelection", "extract_anchors", "PARAMS"]

# The report's parameters, by name.
PARAMS = {
    "continue_overlap": 0.45,  # overlap > this -> continue
    "switch_overlap": 0.20,  # overlap < this ...
    "switch_new_ratio": 0.70,  # ... and new_ratio > this -> switch
    "w_user": 1.5,
    "w_assistant": 0.7,
    "w_exact": 1.0,
    "w_recency": 0.2,
    "top_m": 20,
    "coverage_target": 0.85,  # eta
    "cost_exponent": 0.8,  # alpha
    "forced_recent_on_reference": 2,
}

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_CODE = re.compile(r"`([^`\n]+)`")
_VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+)+(?![\w.]*\w)", re.IGNORECASE)
_QUOTED = re.compile(r'"([^"\n]+)"|“([^”\n]+)”')

_CN_CUES = ("这个", "它", "上面", "那个", "该", "此")
_EN_CUES = re.compile(r"\b(?:it|this|that|the above|they|them)\b", re.IGNORECASE)

# Prefixes marking the "exact" anchor kinds other than words.
_CODE_P, _VERSION_P, _QUOTE_P = "code:", "ver:", "quote:"


def _cjk_ngrams(text: str) -> list[str]:
    """CJK 2-grams and 3-grams over every run of CJK characters."""
    grams: list[str] = []
    for run in _CJK_RUN.findall(text):
        for n in (2, 3):
            grams.extend(run[i : i + n] for i in range(len(run) - n + 1))
    return grams


def extract_anchors(text: str) -> tuple[set[str], set[str]]:
    """Return ``(anchors, exact_anchors)`` of ``text`` (see the module docstring).

    ``exact_anchors`` is the subset the report's ``exact`` term rewards: English
    words, code identifiers, version numbers and quoted phrases.
    """
    words = {w.lower() for w in _WORD.findall(text)}
    exact = set(words)
    exact.update(_CODE_P + c.strip() for c in _CODE.findall(text) if c.strip())
    exact.update(_VERSION_P + v.lower() for v in _VERSION.findall(text))
    for ascii_q, cjk_q in _QUOTED.findall(text):
        phrase = (ascii_q or cjk_q).strip().lower()
        if phrase:
            exact.add(_QUOTE_P + phrase)
    return set(_cjk_ngrams(text)) | exact, exact


def has_reference_cue(query: str) -> bool:
    """Whether the query holds one of the report's reference words."""
    return any(cue in query for cue in _CN_CUES) or _EN_CUES.search(query) is not None


@dataclass
class ReportSelection:
    """What :meth:`ReportGatekeeper.explain` decided for one query."""

    turn_ids: list[int]  # 1-based, position order
    decision: Literal["continue", "switch"]
    tokens_kept: int
    tokens_total: int
    overlap: float = 0.0
    coverage: float = 0.0  # share of the query's IDF mass the selection covers
    scores: dict[int, float] = field(default_factory=dict)  # candidates' scores


@dataclass
class _Block:
    """One turn's anchors, recomputed on every query."""

    user: set[str]
    assistant: set[str]
    all: set[str]


class ReportGatekeeper:
    """The report's selector, recomputing everything on every query."""

    def __init__(self, *, token_budget: int, count_tokens: Callable[[str], int]) -> None:
        self.token_budget = token_budget
        self.count_tokens = count_tokens
        self._turns: list[tuple[str, str]] = []
        self._costs: list[int] = []

    def add_turn(self, user: str, assistant: str) -> int:
        """Append a turn; return its 1-based id."""
        self._turns.append((user, assistant))
        self._costs.append(self.count_tokens(user + "\n" + assistant))
        return len(self._turns)

    # -- the pipeline -------------------------------------------------------

    def _blocks(self) -> list[_Block]:
        """Every block's anchors, from scratch (the report's design)."""
        blocks = []
        for user, assistant in self._turns:
            u, _ = extract_anchors(user)
            a, _ = extract_anchors(assistant)
            blocks.append(_Block(u, a, u | a))
        return blocks

    @staticmethod
    def _idf(blocks: list[_Block]) -> Callable[[str], float]:
        """Smoothed IDF over the blocks; unseen anchors get the largest weight."""
        n = len(blocks)
        df: Counter[str] = Counter()
        for block in blocks:
            df.update(block.all)
        return lambda t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5))

    def _gate(self, query: str, q_idf: dict[str, float], blocks: list[_Block]) -> tuple[str, float]:
        """The report's topic gate against the last block; returns (decision, overlap)."""
        if not blocks:
            return "switch", 0.0
        mass = sum(q_idf.values())
        if mass <= 0:
            return "continue", 0.0
        active = blocks[-1].all
        overlap = sum(w for t, w in q_idf.items() if t in active) / mass
        new_ratio = sum(w for t, w in q_idf.items() if t not in active) / mass
        if has_reference_cue(query):
            return "continue", overlap
        if overlap > PARAMS["continue_overlap"]:
            return "continue", overlap
        if overlap < PARAMS["switch_overlap"] and new_ratio > PARAMS["switch_new_ratio"]:
            return "switch", overlap
        return "continue", overlap  # middle band: conservative

    @staticmethod
    def _share(q_idf: dict[str, float], anchors: set[str], mass: float) -> float:
        """IDF share of the query's anchors found in ``anchors``."""
        if mass <= 0:
            return 0.0
        return sum(w for t, w in q_idf.items() if t in anchors) / mass

    def _scores(
        self, q_idf: dict[str, float], q_exact: set[str], blocks: list[_Block], use_recency: bool
    ) -> list[float]:
        """§3.4 score of every block."""
        mass = sum(q_idf.values())
        exact_idf = {t: q_idf[t] for t in q_exact}
        exact_mass = sum(exact_idf.values())
        n = len(blocks)
        scores = []
        for i, block in enumerate(blocks, start=1):
            score = (
                PARAMS["w_user"] * self._share(q_idf, block.user, mass)
                + PARAMS["w_assistant"] * self._share(q_idf, block.assistant, mass)
                + PARAMS["w_exact"] * self._share(exact_idf, block.all, exact_mass)
            )
            if use_recency:
                score += PARAMS["w_recency"] * i / n
            scores.append(score)
        return scores

    def explain(self, query: str) -> ReportSelection:
        """Gate, retrieve and select for ``query``; nothing is stored."""
        blocks = self._blocks()
        idf = self._idf(blocks)
        q_anchors, q_exact = extract_anchors(query)
        q_idf = {t: idf(t) for t in q_anchors}
        mass = sum(q_idf.values())
        decision, overlap = self._gate(query, q_idf, blocks)
        total = sum(self._costs)

        chosen: list[int] = []  # 0-based positions
        covered: set[str] = set()
        spent = 0
        if decision == "continue" and blocks and has_reference_cue(query):
            for pos in range(len(blocks) - 1, -1, -1)[: PARAMS["forced_recent_on_reference"]]:
                if spent + self._costs[pos] <= self.token_budget:
                    chosen.append(pos)
                    spent += self._costs[pos]
                    covered |= blocks[pos].all & q_anchors

        scores = self._scores(q_idf, q_exact, blocks, use_recency=decision == "continue")
        ranked = sorted(range(len(blocks)), key=lambda p: (-scores[p], -p))
        candidates = [p for p in ranked[: PARAMS["top_m"]] if p not in chosen]

        target = PARAMS["coverage_target"] * mass

        def covered_mass() -> float:
            return sum(q_idf[t] for t in covered)

        while candidates and covered_mass() < target:
            best, best_gain = None, 0.0
            for pos in candidates:
                if spent + self._costs[pos] > self.token_budget:
                    continue
                new = sum(q_idf[t] for t in (blocks[pos].all & q_anchors) - covered)
                gain = new / max(self._costs[pos], 1) ** PARAMS["cost_exponent"]
                if gain > best_gain:
                    best, best_gain = pos, gain
            if best is None:
                break
            chosen.append(best)
            spent += self._costs[best]
            covered |= blocks[best].all & q_anchors
            candidates.remove(best)

        return ReportSelection(
            turn_ids=sorted(p + 1 for p in chosen),
            decision=decision,  # type: ignore[arg-type]
            tokens_kept=spent,
            tokens_total=total,
            overlap=overlap,
            coverage=covered_mass() / mass if mass > 0 else 1.0,
            scores={p + 1: scores[p] for p in ranked[: PARAMS["top_m"]]},
        )

    def select(self, query: str) -> list[dict]:
        """The selected turns, in position order, as ``{"user", "assistant", "turn_id"}``."""
        return [
            {"user": self._turns[tid - 1][0], "assistant": self._turns[tid - 1][1], "turn_id": tid}
            for tid in self.explain(query).turn_ids
        ]
