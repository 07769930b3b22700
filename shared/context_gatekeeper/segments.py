"""Topic segments: a pure function of the turn list, maintained incrementally.

Each turn's user message is gated against the segment before it, using only the
statistics of the turns before it.  So the segments of a list never depend on
what comes later: an append extends them, and a replace, insert or remove at
position ``p`` recomputes them from ``p`` onward, in time proportional to that
suffix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .cues import Cues
from .anchors import AnchorKind, anchor_kind
from .gate import anchor_weights, decide, gate_features, is_weak_switch
from .params import SelectionParams

__all__ = ["SegmentInput", "topic_window", "next_label", "segment_all"]


@dataclass(frozen=True)
class SegmentInput:
    """What segmentation needs of one turn.

    Attributes:
        user: distinct anchors of the user message, query mode (what is gated).
        cues: cues found in the user message.
        anchors: every distinct anchor of the turn (what later turns are gated against).
    """

    user: tuple[str, ...]
    cues: Cues
    anchors: frozenset[str]


def topic_window(turns: Sequence[SegmentInput], end: int, size: int, decay: float) -> dict[str, float]:
    """The active topic: anchors of the last ``size`` turns before position ``end``,
    each with the strength of its most recent turn (1 for the last turn, then
    ``decay``, ``decay ** 2``, ...).

    The window may reach back past the start of the last segment: a topic is not
    established by one turn, and a one-turn digression should not hide what came
    just before it.
    """
    topic: dict[str, float] = {}
    strength = 1.0
    for pos in range(end - 1, max(0, end - size) - 1, -1):
        for anchor in turns[pos].anchors:
            if anchor not in topic:
                topic[anchor] = strength
        strength *= decay
    return topic


def _earlier_in_window(
    labels: Sequence[int], turns: Sequence[SegmentInput], end: int, weights: dict[str, float], size: int
) -> tuple[int | None, float] | None:
    """The earlier segment within the topic window that the message matches best, and
    the share of its weight found there; ``None`` when the window holds only the active
    segment (the gate then estimates from what was seen before the window)."""
    active = labels[end - 1]
    anchors_by_label: dict[int, set[str]] = {}
    for pos in range(max(0, end - size), end):
        if labels[pos] != active:
            anchors_by_label.setdefault(labels[pos], set()).update(turns[pos].anchors)
    total = sum(w for a, w in weights.items() if anchor_kind(a) != AnchorKind.EXACT)
    if not anchors_by_label or total <= 0:
        return None
    label, found = max(
        ((lbl, sum(w for a, w in weights.items() if a in held and anchor_kind(a) != AnchorKind.EXACT))
         for lbl, held in anchors_by_label.items()),
        key=lambda item: (item[1], item[0]),
    )
    return label, found / total


def next_label(
    labels: Sequence[int],
    turns: Sequence[SegmentInput],
    position: int,
    df: Callable[[str], int],
    params: SelectionParams,
) -> tuple[int, float]:
    """Segment number of the turn at ``position``, given the labels before it, and
    the new content its user message brought (the gate's ``new_weight``).

    ``df`` must count documents among the turns before ``position`` only.
    """
    if position == 0:
        return 0, 0.0
    turn = turns[position]
    weights = anchor_weights(turn.user, df, position, params)
    topic = topic_window(turns, position, params.topic_window, params.topic_decay)
    previous = labels[position - 1]
    earlier = _earlier_in_window(labels, turns, position, weights, params.topic_window)
    features = gate_features(weights, df, topic, turn.cues, earlier)
    decision = decide(features, params)
    same = decision == "continue" or is_weak_switch(decision, features, params)
    return (previous if same else previous + 1), features.new_weight


def segment_all(turns: Sequence[SegmentInput], params: SelectionParams) -> tuple[list[int], list[float]]:
    """Segment a whole turn list from scratch (the reference the incremental path must
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
