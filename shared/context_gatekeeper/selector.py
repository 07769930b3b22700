"""Scoring candidates and choosing the turns to keep.

:func:`score_candidates` walks only the postings of the query's anchors;
:func:`greedy_cover` is the report's minimum-coverage selector (a weighted set
cover solved greedily by newly covered weight per ``cost ** alpha``).  The
``keep_*`` steps that follow it each add turns to ``reasons`` (turn id -> why it
is kept) while they fit the remaining budget, and return what is left of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .anchors import AnchorKind, anchor_kind
from .index import AnchorIndex
from .history import TurnHistory
from .params import SelectionParams
from .scoring import bm25_saturation, coverage_gain, recency_prior

__all__ = [
    "Candidate",
    "score_candidates",
    "greedy_cover",
    "is_weak_evidence",
    "keep_follow_up",
    "keep_fill",
    "keep_neighbours",
]


@dataclass
class Candidate:
    """A turn that holds at least one query anchor, with its score parts (weighted)."""

    turn_id: int
    position: int
    cost: int
    user: float = 0.0
    assistant: float = 0.0
    exact: float = 0.0
    recency: float = 0.0
    segment: float = 0.0
    covered: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.user + self.assistant + self.exact + self.recency + self.segment


def is_weak_evidence(candidate: Candidate) -> bool:
    """True when a turn matches the query only on single CJK characters: too
    ambiguous ("加", "用") to select a turn on their own."""
    return all(anchor_kind(a) == AnchorKind.CJK_CHAR for a in candidate.covered)


def score_candidates(
    weights: Mapping[str, float],
    index: AnchorIndex,
    positions: Mapping[int, int],
    labels: Sequence[int],
    costs: Mapping[int, int],
    params: SelectionParams,
) -> tuple[dict[int, Candidate], dict[int, float]]:
    """Score every turn holding a query anchor; also sum the query weight per segment.

    Returns ``(candidates by turn id, segment label -> weight of query anchors it holds)``.
    Lexical parts are normalised by the query's total weight, so each lies in 0..1
    before its weight is applied.
    """
    total = sum(weights.values()) or 1.0
    k1, b = params.k1, params.b
    avg_user, avg_assistant = index.avg_user_len, index.avg_assistant_len
    user_scale = params.user_weight / (total * (k1 + 1.0))
    assistant_scale = params.assistant_weight / (total * (k1 + 1.0))
    exact_scale = params.exact_weight / total
    turns = index.turns
    last = len(labels) - 1
    candidates: dict[int, Candidate] = {}
    segment_weight: dict[int, float] = {}
    for anchor, weight in weights.items():
        bucket = index.postings.get(anchor)
        kind_weight = params.kind_weights[anchor_kind(anchor)]
        if not bucket or kind_weight <= 0 or weight / kind_weight < params.min_anchor_idf:
            continue
        is_exact = anchor_kind(anchor) == AnchorKind.EXACT
        segments_hit: set[int] = set()
        for turn_id, (tf_user, tf_assistant) in bucket.items():
            candidate = candidates.get(turn_id)
            if candidate is None:
                position = positions[turn_id]
                candidate = candidates[turn_id] = Candidate(turn_id, position, costs[turn_id])
            turn = turns[turn_id]
            if tf_user:
                candidate.user += weight * user_scale * bm25_saturation(tf_user, turn.user_len, avg_user, k1, b)
            if tf_assistant:
                candidate.assistant += (
                    weight * assistant_scale * bm25_saturation(tf_assistant, turn.assistant_len, avg_assistant, k1, b)
                )
            if is_exact:
                candidate.exact += weight * exact_scale
            candidate.covered.append(anchor)
            segments_hit.add(labels[candidate.position])
        for label in segments_hit:
            segment_weight[label] = segment_weight.get(label, 0.0) + weight
    for candidate in candidates.values():
        candidate.recency = params.recency_weight * recency_prior(last - candidate.position, params.recency_half_life)
    return candidates, segment_weight


def greedy_cover(
    candidates: Sequence[Candidate],
    weights: Mapping[str, float],
    target: float,
    budget: int,
    alpha: float,
    covered: set[str] | None = None,
) -> tuple[list[Candidate], float]:
    """Pick candidates by newly covered weight per ``cost ** alpha`` until ``target`` weight
    is covered or nothing that fits adds coverage.  Ties go to the higher score.

    ``covered`` holds anchors already covered (by pinned turns).
    Returns ``(chosen in pick order, covered weight)``.
    """
    covered = set(covered or ())
    covered_weight = sum(weights[a] for a in covered)
    chosen: list[Candidate] = []
    remaining = list(candidates)
    while remaining and covered_weight < target:
        best, best_key = None, (0.0, 0.0)
        for candidate in remaining:
            if candidate.cost > budget:
                continue
            new = sum(weights[a] for a in candidate.covered if a not in covered)
            key = (coverage_gain(new, candidate.cost, alpha), candidate.total)
            if new > 0 and key > best_key:
                best, best_key = candidate, key
        if best is None:
            break
        chosen.append(best)
        remaining.remove(best)
        budget -= best.cost
        for anchor in best.covered:
            if anchor not in covered:
                covered.add(anchor)
                covered_weight += weights[anchor]
    return chosen, covered_weight


def _keep(history: TurnHistory, turn_id: int, reason: str, reasons: dict[int, str], budget: int) -> int:
    if turn_id not in reasons and history.costs[turn_id] <= budget:
        reasons[turn_id] = reason
        budget -= history.costs[turn_id]
    return budget


def keep_follow_up(history: TurnHistory, params: SelectionParams, reasons: dict[int, str], budget: int) -> int:
    """For an elliptical follow-up: the last turns, the active segment's opening
    turn and its newest angle (the turn that brought the most new content).

    A query like "how much does it cost?" leans on the turn before it and on the
    turn that introduced the topic; neither need share its words.
    """
    if not history.order:
        return budget
    last = len(history.order) - 1
    start = history.segment_start(last)
    wanted = list(range(last, max(start, last - params.follow_up_turns + 1) - 1, -1))
    if params.keep_topic_opener:
        wanted.append(start)
        if params.keep_newest_angle:
            novelty = history.novelty
            newest = max(range(start + 1, last + 1), key=lambda pos: (novelty[pos], pos), default=start)
            if novelty[newest] >= params.switch_min_new_weight:
                wanted.append(newest)
    for position in wanted:
        budget = _keep(history, history.order[position], "follow-up", reasons, budget)
    return budget


def keep_fill(
    pool: Sequence[Candidate],
    weights: Mapping[str, float],
    history: TurnHistory,
    params: SelectionParams,
    reasons: dict[int, str],
    budget: int,
) -> int:
    """Further matching candidates, best first: those scoring at least ``fill_ratio``
    of the best score, holding at least ``fill_min_share`` of the query's weight, and
    matching more than single CJK characters."""
    if not pool or params.fill_ratio >= 1.0:
        return budget
    floor = params.fill_ratio * pool[0].total
    minimum = params.fill_min_share * sum(weights.values())
    for candidate in pool:
        if candidate.total < floor:
            break
        if is_weak_evidence(candidate) or sum(weights[a] for a in candidate.covered) < minimum:
            continue
        budget = _keep(history, candidate.turn_id, "fill", reasons, budget)
    return budget


def keep_neighbours(
    pool: Sequence[Candidate],
    candidates: Mapping[int, Candidate],
    history: TurnHistory,
    params: SelectionParams,
    reasons: dict[int, str],
    budget: int,
) -> int:
    """The turn right after each kept match (and the one before, with
    ``neighbour_fill=2``), best match first, when it is in the same segment and
    matches the query too: an answer often lands in the exchange next to the one
    that matched, even when it shares little of the query."""
    if not params.neighbour_fill:
        return budget
    labels, order = history.labels, history.order
    for candidate in pool:
        if reasons.get(candidate.turn_id) not in ("coverage", "fill"):
            continue
        for position in (candidate.position + 1, candidate.position - 1)[: params.neighbour_fill]:
            if not (0 <= position < len(order) and labels[position] == labels[candidate.position]):
                continue
            neighbour = candidates.get(order[position])
            if neighbour is not None and not is_weak_evidence(neighbour):
                budget = _keep(history, neighbour.turn_id, "neighbour", reasons, budget)
    return budget
