"""Topics and their segments: a pure function of the turn list, maintained incrementally;
and, at query time, the topic a query refers to (:func:`gate_query`).

Every turn carries a *topic label*.  Each turn's user message is gated against
the topics seen just before it, using only the statistics of the turns before
it: it continues the topic of the turn before it, returns to another recent
topic, or opens a new one.  A topic's label is the position of the turn that
opened it, so labels are a pure function of the turn list too, and a topic can
recur: a chat alternating two topics A, B, A, B gives four *segments*
(contiguous runs of one label) but only two labels, and a query that continues
A can draw on every run of A and none of B.

The labels of a list never depend on what comes later: an append extends them,
and a replace, insert or remove at position ``p`` recomputes them from ``p``
onward, in time proportional to that suffix.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

from .anchors import AnchorKind, anchor_kind, extract
from .cues import Cues
from .gate import (
    Decision, GateFeatures, _weights_and_exact, anchor_weights, answers_assistant, decide, gate_features, refer,
    semantic_decide, takes_note,
)
from .params import SelectionParams

__all__ = [
    "SegmentInput",
    "topic_profiles",
    "best_other_topic",
    "affinity",
    "previous_topic",
    "next_label",
    "segment_all",
    "gate_query",
]


@dataclass(frozen=True)
class SegmentInput:
    """What segmentation needs of one turn.

    Attributes:
        user: distinct content anchors of the user message, query mode, cue words
            removed (what is gated).
        cues: cues found in the user message.
        anchors: every distinct anchor of the turn (what later turns are gated against).
        answered: the turn has an answer with anchors of its own, so its topic can be
            read from the whole exchange, not only from the user's words.
        asks, closes: the turn's answer ends with a genuine question to the user, or with a
            courtesy question ("Anything else?"): inputs of the switch score when the next
            turn is gated, as at query time (:func:`gate.asks_question`, :func:`gate.closes_topic`).
        acknowledges: the user message only acknowledges the answer before it ("ok thanks",
            "好的谢谢"; :func:`gate.acknowledges`).
        answer: the assistant text (the turn's own string, not a copy), read again only
            where a sentence repeats (:func:`voice_anchors`).
        sentences: the hashes of the answer's sentences (:func:`answer_sentences`): a
            sentence the answer before it also had word for word is the assistant's own
            voice ("I hope this helps!"), not the topic's.
    """

    user: tuple[str, ...]
    cues: Cues
    anchors: frozenset[str]
    answered: bool = False
    asks: bool = False
    closes: bool = False
    acknowledges: bool = False
    answer: str = ""
    sentences: frozenset[int] = frozenset()


_SENTENCE = re.compile(r"\S.*?(?:[.!?](?=\s|$)|[。！？]|$)", re.MULTILINE)
"""A sentence: from its first visible character to a full stop, question or exclamation mark
followed by a space or the line's end (so ``asyncio.gather`` and ``3.11`` stay whole), a
Chinese one, or the line's end."""


VOICE_LONGEST = 300
"""The longest sentence (characters) that can be an assistant's voice: boilerplate is short,
and a long passage repeated (a pasted log quoted again) is content."""


def answer_sentences(answer: str) -> list[str]:
    """The sentences of an answer, as written, in order (:data:`_SENTENCE`): what
    :func:`voice_anchors` compares between consecutive answers, case aside."""
    return _SENTENCE.findall(answer)


def sentence_hashes(answer: str) -> frozenset[int]:
    """The hashes of an answer's sentences short enough to be its voice (:data:`VOICE_LONGEST`),
    case-folded."""
    return frozenset(hash(s.casefold()) for s in answer_sentences(answer) if len(s) <= VOICE_LONGEST)


@lru_cache(maxsize=4096)
def _sentence_anchors(sentence: str) -> frozenset[str]:
    """The anchors of one short sentence (kept: boilerplate repeats)."""
    return frozenset(extract(sentence).counts)


def _anchors_of(sentence: str) -> frozenset[str]:
    return _sentence_anchors(sentence) if len(sentence) <= VOICE_LONGEST else frozenset(extract(sentence).counts)


def voice_anchors(turn: SegmentInput, before: SegmentInput) -> frozenset[str]:
    """The anchors a turn's answer holds only in sentences the answer before it had word for
    word: an assistant's boilerplate ("I hope this helps! Feel free to ask if anything is
    unclear."), which ties every topic to every other when read as the topic's words.  Empty
    when no sentence repeats (nearly always: an answer's content is not repeated verbatim)."""
    repeated = turn.sentences & before.sentences
    if not repeated:
        return frozenset()
    voice: set[str] = set()
    rest: set[str] = set()
    for sentence in answer_sentences(turn.answer):
        voiced = len(sentence) <= VOICE_LONGEST and hash(sentence.casefold()) in repeated
        (voice if voiced else rest).update(_anchors_of(sentence))
    return frozenset(voice - rest)


def topic_profiles(
    labels: Sequence[int], turns: Sequence[SegmentInput], end: int, lookback: int, size: int, decay: float
) -> dict[int, dict[str, float]]:
    """The topics of the last ``lookback`` turns before position ``end``, each as its
    anchors with the strength of the most recent of its turns holding them: 1 for the
    topic's latest turn, then ``decay``, ``decay ** 2``, ... for at most ``size`` of its turns.

    A topic's strength fades with its own turns, not with the turns of other topics in
    between: in A, B, A the first A turn is the second-latest turn of topic A.
    """
    profiles: dict[int, dict[str, float]] = {}
    turns_seen: dict[int, int] = {}
    for pos in range(end - 1, max(0, end - lookback) - 1, -1):
        label = labels[pos]
        back = turns_seen.get(label, 0)
        if back >= size:
            continue
        turns_seen[label] = back + 1
        profile = profiles.get(label)
        if profile is None:  # the topic's latest turn: every anchor at its strength
            profiles[label] = dict.fromkeys(turns[pos].anchors, decay**back)
        else:  # an older turn adds the anchors the topic's later turns lack
            strength = decay**back
            for anchor in turns[pos].anchors:
                if anchor not in profile:
                    profile[anchor] = strength
    return profiles


ProfilesAt = Callable[[int], "dict[int, dict[str, float]]"]
"""``end -> topic_profiles(labels, turns, end, ...)`` with the parameters' lookback, window and
decay: a caller that keeps the profiles it computed (:meth:`TurnHistory.profiles_before`)
passes this, so the profiles the query gate reads after an append are not computed again
when the next turn is segmented.  The result is shared: read it, never change it."""


def best_other_topic(
    profiles: Mapping[int, Mapping[str, float]], active: int | None, weights: Mapping[str, float]
) -> tuple[int | None, float] | None:
    """The topic other than ``active`` whose profile holds the most of the query's
    weight, and that share; ``None`` when there is no other topic (or no weight).
    Exact anchors are left out, as in :func:`gate.gate_features`."""
    others = [label for label in profiles if label != active]
    if not others:
        return None
    usable = {a: w for a, w in weights.items() if anchor_kind(a) != AnchorKind.EXACT}
    total = sum(usable.values())
    if total <= 0:
        return None
    label, found = max(
        ((lbl, sum([w * profiles[lbl].get(a, 0.0) for a, w in usable.items()])) for lbl in others),
        key=lambda item: (item[1], item[0]),
    )
    return label, found / total


def affinity(weights: Mapping[str, float], profile: Mapping[str, float], total: float) -> float:
    """Share of a text's anchor weight (``weights``, summing to ``total``) found in a topic
    ``profile``, each anchor counted at its strength there; 0 for a text without weight."""
    return sum([w * profile.get(a, 0.0) for a, w in weights.items()]) / total if total > 0 else 0.0


def previous_topic(labels: Sequence[int], end: int) -> int | None:
    """The topic of the latest turn before ``end`` whose topic is not the active one
    (the topic of turn ``end - 1``); None when there is none."""
    if end <= 0:
        return None
    active = labels[end - 1]
    return next((labels[pos] for pos in range(end - 2, -1, -1) if labels[pos] != active), None)


class _TurnGate(NamedTuple):
    """The gate's view of one turn during segmentation."""

    weights: dict[str, float]
    profiles: dict[int, dict[str, float]]
    features: GateFeatures
    decision: Decision
    returns_to: int | None
    """The topic a return goes to (None: not a return, or nowhere to go)."""
    announced: bool
    """A switch the user announced: no recent topic is offered."""


def _user_weights(
    turn: SegmentInput, whole: Mapping[str, float], df: Callable[[str], int], position: int, params: SelectionParams
) -> dict[str, float]:
    """``anchor_weights(turn.user, df, position, params)``, reading the weights of the turn's
    anchors (``whole``, the same formula at the same position) instead of computing them again."""
    missing = [a for a in turn.user if a not in whole]
    if not missing:  # (no stopword among them either: the turn's weights hold none)
        return {a: whole[a] for a in turn.user}
    computed = anchor_weights(missing, df, position, params)
    extra = params.stopword_anchors
    return {a: whole[a] if a in whole else computed[a] for a in dict.fromkeys(turn.user) if a not in extra}


def _gate_turn(
    labels: Sequence[int], turns: Sequence[SegmentInput], position: int, df: Callable[[str], int],
    params: SelectionParams, whole: Mapping[str, float], profiles_at: ProfilesAt | None = None,
) -> _TurnGate:
    turn = turns[position]
    weights = _user_weights(turn, whole, df, position, params)
    profiles = (profiles_at(position) if profiles_at is not None else
                topic_profiles(labels, turns, position, params.topic_lookback, params.topic_window, params.topic_decay))
    active = labels[position - 1]
    earlier = best_other_topic(profiles, active, weights)
    before = turns[position - 1]  # how the answer just before ends, as the query-time gate reads it
    features = gate_features(weights, df, profiles.get(active, {}), turn.cues, earlier, asks=before.asks,
                             closes=before.closes, established=len(profiles) == 1 and position >= 2,
                             history_turns=position, switch_model=params.switch_model)
    decision = decide(features, params)
    target = None
    if decision == "return":
        target = features.earlier_segment if features.earlier_overlap > 0 else previous_topic(labels, position)
    return _TurnGate(weights, profiles, features, decision, target, decision == "switch" and bool(turn.cues.switch))


def next_label(
    labels: Sequence[int],
    turns: Sequence[SegmentInput],
    position: int,
    df: Callable[[str], int],
    params: SelectionParams,
    profiles_at: ProfilesAt | None = None,
) -> tuple[int, float]:
    """Topic label of the turn at ``position``, given the labels before it, and the new
    content its user message brought (the gate's ``new_weight``).

    A message that only acknowledges an answer that asks nothing ("ok thanks";
    :attr:`SelectionParams.acknowledgement_keeps_last`) continues the topic of the turn
    before it and brings nothing new, as the query-time gate reads it.
    A return (by cue or by words) takes the label of the topic it returns to: the
    recent topic its words match, else the previous topic.  Otherwise the whole turn,
    its answer included, is measured against each recent topic (its *affinity*; the
    user's own words count twice: they name the topic, the answer confirms it, and
    answers may share boilerplate such as an agent's "Thought: ... Answer:"): a turn
    whose words a recent topic holds (at least ``topic_affinity`` of their weight)
    joins the topic that holds the most, the active one winning ties within
    ``affinity_margin`` -- unless its user message announces a switch.  An answered
    exchange that no recent topic holds opens a new topic, unless its user message
    points back ("it", "这个").  Otherwise the gate decides on the user message:
    continue keeps the label of the turn before, and a switch opens a new topic
    labelled ``position`` itself.

    ``df`` must count documents among the turns before ``position`` only; ``profiles_at``,
    when given, gives the topic profiles before a position (:data:`ProfilesAt`).
    """
    if position == 0:
        return 0, 0.0
    turn = turns[position]
    if takes_note(turn.acknowledges, turns[position - 1].asks, params):
        return labels[position - 1], 0.0  # as the query gate reads it
    every, exact = _weights_and_exact(turn.anchors, df, position, params)  # the user's words' weights among them
    gated = _gate_turn(labels, turns, position, df, params, every, profiles_at)
    features, active = gated.features, labels[position - 1]
    if gated.returns_to is not None:
        return gated.returns_to, features.new_weight
    if not gated.announced:
        whole = dict(every)
        for anchor in exact:  # (deleting keeps the others' order)
            del whole[anchor]
        for anchor in voice_anchors(turn, turns[position - 1]).difference(gated.weights):
            whole.pop(anchor, None)  # the assistant's repeated boilerplate says nothing of the topic
        for anchor in whole.keys() & gated.weights.keys():  # the user's own words count twice
            whole[anchor] += gated.weights[anchor]
        total = sum(whole.values())
        scores = {label: affinity(whole, profile, total) for label, profile in gated.profiles.items()}
        scores[active] = scores.get(active, 0.0) + params.affinity_margin
        label, score = max(scores.items(), key=lambda item: (item[1], item[0] == active))
        if score >= params.topic_affinity + (params.affinity_margin if label == active else 0.0):
            return label, features.new_weight
        if turn.answered and features.query_weight > 0 and not turn.cues.points_back:
            return position, features.new_weight  # a whole exchange no recent topic holds
    if gated.decision == "continue":
        return active, features.new_weight
    return position, features.new_weight


def segment_all(turns: Sequence[SegmentInput], params: SelectionParams) -> tuple[list[int], list[float]]:
    """Label a whole turn list from scratch (the reference the incremental path must
    match): ``(labels, novelty)`` per position."""
    labels: list[int] = []
    novelty: list[float] = []
    seen: Counter[str] = Counter()
    for position, turn in enumerate(turns):
        label, new_weight = next_label(labels, turns, position, seen.__getitem__, params)
        labels.append(label)
        novelty.append(new_weight)
        seen.update(turn.anchors)
    return labels, novelty


def gate_query(
    labels: Sequence[int],
    turns: Sequence[SegmentInput],
    df: Callable[[str], int],
    weights: Mapping[str, float],
    topic_weight: Mapping[int, float],
    cues: Cues,
    params: SelectionParams,
    semantic: Mapping[int, float] | None = None,
    replying: bool = False,
    closing: bool = False,
    asks: bool = False,
    preference: Callable[[float], tuple[int, float, tuple[tuple[str, float], ...]] | None] | None = None,
    profiles_at: ProfilesAt | None = None,
) -> tuple[Decision, GateFeatures, int | None]:
    """The gate at query time: ``(decision, features, chosen topic)``.

    ``topic_weight`` is, per topic label, the query weight its turns hold
    (:func:`selector.score_candidates`).  The active topic is the last turn's, measured
    by its profile; the other topics by their profiles (recent topics) and by the query
    weight their turns hold (any topic).  Then :func:`gate.refer` names the topic the
    query refers to.  ``semantic`` (with an embedder) is, per recent topic, the query's
    calibrated similarity to it (:func:`semantic.topic_continuity`), which informs the
    decision through :func:`gate.semantic_decide`; ``replying`` (with an embedder) says the
    latest answer ended with a genuine question to the user, and a reply to it continues
    the active topic (:func:`gate.answers_assistant`) unless its words or meaning clearly
    switch.  ``asks`` and ``closing`` say the latest answer ended with a genuine or a
    courtesy question ("Anything else?"), inputs of the fitted switch score.
    ``preference`` (with an embedder) gives, for the words' switch score (one of its inputs),
    the recent topic the query's meaning prefers, the fitted log-odds that the query is
    about it and each input's part (:func:`semantic.topic_preference`), or ``None`` where
    the meaning prefers none; it is called only for a query with content and no switch or
    return cue.  At 0 or more the query goes there -- continues it, or returns to it.
    ``profiles_at`` gives the topic profiles before a position (:data:`ProfilesAt`).
    """
    p = params
    if not labels:
        return "switch", gate_features(weights, df, {}, cues, None), None
    active = labels[-1]
    profiles = (profiles_at(len(labels)) if profiles_at is not None else
                topic_profiles(labels, turns, len(labels), p.topic_lookback, p.topic_window, p.topic_decay))
    total = sum(weights.values()) or 1.0
    shares = {label: w / total for label, w in topic_weight.items()}
    others = {label: share for label, share in shares.items() if label != active}
    recent = best_other_topic(profiles, active, weights)
    if recent is not None and recent[0] is not None:
        others[recent[0]] = max(others.get(recent[0], 0.0), recent[1])
    earlier = max(others.items(), key=lambda item: (item[1], item[0]), default=None)
    features = gate_features(weights, df, profiles.get(active, {}), cues, earlier, asks=asks, closes=closing,
                             established=len(profiles) == 1 and len(labels) >= 2, history_turns=len(labels),
                             switch_model=p.switch_model)
    decision = decide(features, p)
    if semantic and active in semantic:
        other = max(((lbl, z) for lbl, z in semantic.items() if lbl != active), key=lambda i: (i[1], i[0]),
                    default=(None, None))
        features = replace(features, semantic_active=semantic[active], semantic_earlier=other[1],
                           semantic_segment=other[0])
    if replying:
        features = replace(features, replying=True)
        if answers_assistant(features, p):  # measured with the meaning too: a clear switch still wins
            return "continue", features, active
    if preference is not None and p.semantic_gate and features.query_weight > 0 and not (cues.switch or cues.returning):
        preferred = preference(features.switch_score or 0.0)  # the words' verdict and shares are inputs too
        if preferred is not None:
            label, score, parts = preferred
            features = replace(features, semantic_topic=label, semantic_margin=score, semantic_contributions=parts)
            if score >= 0:
                return ("continue" if label == active else "return"), features, label
    if features.semantic_active is not None:
        decision, semantic_topic = semantic_decide(decision, features, p)
        lexical = max(others.items(), key=lambda item: item[1], default=(None, 0.0))
        if semantic_topic is not None and (lexical[0] is None or shares.get(lexical[0], 0.0) < p.topic_match_share):
            return "return", features, semantic_topic
    decision, topic = refer(decision, features, shares, active, p, previous_topic(labels, len(labels)))
    if decision == "return" and semantic and p.semantic_gate and topic is not None and topic != active:
        # a return on a few shared words (no cue) to a topic the query's meaning does not
        # match: the topic the meaning clearly matches wins (the active one: continue)
        weak_words = shares.get(topic, 0.0) < p.off_topic_share and not (cues.returning or cues.switch)
        label, z = max(semantic.items(), key=lambda item: (item[1], item[0] == active))
        floor = p.semantic_continue_z if label == active else p.semantic_floor
        if weak_words and label != topic and z >= max(floor, semantic.get(topic, float("-inf")) + p.semantic_return_margin):
            return ("continue" if label == active else "return"), features, label
    return decision, features, topic
