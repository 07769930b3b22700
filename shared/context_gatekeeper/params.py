"""Every weight and threshold of selection, as one documented, immutable record.

Defaults start from the report (thresholds 0.45 / 0.20 / 0.70, weights 1.5 / 0.7 /
1.0 / 0.2, M = 20, coverage 0.85, cost exponent 0.8) and were then tuned on the
development data in ``../shared/data`` (``benchmarks/quality.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .anchors import AnchorKind
from .scoring import IDF_FORMULAS

__all__ = ["SelectionParams"]


@dataclass(frozen=True)
class SelectionParams:
    """Parameters of the gate, the scorer and the coverage selector."""

    # -- anchor weights ---------------------------------------------------------------
    idf: str = "bm25"
    """Name of the IDF formula in :data:`scoring.IDF_FORMULAS`."""
    idf_prior_docs: float = 10.0
    """Pseudo-turns that hold no anchor, added to the turn count in IDF: keeps weights
    sensible in a short history, where every seen anchor would otherwise look common."""
    kind_weights: dict[str, float] = field(
        default_factory=lambda: {
            AnchorKind.WORD: 1.0,
            AnchorKind.CJK_BIGRAM: 0.2,
            AnchorKind.CJK_CHAR: 0.12,
            AnchorKind.EXACT: 1.0,
        }
    )
    """Multiplier of an anchor's IDF by kind.  Chinese text yields many overlapping
    n-grams (a k-character word gives k - 1 bigrams, and documents also index its k
    characters), so a Chinese message carries several times the anchors of an English
    one of the same meaning; CJK anchors weigh less each to put the two on one scale
    (values tuned on CrossWOZ and the mixed-language scenarios)."""

    # -- BM25 -------------------------------------------------------------------------
    k1: float = 1.2
    """BM25 term-frequency saturation."""
    b: float = 0.75
    """BM25 length normalisation (0 = none, 1 = full)."""

    # -- candidate score --------------------------------------------------------------
    user_weight: float = 1.5
    """Weight of the lexical match against a turn's user text."""
    assistant_weight: float = 0.7
    """Weight of the lexical match against a turn's assistant (and tool) text."""
    exact_weight: float = 1.0
    """Weight of exact hits: identifiers, versions, code spans, quoted phrases."""
    recency_weight: float = 0.2
    """Weight of the recency prior (a weak tie-breaker among matching turns)."""
    recency_half_life: float = 3.0
    """Turns after which the recency prior halves."""
    segment_weight: float = 0.3
    """Bonus for turns in the segment the gate chose (active on continue, matched on return)."""
    top_m: int = 20
    """Candidates kept for the coverage step."""
    min_anchor_idf: float = 0.05
    """Anchors whose IDF falls below this are too common to retrieve by (their postings are skipped)."""

    # -- gate -------------------------------------------------------------------------
    continue_threshold: float = 0.10
    """Overlap with the active topic above which the query continues it (the report's
    0.45 assumed no stopwords and an undecayed topic; tuned down on the dev data)."""
    switch_threshold: float = 0.20
    """Overlap below which (with enough new anchors) the query switches topic."""
    new_anchor_threshold: float = 0.70
    """Share of query weight never seen in the history needed for a switch."""
    return_threshold: float = 0.45
    """Overlap with an earlier segment needed for a return."""
    return_margin: float = 0.15
    """How much better the earlier segment must match than the active topic."""
    topic_window: int = 4
    """The active topic is the anchors of the last this many turns."""
    topic_decay: float = 0.3
    """Strength of an anchor in the active topic halves (by default) with each turn back."""
    switch_min_new_weight: float = 3.0
    """New content (IDF units of unseen anchors) a query needs to switch topic."""
    reference_override: float = 5.0
    """A reference cue forces continue unless new content exceeds this many times
    ``switch_min_new_weight`` (the report: a reference cue always forces continue)."""

    # -- coverage selection -----------------------------------------------------------
    coverage_target: float = 0.85
    """Stop adding turns once this share of the coverable query weight is covered."""
    cost_exponent: float = 0.8
    """Exponent of the turn cost in the greedy gain."""
    follow_up_turns: int = 1
    """On an elliptical continue, the most recent turns of the active segment kept."""
    weak_switch_factor: float = 5.0
    """A switch without a switch cue and with new content below this many times
    ``switch_min_new_weight`` is weak: selection treats it like an elliptical continue."""
    keep_topic_opener: bool = True
    """On an elliptical continue, also keep the turn that opened the active segment."""
    keep_newest_angle: bool = True
    """With the opener, also keep the active segment's turn that brought the most new
    content (a new angle on the topic, e.g. "what about a food truck?")."""
    elliptical_threshold: float = 0.5
    """A continue is elliptical when less than this share of query weight is found in the history."""
    fill_ratio: float = 0.0
    """After coverage, also keep candidates scoring at least this share of the best score
    while they fit (0 = fill the budget with matching turns; 1.0 = none)."""

    fill_min_share: float = 0.1
    """... and holding at least this share of the query's anchor weight."""

    neighbour_fill: int = 1
    """With budget left, keep neighbours of kept matches: 1 = the turn after, 2 = after and before."""

    max_query_chars: int = 4000
    """Only the first this many characters of a query (and of a user message, when it
    is gated during segmentation) are read for anchors and cues: the gist of a
    message is at its start, and a pasted log must not make every call slow.
    Indexing for retrieval always reads the whole text."""

    extra_stopwords: frozenset[str] = frozenset()
    """Anchors to ignore in addition to the built-in stopword lists."""

    def __post_init__(self) -> None:
        if self.idf not in IDF_FORMULAS:
            raise ValueError(f"unknown idf {self.idf!r}; choose one of {sorted(IDF_FORMULAS)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"SelectionParams.{f.name} must be >= 0, got {value!r}")
        kinds = {AnchorKind.WORD, AnchorKind.CJK_BIGRAM, AnchorKind.CJK_CHAR, AnchorKind.EXACT}
        if set(self.kind_weights) != kinds or any(w < 0 for w in self.kind_weights.values()):
            raise ValueError(
                f"SelectionParams.kind_weights needs a weight >= 0 for each of {sorted(kinds)}, "
                f"got {self.kind_weights!r}"
            )
        if self.top_m < 1 or self.topic_window < 1 or self.max_query_chars < 1:
            raise ValueError("SelectionParams.top_m, topic_window and max_query_chars must be >= 1")
        if not 0 < self.coverage_target <= 1:
            raise ValueError("SelectionParams.coverage_target must be in (0, 1]")

    def with_(self, **changes: object) -> "SelectionParams":
        """A copy with some fields changed (validated)."""
        return replace(self, **changes)
