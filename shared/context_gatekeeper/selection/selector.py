"""Scoring candidates and choosing the turns to keep.

:func:`score_candidates` walks only the postings of the query's anchors;
:func:`greedy_cover` is the report's minimum-coverage selector (a weighted set
cover solved greedily by newly covered weight per ``cost ** alpha``).  The
``keep_*`` steps that follow it each add turns to ``reasons`` (turn id -> why it
is kept) while they fit the remaining budget (a :class:`Kept`).

Every ``keep_*`` step keeps a turn only with :class:`~selection.Evidence` that the
query needs it: its distinctive content, membership of the topic the query
continues or returns to, or resolving a reference.  The budget is a ceiling, not a
target: with the default parameters, budget left over stays unused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .anchors import AnchorKind, anchor_kind
from .index import AnchorIndex
from .history import TurnHistory
from .params import SelectionParams
from .scoring import coverage_gain, recency_weights
from .records import Evidence, TurnScore
from .word_prior import anchor_commonness

__all__ = [
    "Candidate",
    "Kept",
    "score_candidates",
    "greedy_cover",
    "distinctive",
    "match_share",
    "share_of",
    "keep_coverage",
    "keep_topic",
    "keep_follow_up",
    "keep_fill",
    "keep_neighbours",
    "score_records",
]


@dataclass(slots=True)  # a query makes one per matching turn: slots make them lighter to build and score
class Candidate:
    """A turn that holds at least one query anchor, with its score parts (weighted)."""

    turn_id: int
    position: int
    cost: int
    user: float = 0.0
    assistant: float = 0.0
    exact: float = 0.0
    recency: float = 0.0
    covered: list[str] = field(default_factory=list)
    telling: list[str] = field(default_factory=list)
    semantic: float = 0.0
    similarity: float | None = None
    z: float | None = None
    distinct: tuple[str, ...] | None = field(default=None, repr=False, compare=False)
    """:func:`distinctive`'s answer, kept by its first call (``covered`` is complete by then)."""

    @property
    def total(self) -> float:
        return self.user + self.assistant + self.exact + self.recency + self.semantic


def score_candidates(
    weights: Mapping[str, float],
    index: AnchorIndex,
    positions: Mapping[int, int],
    labels: Sequence[int],
    costs: Mapping[int, int],
    params: SelectionParams,
) -> tuple[dict[int, Candidate], dict[int, float]]:
    """Score every turn holding a query anchor; also sum the query weight per topic.

    Returns ``(candidates by turn id, topic label -> weight of the query's anchors its
    turns hold)``, each anchor counted once per topic, lone CJK characters left out.
    Lexical parts are normalised by the query's total weight, so each lies in 0..1
    before its weight is applied.
    """
    total = sum(weights.values()) or 1.0
    k1, b = params.k1, params.b
    avg_user, avg_assistant = index.avg_user_len, index.avg_assistant_len
    user_scale = params.user_weight / (total * (k1 + 1.0))
    assistant_scale = params.assistant_weight / (total * (k1 + 1.0))
    exact_scale = params.exact_weight / total
    # scoring.bm25_saturation inlined, term by term the same arithmetic (the same floats):
    # tf * (k1 + 1) / (tf + k1 * (1 - b + b * (length / avg, or 1 when avg is 0)))
    k1_plus_1, one_minus_b = k1 + 1.0, 1.0 - b
    turns = index.turns
    last = len(labels) - 1
    max_common = params.evidence_max_commonness
    candidates: dict[int, Candidate] = {}
    topic_weight: dict[int, float] = {}
    for anchor, weight in weights.items():
        bucket = index.postings.get(anchor)
        kind = anchor_kind(anchor)
        kind_weight = params.kind_weights[kind]
        if not bucket or kind_weight <= 0 or weight / kind_weight < params.min_anchor_idf:
            continue
        is_exact = kind == AnchorKind.EXACT
        telling = kind != AnchorKind.CJK_CHAR and anchor_commonness(anchor) < max_common
        user_part, assistant_part = weight * user_scale, weight * assistant_scale  # the products' first factors
        exact_part = weight * exact_scale
        for turn_id, (tf_user, tf_assistant) in bucket.items():
            candidate = candidates.get(turn_id)
            if candidate is None:
                candidate = candidates[turn_id] = Candidate(turn_id, positions[turn_id], costs[turn_id])
            if tf_user > 0:
                length = turns[turn_id].user_len
                norm = one_minus_b + b * (length / avg_user if avg_user > 0 else 1.0)
                candidate.user += user_part * (tf_user * k1_plus_1 / (tf_user + k1 * norm))
            if tf_assistant > 0:
                length = turns[turn_id].assistant_len
                norm = one_minus_b + b * (length / avg_assistant if avg_assistant > 0 else 1.0)
                candidate.assistant += assistant_part * (tf_assistant * k1_plus_1 / (tf_assistant + k1 * norm))
            if is_exact:
                candidate.exact += exact_part
            candidate.covered.append(anchor)
            if telling:
                candidate.telling.append(anchor)
        if kind != AnchorKind.CJK_CHAR:  # a lone character does not tie a query to a topic
            for label in {labels[positions[turn_id]] for turn_id in bucket}:
                topic_weight[label] = topic_weight.get(label, 0.0) + weight
    recency = recency_weights(params.recency_weight, params.recency_half_life, last + 1)
    for candidate in candidates.values():
        candidate.recency = recency[last - candidate.position]
    return candidates, topic_weight


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


@dataclass
class Kept:
    """The turns kept so far for one query, why, and the budget left.

    Attributes:
        history: the turns.
        budget: tokens left.
        reasons: turn id -> the reason in words (see :class:`TurnScore`).
        evidence: turn id -> the structured reason: the union of every step that would
            keep the turn (a later step's evidence is merged in, :meth:`Evidence.merged`).
        dropped: turn id -> why a turn kept by an earlier step was let go again.
    """

    history: TurnHistory
    budget: int
    reasons: dict[int, str] = field(default_factory=dict)
    evidence: dict[int, Evidence] = field(default_factory=dict)
    dropped: dict[int, str] = field(default_factory=dict)

    def drop(self, turn_id: int, why: str) -> None:
        """Let a kept turn go again (its tokens return to the budget); ``why`` is the
        reason ``explain`` gives for it."""
        if self.reasons.pop(turn_id, None) is not None:
            self.evidence.pop(turn_id, None)
            self.budget += self.history.costs[turn_id]
            self.dropped[turn_id] = why

    def keep(self, turn_id: int, reason: str, evidence: Evidence) -> bool:
        """Keep a turn if it fits (a turn kept already gains the new evidence)."""
        if turn_id in self.reasons:
            self.evidence[turn_id] = self.evidence.get(turn_id, Evidence()).merged(evidence)
            return True
        cost = self.history.costs[turn_id]
        if cost > self.budget or not evidence:
            return False
        self.reasons[turn_id] = reason
        self.evidence[turn_id] = evidence
        self.budget -= cost
        return True


def distinctive(candidate: Candidate) -> tuple[str, ...]:
    """The query anchors a candidate holds that can stand as evidence within the topic the
    query refers to: not a lone CJK character (stopwords and cue words never became anchors).

    Each ``keep_*`` step asks it of the same candidates: the answer is kept on the candidate
    by the first call (:attr:`Candidate.distinct`), so call it only once ``covered`` is complete
    (after :func:`score_candidates`)."""
    found = candidate.distinct
    if found is None:
        cjk = AnchorKind.CJK_CHAR
        found = candidate.distinct = tuple(a for a in candidate.covered if anchor_kind(a) != cjk)
    return found


def match_share(candidate: Candidate, weights: Mapping[str, float]) -> float:
    """Share of the query's weight in the anchors a candidate holds that are evidence across
    topics: distinctive (:func:`distinctive`) and less common in the language than
    ``evidence_max_commonness`` (default 0.9: "一般" at 0.90 or "不能" at 0.93 tie no turn of
    another topic to the query, however rare they are in this chat; "usually" at 0.73 still
    does)."""
    return share_of(candidate.telling, weights)


def share_of(anchors: Sequence[str], weights: Mapping[str, float]) -> float:
    """Share of the query's weight in these anchors (each counted once)."""
    total = sum(weights.values())
    return sum(weights[a] for a in set(anchors)) / total if total > 0 else 0.0


def keep_coverage(
    pool: Sequence[Candidate],
    weights: Mapping[str, float],
    topic: int | None,
    labels: Sequence[int],
    params: SelectionParams,
    kept: Kept,
    target: float,
    covered: set[str],
) -> None:
    """Greedy minimum coverage over the candidates with evidence: those of ``topic``
    (the topic the query continues or returns to) holding any distinctive anchor, and
    those of other topics holding at least ``off_topic_share`` of the query's weight in
    words distinctive in the language (:func:`match_share`; at least one such word)."""
    evidence = [
        c
        for c in pool
        if distinctive(c)
        and (labels[c.position] == topic or (c.telling and match_share(c, weights) >= params.off_topic_share))
    ]
    chosen, _ = greedy_cover(evidence, weights, target, kept.budget, params.cost_exponent, covered=covered)
    for candidate in chosen:
        on_topic = labels[candidate.position] == topic
        shared = distinctive(candidate) if on_topic else tuple(candidate.telling)
        kept.keep(candidate.turn_id, "coverage", Evidence(shared, topic if on_topic else None))


def keep_topic(
    pool: Sequence[Candidate], topic: int, returning: bool, params: SelectionParams, kept: Kept
) -> None:
    """For a query that continues or returns to ``topic``: every turn of it that holds
    a distinctive query anchor (best first); then, when the topic recurs in the last
    ``topic_lookback`` turns (an interleaved chat: A, B, A, B), every turn of it there,
    newest first; otherwise its latest ``topic_turns`` turns (``return_turns`` on a
    return: the context the user comes back to)."""
    history = kept.history
    labels = history.labels
    for candidate in pool:
        if labels[candidate.position] == topic and distinctive(candidate):
            kept.keep(candidate.turn_id, "topic", Evidence(distinctive(candidate), topic))
    recent = [
        pos for pos in range(len(labels) - 1, max(0, len(labels) - params.topic_lookback) - 1, -1)
        if labels[pos] == topic
    ]
    runs = sum(1 for i, pos in enumerate(recent) if i == 0 or recent[i - 1] != pos + 1)
    if runs < 2:
        recent = history.latest_of_topic(topic, params.return_turns if returning else params.topic_turns)
    for position in recent:
        kept.keep(history.order[position], "topic", Evidence(topic=topic))


def keep_follow_up(topic: int | None, params: SelectionParams, kept: Kept, *, latest_only: bool = False) -> None:
    """For a reference or an elliptical follow-up ("Why?", "which one should I pick?",
    "它呢？"): the latest ``follow_up_turns`` turns of the active topic (every run of
    it), the turn that opened the topic, and the newest angle of its current run (the
    turn that brought the most new content); ``latest_only`` (an acknowledgement: "ok
    thanks", "好的"): the latest turns alone.

    Such a query leans on the turn before it and on the turn that introduced the
    topic; neither need share its words.
    """
    history = kept.history
    latest = history.latest_of_topic(topic, max(1, params.follow_up_turns))
    if not latest or topic is None:
        return
    wanted = list(latest[: params.follow_up_turns])
    if params.keep_topic_opener and not latest_only:
        wanted.append(topic)  # a topic's label is the position of the turn that opened it
        if params.keep_newest_angle:
            last = latest[0]
            start = history.segment_start(last)
            novelty = history.novelty
            newest = max(range(start + 1, last + 1), key=lambda pos: (novelty[pos], pos), default=start)
            if novelty[newest] >= params.switch_min_new_weight:
                wanted.append(newest)
    for position in wanted:
        kept.keep(history.order[position], "follow-up", Evidence(topic=topic, reference=True))


def keep_fill(pool: Sequence[Candidate], weights: Mapping[str, float], params: SelectionParams, kept: Kept) -> None:
    """The fill after coverage: further matching candidates from any topic, best first,
    scoring at least ``fill_ratio`` of the best score and holding at least
    ``fill_min_share`` of the query's weight in distinctive anchors and ``fill_min_words``
    words distinctive in the language, or (with an embedder) similar at or above
    ``semantic_floor``.  The default keeps only strong matches (``fill_ratio`` 0.3,
    ``fill_min_share`` 0.2, ``fill_min_words`` 2): leftover budget is not evidence; the
    ``"recall"`` preset (``fill_ratio`` 0) also keeps weaker ones.  With calibrated
    similarities the fill stops at ``semantic_fill_ratio`` of the best score, if that is
    higher: the fused score finds the evidence early, and its tail is mostly noise."""
    if not pool or params.fill_ratio >= 1.0:
        return
    ratio = params.fill_ratio
    if any(candidate.z is not None for candidate in pool):
        ratio = max(ratio, params.semantic_fill_ratio)
    floor = ratio * pool[0].total
    for candidate in pool:
        if candidate.total < floor:
            break
        if (
            distinctive(candidate)
            and len(set(candidate.telling)) >= params.fill_min_words
            and share_of(distinctive(candidate), weights) >= params.fill_min_share
        ):
            kept.keep(candidate.turn_id, "fill", Evidence(distinctive(candidate), fill=True))
        elif candidate.z is not None and candidate.z >= params.semantic_floor:
            kept.keep(candidate.turn_id, "fill", Evidence(fill=True, semantic=True))


def keep_neighbours(
    pool: Sequence[Candidate], candidates: Mapping[int, Candidate], params: SelectionParams, kept: Kept
) -> None:
    """The turn right after each kept match (and the one before, with
    ``neighbour_fill=2``), best match first, when it is of the same topic and holds a
    distinctive query anchor too: an answer often lands in the exchange next to the one
    that matched, even when it shares little of the query."""
    if not params.neighbour_fill:
        return
    history = kept.history
    labels, order = history.labels, history.order
    for candidate in pool:
        if kept.reasons.get(candidate.turn_id) not in ("coverage", "topic", "fill"):
            continue
        for position in (candidate.position + 1, candidate.position - 1)[: params.neighbour_fill]:
            if not (0 <= position < len(order) and labels[position] == labels[candidate.position]):
                continue
            neighbour = candidates.get(order[position])
            if neighbour is not None and distinctive(neighbour):
                evidence = kept.evidence.get(candidate.turn_id, Evidence())
                kept.keep(neighbour.turn_id, "neighbour", Evidence(distinctive(neighbour), evidence.topic))


def score_records(
    pool: Sequence[Candidate],
    candidates: Mapping[int, Candidate],
    weights: Mapping[str, float],
    kept: Kept,
    explicit_switch: bool,
    topic: int | None,
    params: SelectionParams,
    view: Any = None,
) -> tuple[TurnScore, ...]:
    """What ``explain`` shows: one record per pooled or kept turn, best first, each with
    the reason it was kept or dropped and its evidence (and, given the query's semantic
    ``view``, the similarity of kept turns that were not candidates)."""
    history = kept.history
    in_pool = {c.turn_id for c in pool}
    shown = list(pool) + [
        candidates.get(t) or Candidate(t, history.positions[t], history.costs[t])
        for t in (*kept.reasons, *(t for t in kept.dropped if t not in kept.reasons))  # a let-go turn shows why
        if t not in in_pool
    ]
    for c in shown if view is not None else ():
        if c.similarity is None and c.turn_id not in candidates:
            c.similarity, c.z = view.of(c.turn_id) or (None, None)
    records = []
    for c in sorted(shown, key=lambda c: (-c.total, c.position)):
        label = history.labels[c.position]
        reason = kept.reasons.get(c.turn_id)
        if reason is None:
            if c.turn_id in kept.dropped:
                reason = kept.dropped[c.turn_id]
            elif explicit_switch and not params.keep_on_explicit_switch:
                reason = "explicit switch"
            elif c.turn_id not in in_pool:
                reason = "below top-M"
            elif not distinctive(c):
                reason = "off-topic" if c.semantic and label != topic else "weak match"
            elif label != topic and match_share(c, weights) < params.off_topic_share:
                reason = "off-topic"
            else:
                reason = "over budget" if c.cost > kept.budget else "no new coverage"
        records.append(
            TurnScore(
                turn_id=c.turn_id, user=c.user, assistant=c.assistant, exact=c.exact, recency=c.recency,
                total=c.total, covered=tuple(c.covered), cost=c.cost, kept=c.turn_id in kept.reasons,
                reason=reason, evidence=kept.evidence.get(c.turn_id) or Evidence(distinctive(c)), topic=label,
                semantic=c.semantic, similarity=c.similarity, similarity_z=c.z, semantic_decisive=_decisive(kept.reasons.get(c.turn_id), kept.evidence.get(c.turn_id)),
            )
        )
    return tuple(records)


def _decisive(reason: str | None, evidence: Evidence | None) -> bool:
    """Meaning is what kept the turn: the semantic step kept it (reason ``"semantic"``),
    or the recall fill kept it on its meaning alone.  A turn a lexical rule kept
    ("coverage", "topic", "follow-up", ...) is not, even if its meaning matches too."""
    if evidence is None or not evidence.semantic or evidence.pinned:
        return False
    return reason == "semantic" or (reason == "fill" and not evidence.covered)
