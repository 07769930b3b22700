"""ContextGatekeeper: keep only the earlier turns the current query needs.

The pipeline for one query (DESIGN.md §4):

1. anchors of the query, weighted by IDF over the turns (:mod:`anchors`, :mod:`gate`);
2. the topic gate: continue the active segment, switch, or return to an earlier one;
3. BM25 candidates over the postings of the query's anchors, with a recency prior
   and a bonus for the segment the gate chose (:mod:`selector`);
4. greedy minimum coverage of the query's anchors under the token budget, then the
   recent turns of the active topic for elliptical follow-ups.

Turns are indexed incrementally and segmented by a pure function of the turn list
(:mod:`segments`), so ``add_turn`` costs time proportional to the turn, and
``select`` touches only the postings of the query's anchors.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from typing import Any, Literal

from .anchors import AnchorKind, anchor_kind, extract, normalise
from .cues import find_cues
from .errors import BudgetError, InvalidInputError, UnknownTurnError
from .gate import anchor_weights, decide, gate_features, is_weak_switch
from .index import AnchorIndex
from .params import SelectionParams
from .segments import SegmentInput, next_label, topic_window
from .selection import Selection, Turn, TurnScore
from .selector import Candidate, greedy_cover, is_weak_evidence, score_candidates
from .tokens import TokenCounterLike, resolve_token_counter
from .validation import require_budget, require_text

__all__ = ["ContextGatekeeper"]

logger = logging.getLogger(__name__)

OnOverflow = Literal["raise", "keep_pinned"]
_PARAM_NAMES = frozenset(f.name for f in fields(SelectionParams))


class _ByPosition(Sequence[SegmentInput]):
    """The segmentation inputs in position order, without copying them."""

    def __init__(self, order: list[int], inputs: dict[int, SegmentInput]) -> None:
        self._order, self._inputs = order, inputs

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, position: int) -> SegmentInput:  # type: ignore[override]
        return self._inputs[self._order[position]]


class ContextGatekeeper:
    """Topic-gated context selection over a growing list of turns.

    >>> gk = ContextGatekeeper(token_budget=200, token_counter=len, message_overhead=0)
    >>> gk.add_turn("How do I size a Redis lock TTL?", "Longer than the longest job, renewed by a watchdog.")
    1
    >>> gk.add_turn("By the way, what is a Python TaskGroup?", "An asyncio scope that cancels its siblings on failure.")
    2
    >>> [t["turn_id"] for t in gk.select("Does it also cancel on KeyboardInterrupt?")]
    [2]
    >>> selection = gk.explain("How often should the watchdog renew the Redis lock?")
    >>> selection.decision, selection.turn_ids
    ('return', (1,))

    Args:
        token_budget: tokens that pinned content plus the selected earlier turns may use.
        token_counter: ``None`` (tiktoken ``cl100k_base``, offline), an encoding name,
            a ``callable(str) -> int`` or an object with ``encode()``.
        message_overhead: tokens added per message (user, assistant, tool, system) for
            the chat format's framing; 0 counts text only.
        system_prompt: text that is always kept and counts against the budget.
        on_overflow: when pinned content alone exceeds the budget, ``"raise"``
            (:class:`BudgetError`) or ``"keep_pinned"`` (return only the pinned content,
            set ``Selection.over_budget`` and log one warning).
        params: every weight and threshold (:class:`SelectionParams`); keyword
            arguments named like its fields override single values.
    """

    def __init__(
        self,
        *,
        token_budget: int = 4000,
        token_counter: TokenCounterLike = None,
        message_overhead: int = 3,
        system_prompt: str | None = None,
        on_overflow: OnOverflow = "raise",
        params: SelectionParams | None = None,
        **overrides: Any,
    ) -> None:
        unknown = set(overrides) - _PARAM_NAMES
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {sorted(unknown)}; see SelectionParams for tunables")
        if on_overflow not in ("raise", "keep_pinned"):
            raise ValueError(f"on_overflow must be 'raise' or 'keep_pinned', got {on_overflow!r}")
        if isinstance(message_overhead, bool) or not isinstance(message_overhead, int) or message_overhead < 0:
            raise ValueError(f"message_overhead must be an int >= 0, got {message_overhead!r}")
        self.token_budget = require_budget(token_budget)
        self.params = (params or SelectionParams()).with_(**overrides) if overrides else (params or SelectionParams())
        self.on_overflow: OnOverflow = on_overflow
        self.message_overhead = message_overhead
        self._count = resolve_token_counter(token_counter)
        self._lock = threading.RLock()
        self._warned_overflow = False
        self._next_id = 1
        self._turns: dict[int, Turn] = {}
        self._order: list[int] = []
        self._positions: dict[int, int] = {}
        self._costs: dict[int, int] = {}
        self._inputs: dict[int, SegmentInput] = {}
        self._labels: list[int] = []  # segment number per position
        self._novelty: list[float] = []  # new content each turn's user message brought
        self._index = AnchorIndex()
        self._pinned: set[int] = set()
        self._system_prompt: str | None = None
        self._summary: str | None = None
        self._fixed_costs = {"system_prompt": 0, "summary": 0}
        self.system_prompt = system_prompt

    # -- pinned content -----------------------------------------------------------------
    @property
    def system_prompt(self) -> str | None:
        """Always kept; counts against the budget."""
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, text: str | None) -> None:
        self._set_fixed("system_prompt", text)

    @property
    def summary(self) -> str | None:
        """A summary of earlier conversation: always kept; counts against the budget."""
        return self._summary

    @summary.setter
    def summary(self, text: str | None) -> None:
        self._set_fixed("summary", text)

    def _set_fixed(self, name: str, text: str | None) -> None:
        if text is not None:
            text = require_text(text, name)
        with self._lock:
            setattr(self, "_" + name, text)
            self._fixed_costs[name] = 0 if text is None else self._count(text) + self.message_overhead

    def pin(self, turn_id: int) -> None:
        """Always keep this turn (it counts against the budget)."""
        with self._lock:
            self._require(turn_id)
            self._pinned.add(turn_id)

    def unpin(self, turn_id: int) -> None:
        """Let this turn be selected like any other again."""
        with self._lock:
            self._require(turn_id)
            self._pinned.discard(turn_id)

    @property
    def pinned(self) -> tuple[int, ...]:
        """Pinned turn ids in position order."""
        with self._lock:
            return tuple(t for t in self._order if t in self._pinned)

    # -- the turn list ------------------------------------------------------------------
    def add_turn(self, user: str, assistant: str = "", *, tool_texts: Iterable[str] = ()) -> int:
        """Append a turn and return its id (1, 2, 3, ...).

        Either side may be empty (an answer with no text; an assistant greeting that
        opens the chat), but not both.
        """
        turn = self._new_turn(user, assistant, tool_texts)
        with self._lock:
            turn_id = self._claim_id(turn)
            self._order.append(turn_id)
            self._positions[turn_id] = len(self._order) - 1
            self._resegment_from(len(self._order) - 1)
            return turn_id

    def insert_turn(
        self, after_id: int | None, user: str, assistant: str = "", *, tool_texts: Iterable[str] = ()
    ) -> int:
        """Insert a turn after ``after_id`` (``None``: at the start); it gets a new id."""
        turn = self._new_turn(user, assistant, tool_texts)
        with self._lock:
            position = 0 if after_id is None else self._require(after_id) + 1
            turn_id = self._claim_id(turn)
            self._order.insert(position, turn_id)
            self._renumber_from(position)
            self._resegment_from(position)
            return turn_id

    def replace_turn(
        self,
        turn_id: int,
        user: str | None = None,
        assistant: str | None = None,
        *,
        tool_texts: Iterable[str] | None = None,
    ) -> None:
        """Replace a turn's texts, keeping its id and position (``None`` keeps a part)."""
        with self._lock:
            position = self._require(turn_id)
            old = self._turns[turn_id]
            turn = self._new_turn(
                old.user if user is None else user,
                old.assistant if assistant is None else assistant,
                old.tool_texts if tool_texts is None else tool_texts,
                turn_id,
            )
            self._index.remove(turn_id)
            self._store(turn)
            self._resegment_from(position)

    def remove_turn(self, turn_id: int) -> Turn:
        """Remove a turn; other ids are never renumbered, and this one is never reused."""
        with self._lock:
            position = self._require(turn_id)
            turn = self._turns.pop(turn_id)
            del self._order[position], self._positions[turn_id], self._costs[turn_id], self._inputs[turn_id]
            self._index.remove(turn_id)
            self._pinned.discard(turn_id)
            self._renumber_from(position)
            self._resegment_from(position)
            return turn

    def clear(self) -> None:
        """Remove every turn (ids are still never reused); pinned text stays."""
        with self._lock:
            for turn_id in list(self._order):
                self.remove_turn(turn_id)

    def get_turn(self, turn_id: int) -> Turn:
        """The turn with this id (:class:`UnknownTurnError` if there is none)."""
        with self._lock:
            self._require(turn_id)
            return self._turns[turn_id]

    @property
    def turns(self) -> tuple[Turn, ...]:
        """Every turn, in position order."""
        with self._lock:
            return tuple(self._turns[t] for t in self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[Turn]:
        return iter(self.turns)

    def segments(self) -> list[tuple[int, ...]]:
        """Topic segments as tuples of turn ids, oldest first."""
        with self._lock:
            out: list[list[int]] = []
            for position, turn_id in enumerate(self._order):
                if position == 0 or self._labels[position] != self._labels[position - 1]:
                    out.append([])
                out[-1].append(turn_id)
            return [tuple(s) for s in out]

    def turn_cost(self, turn_id: int) -> int:
        """Tokens this turn costs against the budget."""
        with self._lock:
            self._require(turn_id)
            return self._costs[turn_id]

    # -- selection ----------------------------------------------------------------------
    def select(self, query: str) -> list[dict[str, object]]:
        """The kept earlier turns as ``[{"user", "assistant", "turn_id"}, ...]`` in position order."""
        selection = self.explain(query)
        with self._lock:
            return [self._turns[t].as_dict() for t in selection.turn_ids if t in self._turns]

    def build_prompt(self, query: str) -> str:
        """Pinned content, the kept turns and the query as one plain-text prompt."""
        selection = self.explain(query)
        with self._lock:
            parts = [] if self._system_prompt is None else [self._system_prompt]
            if self._summary is not None:
                parts.append("Summary of the earlier conversation:\n" + self._summary)
            for turn_id in selection.turn_ids:
                turn = self._turns[turn_id]
                lines = [f"User: {turn.user}"] + [f"Tool: {t}" for t in turn.tool_texts]
                if turn.assistant:
                    lines.append(f"Assistant: {turn.assistant}")
                parts.append("\n".join(lines))
        parts.append(f"User: {require_text(query, 'query')}")
        return "\n\n".join(parts)

    def explain(self, query: str) -> Selection:
        """Select for ``query`` and say why; has no side effects."""
        query = require_text(query, "query")
        anchors, cues = extract(query, query=True), find_cues(normalise(query))
        with self._lock:
            return self._explain(query, anchors.counts, cues)

    def _explain(self, query: str, query_anchors: Counter[str], cues: Any) -> Selection:
        p, index, labels = self.params, self._index, self._labels
        weights = anchor_weights(query_anchors, index.df, len(self._order), p)
        candidates, segment_weight = score_candidates(weights, index, self._positions, labels, self._costs, p)
        total_weight = sum(weights.values())
        active = labels[-1] if labels else None
        earlier = max(
            ((label, w / total_weight) for label, w in segment_weight.items() if label != active),
            key=lambda item: (item[1], item[0]),
            default=(None, 0.0),
        )
        view = _ByPosition(self._order, self._inputs)
        topic = topic_window(view, len(labels), p.topic_window, p.topic_decay)
        features = gate_features(weights, index.df, topic, cues, earlier)
        decision = decide(features, p) if self._order else "switch"
        chosen_label = active if decision == "continue" else earlier[0] if decision == "return" else None
        for candidate in candidates.values():
            if labels[candidate.position] == chosen_label:
                candidate.segment = p.segment_weight

        fixed = sum(self._fixed_costs.values())
        pinned = [t for t in self._order if t in self._pinned]
        budget = self.token_budget - fixed - sum(self._costs[t] for t in pinned)
        reasons: dict[int, str] = dict.fromkeys(pinned, "pinned")
        pool = heapq.nlargest(
            p.top_m,
            (c for c in candidates.values() if c.turn_id not in self._pinned),
            key=lambda c: (c.total, c.position),
        )
        coverable = {a for c in candidates.values() for a in c.covered}
        coverable_weight = sum(weights[a] for a in coverable)
        over_budget = budget < 0
        if over_budget:
            self._overflow(fixed, pinned)
        else:
            already = {a for t in pinned for a in self._index.turns[t].anchors if a in coverable}
            evidence = [c for c in pool if not is_weak_evidence(c)]
            chosen, _ = greedy_cover(
                evidence, weights, p.coverage_target * coverable_weight, budget, p.cost_exponent, covered=already
            )
            for candidate in chosen:
                reasons[candidate.turn_id] = "coverage"
                budget -= candidate.cost
            budget = self._follow_up(decision, features, coverable_weight, total_weight, reasons, budget)
            budget = self._fill(pool, weights, total_weight, reasons, budget)
            self._neighbours(pool, candidates, reasons, budget)

        kept = tuple(t for t in self._order if t in reasons)
        kept_anchors = {a for t in kept for a in self._index.turns[t].anchors}
        covered_weight = sum(weights[a] for a in coverable if a in kept_anchors)
        return Selection(
            query=query,
            turn_ids=kept,
            decision=decision,
            weak_switch=is_weak_switch(decision, features, p),
            gate=features,
            active_segment=self._segment_ids(active),
            matched_segment=self._segment_ids(earlier[0]) if decision == "return" else (),
            scores=self._score_records(pool, candidates, reasons, budget),
            coverage=covered_weight / coverable_weight if coverable_weight else 1.0,
            tokens_kept=fixed + sum(self._costs[t] for t in kept),
            tokens_total=fixed + sum(self._costs.values()),
            over_budget=over_budget,
            system_prompt=self._system_prompt,
            summary=self._summary,
            pinned_turn_ids=tuple(pinned),
        )

    def _follow_up(
        self, decision: str, features: Any, coverable: float, total: float, reasons: dict[int, str], budget: int
    ) -> int:
        """On an elliptical continue, keep the active topic's recent turns and its opening turn.

        An elliptical query ("how much does it cost?") leans on the turn before it
        and on the turn that introduced the topic; neither need share its words.
        """
        found_share = coverable / total if total else 0.0
        p = self.params
        if not self._order or not (decision == "continue" or is_weak_switch(decision, features, p)):
            return budget
        if not (features.cues.reference or found_share < p.elliptical_threshold):
            return budget
        active = self._labels[-1]
        last = len(self._order) - 1
        start = last
        while start > 0 and self._labels[start - 1] == active:
            start -= 1
        wanted = list(range(last, max(start, last - p.follow_up_turns + 1) - 1, -1))
        if p.keep_topic_opener:
            wanted.append(start)
            if p.keep_newest_angle:
                newest = max(range(start + 1, last + 1), key=lambda pos: (self._novelty[pos], pos), default=start)
                if self._novelty[newest] >= p.switch_min_new_weight:
                    wanted.append(newest)
        for position in wanted:
            turn_id = self._order[position]
            if turn_id not in reasons and self._costs[turn_id] <= budget:
                reasons[turn_id] = "follow-up"
                budget -= self._costs[turn_id]
        return budget

    def _fill(
        self, pool: list[Candidate], weights: dict[str, float], total: float, reasons: dict[int, str], budget: int
    ) -> int:
        """Keep further matching candidates, best first, while they fit.

        Only candidates scoring at least ``fill_ratio`` of the best score, holding at
        least ``fill_min_share`` of the query's weight, and matching more than single
        CJK characters (too ambiguous to be evidence on their own).
        """
        p = self.params
        if not pool or p.fill_ratio >= 1.0:
            return budget
        floor = p.fill_ratio * pool[0].total
        for candidate in pool:
            if candidate.total < floor:
                break
            if candidate.turn_id in reasons or candidate.cost > budget or is_weak_evidence(candidate):
                continue
            if sum(weights[a] for a in candidate.covered) < p.fill_min_share * total:
                continue
            reasons[candidate.turn_id] = "fill"
            budget -= candidate.cost
        return budget

    def _neighbours(
        self, pool: list[Candidate], candidates: dict[int, Candidate], reasons: dict[int, str], budget: int
    ) -> int:
        """With budget left, keep the turn right after each kept match (and the one
        before, with ``neighbour_fill=2``) when it is in the same topic segment and
        matches the query too, best match first: an answer often lands in the exchange
        next to the one that matched, even when it shares little of the query."""
        if not self.params.neighbour_fill:
            return budget
        for candidate in pool:
            if reasons.get(candidate.turn_id) not in ("coverage", "fill"):
                continue
            for position in (candidate.position + 1, candidate.position - 1)[: self.params.neighbour_fill]:
                same_topic = 0 <= position < len(self._order) and (
                    self._labels[position] == self._labels[candidate.position]
                )
                turn_id = self._order[position] if same_topic else None
                if turn_id in candidates and not is_weak_evidence(candidates[turn_id]):
                    if turn_id not in reasons and self._costs[turn_id] <= budget:
                        reasons[turn_id] = "neighbour"
                        budget -= self._costs[turn_id]
        return budget

    def _score_records(
        self, pool: list[Candidate], candidates: dict[int, Candidate], reasons: dict[int, str], budget: int
    ) -> tuple[TurnScore, ...]:
        in_pool = {c.turn_id for c in pool}
        shown = list(pool) + [
            candidates.get(t) or Candidate(t, self._positions[t], self._costs[t])
            for t in reasons
            if t not in in_pool
        ]
        records = []
        for c in sorted(shown, key=lambda c: (-c.total, c.position)):
            reason = reasons.get(c.turn_id)
            if reason is None:
                reason = "over budget" if c.cost > budget else "no new coverage" if c.turn_id in in_pool else "below top-M"
            records.append(
                TurnScore(
                    turn_id=c.turn_id, user=c.user, assistant=c.assistant, exact=c.exact, recency=c.recency,
                    segment=c.segment, total=c.total, covered=tuple(c.covered), cost=c.cost,
                    kept=c.turn_id in reasons, reason=reason,
                )
            )
        return tuple(records)

    def _overflow(self, fixed: int, pinned: list[int]) -> None:
        detail = (
            f"pinned content needs {fixed + sum(self._costs[t] for t in pinned)} tokens "
            f"(system prompt and summary {fixed}, pinned turns {pinned}) but token_budget is {self.token_budget}"
        )
        if self.on_overflow == "raise":
            raise BudgetError(f"{detail}; raise token_budget, unpin turns, or pass on_overflow='keep_pinned'")
        if not self._warned_overflow:
            self._warned_overflow = True
            logger.warning("%s; keeping the pinned content only", detail)

    def _segment_ids(self, label: int | None) -> tuple[int, ...]:
        if label is None:
            return ()
        return tuple(t for t, lbl in zip(self._order, self._labels) if lbl == label)

    # -- internals ----------------------------------------------------------------------
    def _new_turn(self, user: Any, assistant: Any, tool_texts: Any, turn_id: int = 0) -> Turn:
        user = require_text(user, "user", allow_empty=True)
        assistant = require_text(assistant, "assistant", allow_empty=True)
        if isinstance(tool_texts, str):
            raise TypeError("tool_texts must be an iterable of strings, not a single string")
        tools = tuple(require_text(t, "tool text", allow_empty=True) for t in tool_texts)
        if not (user.strip() or assistant.strip() or any(t.strip() for t in tools)):
            raise InvalidInputError("a turn needs some text: user, assistant and tool texts are all empty")
        return Turn(turn_id, user, assistant, tools)

    def _claim_id(self, turn: Turn) -> int:
        turn_id = self._next_id
        self._next_id += 1
        self._store(Turn(turn_id, turn.user, turn.assistant, turn.tool_texts))
        return turn_id

    def _store(self, turn: Turn) -> None:
        """Record, cost and index a turn (its position is the caller's business)."""
        answer = "\n".join(t for t in (turn.assistant, *turn.tool_texts) if t)
        messages = bool(turn.user) + bool(turn.assistant) + len(turn.tool_texts)
        self._turns[turn.id] = turn
        self._costs[turn.id] = self._count(turn.user + "\n" + answer) + self.message_overhead * messages
        indexed = self._index.add(turn.id, extract(turn.user), extract(answer))
        gated = tuple(extract(turn.user, query=True).counts)
        self._inputs[turn.id] = SegmentInput(gated, find_cues(normalise(turn.user)), indexed.anchors)

    def _renumber_from(self, position: int) -> None:
        for pos in range(position, len(self._order)):
            self._positions[self._order[pos]] = pos

    def _resegment_from(self, start: int) -> None:
        """Recompute segment labels from ``start`` on, with document frequencies of each prefix."""
        order, turns = self._order, self._index.turns
        later: Counter[str] = Counter()
        for turn_id in order[start:]:
            later.update(turns[turn_id].anchors)
        full_df = self._index.df

        def prefix_df(anchor: str) -> int:
            return full_df(anchor) - later[anchor]

        del self._labels[start:], self._novelty[start:]
        view = _ByPosition(order, self._inputs)
        for position in range(start, len(order)):
            label, new_weight = next_label(self._labels, view, position, prefix_df, self.params)
            self._labels.append(label)
            self._novelty.append(new_weight)
            later.subtract(turns[order[position]].anchors)

    def _require(self, turn_id: Any) -> int:
        """The position of ``turn_id``, or :class:`UnknownTurnError`."""
        position = self._positions.get(turn_id) if isinstance(turn_id, int) and not isinstance(turn_id, bool) else None
        if position is None:
            raise UnknownTurnError(
                f"no turn with id {turn_id!r}: ids are the integers add_turn returned; "
                f"current ids are {self._order[:10]}{'...' if len(self._order) > 10 else ''}"
            )
        return position
