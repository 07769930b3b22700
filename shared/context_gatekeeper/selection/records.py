"""Record types that selection returns: what was kept, and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .gate import Decision, GateFeatures

__all__ = ["Turn", "Evidence", "TurnScore", "Selection"]


@dataclass(frozen=True)
class Turn:
    """One user message and everything that answers it.

    Attributes:
        id: stable turn id (1, 2, 3, ... in order of creation; never reused).
        user: the user's text ("" only for an assistant message that opens the chat).
        assistant: the assistant's answer text ("" when the answer has no text).
        tool_texts: texts of tool messages that belong to the turn, in order.
    """

    id: int
    user: str
    assistant: str = ""
    tool_texts: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The report's shape: ``{"user", "assistant", "turn_id"}``."""
        return {"user": self.user, "assistant": self.assistant, "turn_id": self.id}


@dataclass(frozen=True)
class Evidence:
    """Why a turn belongs in the context.  Every kept turn has at least one field set
    (``bool(evidence)`` is true); a dropped turn's record shows what evidence it had.

    A kept turn's evidence is the union of every step that would keep it (:meth:`merged`),
    not only of the step that kept it first (:attr:`TurnScore.reason`): a turn minimum
    coverage kept shows ``fill=True`` when it is also a strong match the fill step would
    keep, and ``reference=True`` when it is also one of the latest turns a follow-up
    leans on.  Each flag below says what that step found; ``reason`` says which step
    came first.

    Attributes:
        covered: the query's distinctive content anchors the turn holds (never a cue
            word, a stopword or a lone CJK character).
        topic: the label of the topic the query continues or returns to, when the turn
            was kept as a member of it (``None`` otherwise).
        reference: one of the turns that resolve a reference or an ellipsis in the
            query ("Why?", "它呢？", "is it thread-safe?"): the latest turns of the active
            topic, the turn that opened it and its newest angle.
        pinned: pinned content (``ContextGatekeeper.pin``).
        fill: the fill step after coverage (:func:`selector.keep_fill`) keeps it: a strong
            match (at least ``SelectionParams.fill_ratio`` of the best score, with enough
            distinctive words), or with an embedder one similar at or above
            ``semantic_floor``; with ``reason == "fill"``, one that minimum coverage called
            redundant.  The default setting fills strong matches only (``fill_ratio`` 0.3);
            the ``"recall"`` preset also weaker ones.
        semantic: its meaning matches the query (similarity at or above the calibrated
            floor of ``SelectionParams.semantic_floor``; only with an embedder).
    """

    covered: tuple[str, ...] = ()
    topic: int | None = None
    reference: bool = False
    pinned: bool = False
    fill: bool = False
    semantic: bool = False

    def __bool__(self) -> bool:
        return (
            bool(self.covered) or self.topic is not None or self.reference or self.pinned or self.fill
            or self.semantic
        )

    def merged(self, other: "Evidence") -> "Evidence":
        """Both records' evidence in one."""
        return Evidence(
            covered=tuple(dict.fromkeys(self.covered + other.covered)),
            topic=self.topic if self.topic is not None else other.topic,
            reference=self.reference or other.reference,
            pinned=self.pinned or other.pinned,
            fill=self.fill or other.fill,
            semantic=self.semantic or other.semantic,
        )


@dataclass(frozen=True)
class TurnScore:
    """Why one earlier turn was kept or dropped.

    The score parts are already multiplied by their weights, so
    ``total == user + assistant + exact + recency + semantic``.

    Attributes:
        turn_id: the turn.
        user: lexical match against the user text.
        assistant: lexical match against the assistant and tool text.
        exact: exact hits (identifiers, versions, code spans, quoted phrases).
        recency: the recency prior.
        semantic: the semantic part (0 without an embedder or below the floor).
        total: the candidate score.
        covered: query anchors this turn holds.
        cost: tokens the turn costs.
        kept: whether the turn is in the selection.
        reason: why, in words: kept as "pinned", "coverage", "topic", "follow-up",
            "neighbour", "fill" or "semantic"; dropped as "off-topic" (another topic, too weak
            a match), "weak match" (only lone CJK characters in common), "no new
            coverage", "over budget", "below top-M", "explicit switch" or "meaning far off"
            (kept on words alone, let go for its meaning: ``semantic_drop``).
        evidence: the structured reason (see :class:`Evidence`); non-empty on every
            kept turn.
        topic: the turn's topic label.
        similarity: cosine similarity of the turn to the query (``None``: no embedder,
            or the turn is not embedded yet).
        similarity_z: that similarity in standard deviations over the history's
            similarities to the query (``None`` until ``semantic_min_turns`` are embedded).
        semantic_decisive: the turn is kept on its meaning: its evidence is semantic and
            it shares no distinctive word with the query.
    """

    turn_id: int
    user: float
    assistant: float
    exact: float
    recency: float
    total: float
    covered: tuple[str, ...]
    cost: int
    kept: bool
    reason: str
    evidence: Evidence = Evidence()
    topic: int = 0
    semantic: float = 0.0
    similarity: float | None = None
    similarity_z: float | None = None
    semantic_decisive: bool = False


@dataclass(frozen=True)
class Selection:
    """The result of :meth:`ContextGatekeeper.explain`.

    Attributes:
        query: the query selected for.
        turn_ids: the kept earlier turns (pinned included), in position order.
        decision: the gate's answer: "continue", "switch" or "return".
        weak_switch: always ``False``: the fitted switch score replaced weak switches (kept
            so code reading it keeps working). Formerly: a "switch" with no switch cue and little new content: the query
            stays in the active segment and keeps its recent context (a follow-up
            the words alone cannot tell from a new topic).
        gate: the features the gate decided on.
        active_segment: ids of the turns of the active topic (every run of it: a topic
            recurs in an interleaved chat).
        matched_segment: ids of the turns of the earlier topic a "return" goes back to
            (else empty).
        scores: one record per turn that matched the query or was kept, best first.
        coverage: share of the query's coverable anchor weight that the kept turns hold.
        tokens_kept: tokens of the pinned content plus the kept turns.
        tokens_total: tokens of the pinned content plus every earlier turn.
        over_budget: pinned content alone exceeded the budget (``on_overflow="keep_pinned"``).
        system_prompt: the system prompt that is always kept: one text, one text per
            message (a tuple), or None.
        summary: the summary that is always kept, as ``system_prompt`` (or None).
        pinned_turn_ids: turns kept because they are pinned.
        topic: the label of the topic the query refers to (see
            :meth:`ContextGatekeeper.topics`): the active one on a continue, the one
            returned to on a return, ``None`` on a switch.
        semantic_fallback: an embedder is set but failed or timed out for this call, or
            gave the query a vector of another dimension than the turns' (warned once),
            so selection was lexical (turns not yet embedded are always scored lexically).
    """

    query: str
    turn_ids: tuple[int, ...]
    decision: Decision
    weak_switch: bool
    gate: GateFeatures
    active_segment: tuple[int, ...]
    matched_segment: tuple[int, ...]
    scores: tuple[TurnScore, ...]
    coverage: float
    tokens_kept: int
    tokens_total: int
    over_budget: bool
    system_prompt: str | tuple[str, ...] | None
    summary: str | tuple[str, ...] | None
    pinned_turn_ids: tuple[int, ...]
    topic: int | None = None
    semantic_fallback: bool = False

    def as_prompt(self, turns: Mapping[int, Turn]) -> str:
        """Pinned content, the kept turns (looked up in ``turns`` by id) and the query as
        one plain-text prompt."""
        parts = [text for text in _texts(self.system_prompt) if text.strip()]
        summary = "\n\n".join(text for text in _texts(self.summary) if text.strip())
        if summary:
            parts.append("Summary of the earlier conversation:\n" + summary)
        for turn_id in self.turn_ids:
            turn = turns[turn_id]
            lines = [f"User: {turn.user}"] + [f"Tool: {t}" for t in turn.tool_texts]
            if turn.assistant:
                lines.append(f"Assistant: {turn.assistant}")
            parts.append("\n".join(lines))
        parts.append(f"User: {self.query}")
        return "\n\n".join(parts)

    @property
    def tokens_saved(self) -> int:
        """Tokens of earlier turns left out."""
        return self.tokens_total - self.tokens_kept


def _texts(pinned: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """The message texts of a system prompt or summary (one text, several, or none)."""
    return () if pinned is None else (pinned,) if isinstance(pinned, str) else pinned
