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
from collections.abc import Iterable, Iterator
from dataclasses import fields
from typing import Any, Literal

from .anchors import extract, normalise
from .cues import Cues, find_cues
from .errors import BudgetError, InvalidInputError
from .gate import anchor_weights, decide, gate_features, is_weak_switch
from .history import TurnHistory
from .params import SelectionParams
from .segments import topic_window
from .selection import Selection, Turn, TurnScore
from .selector import (
    Candidate,
    greedy_cover,
    is_weak_evidence,
    keep_fill,
    keep_follow_up,
    keep_neighbours,
    score_candidates,
)
from .tokens import TokenCounterLike, resolve_token_counter
from .validation import require_budget, require_text

__all__ = ["ContextGatekeeper"]

logger = logging.getLogger(__name__)

OnOverflow = Literal["raise", "keep_pinned"]
_EXCLUDED = "excluded"
_PARAM_NAMES = frozenset(f.name for f in fields(SelectionParams))


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
        self._history = TurnHistory(self._turn_cost, self.params)
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
            self._history.position(turn_id)
            self._pinned.add(turn_id)

    def unpin(self, turn_id: int) -> None:
        """Let this turn be selected like any other again."""
        with self._lock:
            self._history.position(turn_id)
            self._pinned.discard(turn_id)

    @property
    def pinned(self) -> tuple[int, ...]:
        """Pinned turn ids in position order."""
        with self._lock:
            return tuple(t for t in self._history.order if t in self._pinned)

    # -- the turn list ------------------------------------------------------------------
    def add_turn(self, user: str, assistant: str = "", *, tool_texts: Iterable[str] = ()) -> int:
        """Append a turn and return its id (1, 2, 3, ...).

        Either side may be empty (an answer with no text; an assistant greeting that
        opens the chat), but not both.
        """
        texts = _turn_texts(user, assistant, tool_texts)
        with self._lock:
            return self._history.insert(len(self._history), *texts)

    def insert_turn(
        self, after_id: int | None, user: str, assistant: str = "", *, tool_texts: Iterable[str] = ()
    ) -> int:
        """Insert a turn after ``after_id`` (``None``: at the start); it gets a new id."""
        texts = _turn_texts(user, assistant, tool_texts)
        with self._lock:
            position = 0 if after_id is None else self._history.position(after_id) + 1
            return self._history.insert(position, *texts)

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
            self._history.position(turn_id)
            old = self._history.turns[turn_id]
            texts = _turn_texts(
                old.user if user is None else user,
                old.assistant if assistant is None else assistant,
                old.tool_texts if tool_texts is None else tool_texts,
            )
            self._history.replace(turn_id, *texts)

    def remove_turn(self, turn_id: int) -> Turn:
        """Remove a turn; other ids are never renumbered, and this one is never reused."""
        with self._lock:
            turn = self._history.remove(turn_id)
            self._pinned.discard(turn_id)
            return turn

    def clear(self) -> None:
        """Remove every turn (ids are still never reused); the system prompt and summary stay."""
        with self._lock:
            self._history.clear()
            self._pinned.clear()

    def get_turn(self, turn_id: int) -> Turn:
        """The turn with this id (:class:`UnknownTurnError` if there is none)."""
        with self._lock:
            self._history.position(turn_id)
            return self._history.turns[turn_id]

    @property
    def turns(self) -> tuple[Turn, ...]:
        """Every turn, in position order."""
        with self._lock:
            return tuple(self._history.turns[t] for t in self._history.order)

    def __len__(self) -> int:
        return len(self._history)

    def __iter__(self) -> Iterator[Turn]:
        return iter(self.turns)

    def segments(self) -> list[tuple[int, ...]]:
        """Topic segments as tuples of turn ids, oldest first."""
        with self._lock:
            return self._history.segments()

    def turn_cost(self, turn_id: int) -> int:
        """Tokens this turn costs against the budget."""
        with self._lock:
            self._history.position(turn_id)
            return self._history.costs[turn_id]

    # -- selection ----------------------------------------------------------------------
    def select(
        self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()
    ) -> list[dict[str, object]]:
        """The kept earlier turns as ``[{"user", "assistant", "turn_id"}, ...]`` in position order."""
        with self._lock:
            selection = self.explain(query, token_budget=token_budget, exclude=exclude)
            return [self._history.turns[t].as_dict() for t in selection.turn_ids]

    def build_prompt(self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()) -> str:
        """Pinned content, the kept turns and the query as one plain-text prompt."""
        with self._lock:
            selection = self.explain(query, token_budget=token_budget, exclude=exclude)
            parts = [] if selection.system_prompt is None else [selection.system_prompt]
            if selection.summary is not None:
                parts.append("Summary of the earlier conversation:\n" + selection.summary)
            for turn_id in selection.turn_ids:
                turn = self._history.turns[turn_id]
                lines = [f"User: {turn.user}"] + [f"Tool: {t}" for t in turn.tool_texts]
                if turn.assistant:
                    lines.append(f"Assistant: {turn.assistant}")
                parts.append("\n".join(lines))
        parts.append(f"User: {selection.query}")
        return "\n\n".join(parts)

    def explain(self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()) -> Selection:
        """Select for ``query`` and say why; has no side effects.

        ``token_budget`` overrides the budget for this call only (an adapter that
        knows the size of the query and the open turn passes what is left); below
        the pinned content's cost, ``on_overflow`` applies.  ``exclude`` names turns
        this call must not select (an adapter sends them itself, e.g. the current turn).
        """
        query = require_text(query, "query")
        if token_budget is not None and (isinstance(token_budget, bool) or not isinstance(token_budget, int)):
            raise BudgetError(f"token_budget must be an int, got {token_budget!r}")
        budget_total = self.token_budget if token_budget is None else token_budget
        head = query[: self.params.max_query_chars]
        anchors, cues = extract(head, query=True), find_cues(normalise(head))
        with self._lock:
            return self._explain(query, anchors.counts, cues, budget_total, frozenset(exclude))

    def _explain(
        self, query: str, query_anchors: Counter[str], cues: Cues, budget_total: int, exclude: frozenset[int]
    ) -> Selection:
        p, history = self.params, self._history
        index, labels = history.index, history.labels
        # 1-2. weights, candidates, and the gate
        weights = anchor_weights(query_anchors, index.df, len(history), p)
        candidates, segment_weight = score_candidates(weights, index, history.positions, labels, history.costs, p)
        for turn_id in exclude:
            candidates.pop(turn_id, None)
        total_weight = sum(weights.values())
        active = labels[-1] if labels else None
        earlier = max(
            ((label, w / total_weight) for label, w in segment_weight.items() if label != active),
            key=lambda item: (item[1], item[0]),
            default=(None, 0.0),
        )
        topic = topic_window(history.by_position, len(labels), p.topic_window, p.topic_decay)
        features = gate_features(weights, index.df, topic, cues, earlier)
        decision = decide(features, p) if history.order else "switch"
        weak_switch = is_weak_switch(decision, features, p)
        chosen_label = active if decision == "continue" else earlier[0] if decision == "return" else None
        for candidate in candidates.values():
            if labels[candidate.position] == chosen_label:
                candidate.segment = p.segment_weight

        # 3. pinned content first, then coverage, follow-up, fill and neighbours
        fixed = sum(self._fixed_costs.values())
        pinned = [t for t in history.order if t in self._pinned and t not in exclude]
        budget = budget_total - fixed - sum(history.costs[t] for t in pinned)
        reasons: dict[int, str] = dict.fromkeys(pinned, "pinned")
        reasons.update(dict.fromkeys(exclude, _EXCLUDED))  # blocks every later step
        pool = heapq.nlargest(
            p.top_m,
            (c for c in candidates.values() if c.turn_id not in reasons),
            key=lambda c: (c.total, c.position),
        )
        coverable = {a for c in candidates.values() for a in c.covered}
        coverable_weight = sum(weights[a] for a in coverable)
        over_budget = budget < 0
        if over_budget:
            self._overflow(fixed, pinned, budget_total)
        else:
            already = {a for t in pinned for a in index.turns[t].anchors if a in coverable}
            evidence = [c for c in pool if not is_weak_evidence(c)]
            target = p.coverage_target * coverable_weight
            chosen, _ = greedy_cover(evidence, weights, target, budget, p.cost_exponent, covered=already)
            for candidate in chosen:
                reasons[candidate.turn_id] = "coverage"
                budget -= candidate.cost
            elliptical = cues.reference or coverable_weight < p.elliptical_threshold * total_weight
            if elliptical and (decision == "continue" or weak_switch):
                budget = keep_follow_up(history, p, reasons, budget)
            budget = keep_fill(pool, weights, history, p, reasons, budget)
            budget = keep_neighbours(pool, candidates, history, p, reasons, budget)

        for turn_id in exclude:
            reasons.pop(turn_id, None)
        kept = tuple(t for t in history.order if t in reasons)
        kept_anchors = {a for t in kept for a in index.turns[t].anchors}
        covered_weight = sum(weights[a] for a in coverable if a in kept_anchors)
        return Selection(
            query=query,
            turn_ids=kept,
            decision=decision,
            weak_switch=weak_switch,
            gate=features,
            active_segment=history.segment_ids(active),
            matched_segment=history.segment_ids(earlier[0]) if decision == "return" else (),
            scores=self._score_records(pool, candidates, reasons, budget),
            coverage=covered_weight / coverable_weight if coverable_weight else 1.0,
            tokens_kept=fixed + sum(history.costs[t] for t in kept),
            tokens_total=fixed + sum(history.costs.values()),
            over_budget=over_budget,
            system_prompt=self._system_prompt,
            summary=self._summary,
            pinned_turn_ids=tuple(pinned),
        )

    def _score_records(
        self, pool: list[Candidate], candidates: dict[int, Candidate], reasons: dict[int, str], budget: int
    ) -> tuple[TurnScore, ...]:
        """One record per pooled or kept turn, best first."""
        history = self._history
        in_pool = {c.turn_id for c in pool}
        shown = list(pool) + [
            candidates.get(t) or Candidate(t, history.positions[t], history.costs[t]) for t in reasons if t not in in_pool
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

    def _overflow(self, fixed: int, pinned: list[int], budget_total: int) -> None:
        detail = (
            f"pinned content needs {fixed + sum(self._history.costs[t] for t in pinned)} tokens "
            f"(system prompt and summary {fixed}, pinned turns {pinned}) but token_budget is {budget_total}"
        )
        if self.on_overflow == "raise":
            raise BudgetError(f"{detail}; raise token_budget, unpin turns, or pass on_overflow='keep_pinned'")
        if not self._warned_overflow:
            self._warned_overflow = True
            logger.warning("%s; keeping the pinned content only", detail)

    def _turn_cost(self, turn: Turn) -> int:
        """Tokens of ``user + "\\n" + answer`` plus the per-message overhead."""
        answer = "\n".join(t for t in (turn.assistant, *turn.tool_texts) if t)
        messages = bool(turn.user) + bool(turn.assistant) + len(turn.tool_texts)
        return self._count(turn.user + "\n" + answer) + self.message_overhead * messages


def _turn_texts(user: Any, assistant: Any, tool_texts: Any) -> tuple[str, str, tuple[str, ...]]:
    """Validated texts of a turn: strings, and not all of them blank."""
    user = require_text(user, "user", allow_empty=True)
    assistant = require_text(assistant, "assistant", allow_empty=True)
    if isinstance(tool_texts, str):
        raise TypeError("tool_texts must be an iterable of strings, not a single string")
    tools = tuple(require_text(t, "tool text", allow_empty=True) for t in tool_texts)
    if not (user.strip() or assistant.strip() or any(t.strip() for t in tools)):
        raise InvalidInputError("a turn needs some text: user, assistant and tool texts are all empty")
    return user, assistant, tools
