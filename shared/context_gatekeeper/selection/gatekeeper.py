"""ContextGatekeeper: keep only the earlier turns the current query needs.

The pipeline for one query (``docs/architecture.md#data-flow-of-a-select``):

1. anchors of the query, weighted by IDF over the turns (:mod:`anchors`, :mod:`gate`);
2. BM25 candidates over the postings of the query's anchors, with a recency prior
   (:mod:`selector`), fused with semantic similarity when an embedder is given
   (:mod:`semantic`); 3. the topic gate: continue, switch, or return to an earlier topic;
4. greedy minimum coverage of the query's anchors under the token budget, then the
   turns of the chosen topic, and those that resolve an elliptical follow-up.

Turns are indexed incrementally and segmented by a pure function of the turn list
(:mod:`segments`), so ``add_turn`` costs time proportional to the turn."""

from __future__ import annotations

import copy
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set as AbstractSet
from typing import Any, NoReturn, Union

from .anchors import extract
from .cues import Cues, strip_cues
from ..errors import InvalidTypeError
from .gate import acknowledges, anchor_weights, takes_note
from .history import TurnHistory, excluded_ids, require_turn_list, turn_texts as _turn_texts
from .options import GateOptions, OnOverflow, report_overflow, require_overhead
from .params import SelectionParams
from .segments import gate_query
from .semantic.fusion import (
    answer_ending, drop_unrelated, fuse, keep_semantic, preference_inputs, topic_continuity, topic_preference,
    with_switch_score,
)
from .semantic.methods import SemanticMethods
from .records import Evidence, Selection, Turn
from .selector import (
    Kept,
    keep_coverage,
    keep_fill,
    keep_follow_up,
    keep_neighbours,
    keep_topic,
    score_candidates,
    score_records,
)
from ..tokens import TokenCounterLike
from ..validation import require_budget, require_items, require_text

__all__ = ["ContextGatekeeper"]

logger = logging.getLogger(__name__)

_EXCLUDED = "excluded"


_NOT_PICKLED = (
    "a ContextGatekeeper cannot be pickled: it holds a token counter and, optionally, an embedder (often "
    "closures or clients holding keys) and a lock. Rebuild one from its turns instead: "
    "new = gk.empty_copy() (the same settings, no turns), then new.insert_turns(None, [(t.user, t.assistant, t.tool_texts) "
    "for t in gk.turns]) (ids start again at 1), and set pins, system_prompt and summary again; "
    "copy.deepcopy(gk) makes an independent copy in this process, ids included"
)


PinnedText = Union[str, Sequence[str], None]
"""A system prompt or summary as :class:`ContextGatekeeper` takes it: one message's text, one
text per message, or ``None``."""


def _pinned_text(text: Any, what: str) -> str | tuple[str, ...] | None:
    """``text`` as the gatekeeper holds it: a non-blank ``str`` as it is, a sequence of ``str``
    as a tuple (a blank item is a message with no text; an empty sequence is ``None``)."""
    if text is None or isinstance(text, str):
        return None if text is None else require_text(text, what)
    if isinstance(text, (AbstractSet, Mapping)):  # no order: the messages would move between runs
        raise InvalidTypeError(
            f"{what} must be one text or a list of texts (in the order they are sent), got {type(text).__name__}"
        )
    texts = tuple(require_items(
        text, what, str, "pass one text, a list of texts (one message each), or None",
    ))
    return texts or None


def _messages(text: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """The messages of a system prompt or summary as the gatekeeper holds it (none for ``None``)."""
    return () if text is None else (text,) if isinstance(text, str) else text


def _turn_parts(turn: Any) -> tuple[Any, Any, Any]:
    """``(user, assistant, tool_texts)`` of one item of :meth:`ContextGatekeeper.insert_turns`."""
    if isinstance(turn, tuple) and len(turn) in (2, 3):
        return (*turn, ()) if len(turn) == 2 else turn
    raise InvalidTypeError(
        f"each turn must be a (user, assistant) or (user, assistant, tool_texts) tuple, got {turn!r:.60}"
    )


class ContextGatekeeper(SemanticMethods):
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

    Settings come as keywords or as one checked :class:`GateOptions` (``options=``), not
    both; either way they are validated once, before anything is built.  The keywords
    (``None``: the default) are the fields of :class:`GateOptions`:

    Args:
        options: every setting below as one :class:`GateOptions` (``self.options``).
        token_budget: tokens that pinned content plus the selected earlier turns may use
            (an ``int >= 0``, default 4000).
        token_counter: ``None`` (tiktoken ``cl100k_base``, offline), an encoding name,
            a ``callable(str) -> int`` or an object with ``encode()``.
        message_overhead: tokens added per message (user, assistant, tool, system) for
            the chat format's framing; 0 counts text only (default 3).
        system_prompt: text that is always kept and counts against the budget: one
            message (a ``str``), or several (a sequence of ``str``, each its own message,
            priced as sent; see :attr:`system_prompt`).
        on_overflow: when pinned content alone exceeds the budget, ``"raise"``
            (:class:`BudgetError`) or ``"keep_pinned"`` (return only the pinned content,
            set ``Selection.over_budget`` and log one warning); default ``"raise"``.
        params: every weight and threshold (:class:`SelectionParams`); keyword
            arguments named like its fields override single values.
        preset: a named setting instead of ``params``: ``"default"`` (precision first)
            or ``"recall"`` (long-memory question answering; see
            :attr:`SelectionParams.PRESETS`).
        embedder: a LangChain ``Embeddings``, LlamaIndex ``BaseEmbedding`` or callable
            ``list[str] -> vectors`` for the semantic channel (numpy;
            :mod:`~context_gatekeeper.selection.semantic.channel`).
        vector_cache: ``get``/``put`` of turn vectors by ``(embedder name, text hash)``.
        embed_timeout: seconds a selection waits for the query's embedding before going lexical.
    """

    def __init__(
        self,
        *,
        options: GateOptions | None = None,
        token_budget: int | None = None,
        token_counter: TokenCounterLike = None,
        message_overhead: int | None = None,
        system_prompt: PinnedText = None,
        on_overflow: OnOverflow | None = None,
        params: SelectionParams | None = None,
        preset: str | None = None,
        embedder: Any = None,
        vector_cache: Any = None,
        embed_timeout: float | None = None,
        **overrides: Any,
    ) -> None:
        options = GateOptions.of(
            options, token_budget=token_budget, token_counter=token_counter, message_overhead=message_overhead,
            on_overflow=on_overflow, params=params, preset=preset, embedder=embedder, vector_cache=vector_cache,
            embed_timeout=embed_timeout, **overrides,
        )
        self.options = options
        """The checked settings this gatekeeper was built with (:class:`GateOptions`)."""
        self._token_budget = options.token_budget
        self.on_overflow: OnOverflow = options.overflow("raise")
        self._message_overhead = options.message_overhead
        self._count = options.count
        self._lock = threading.RLock()
        self._warned_overflow = False
        self._history = TurnHistory(_TurnCost(self), options.params)
        self._semantic = self._semantic_channel(options.resolved_embedder, options.vector_cache, options.embed_timeout)
        self._pinned: set[int] = set()
        self._system_prompt: str | tuple[str, ...] | None = None
        self._summary: str | tuple[str, ...] | None = None
        self._fixed_costs = {"system_prompt": 0, "summary": 0}
        self._set_fixed("system_prompt", system_prompt)

    @property
    def token_budget(self) -> int:
        """Tokens that pinned content plus the selected earlier turns may use (an ``int >= 0``);
        assigning one is checked as the constructor checks it (:class:`BudgetError`)."""
        return self._token_budget

    @token_budget.setter
    def token_budget(self, budget: int) -> None:
        self._token_budget = require_budget(budget)

    @property
    def message_overhead(self) -> int:
        """Tokens added per message for the chat format's framing (an ``int >= 0``).  Assigning
        one costs every turn, the system prompt and the summary again with it, as a gatekeeper
        built with it would; a refused value or a failing token counter changes nothing."""
        return self._message_overhead

    @message_overhead.setter
    def message_overhead(self, overhead: int) -> None:
        overhead = require_overhead(overhead)
        with self._lock:
            history = self._history
            costs = {turn_id: self._turn_cost(turn, overhead) for turn_id, turn in history.turns.items()}
            fixed = {name: self._fixed_cost(getattr(self, "_" + name), overhead) for name in self._fixed_costs}
            history.recost(costs)  # counted before anything changes: a counter that raises leaves the old costs
            self._fixed_costs = fixed
            self._message_overhead = overhead

    @property
    def params(self) -> SelectionParams:
        """Every weight and threshold selection uses (:class:`SelectionParams`).  Assigning new
        parameters segments the turns again with them (the topic labels depend on them), as a
        gatekeeper built with them would have; ``explain`` uses them from the next call."""
        return self._history.params

    @params.setter
    def params(self, params: SelectionParams) -> None:
        if not isinstance(params, SelectionParams):
            raise InvalidTypeError(
                f"params must be a SelectionParams, not {type(params).__name__}; "
                "build one with SelectionParams(...), SelectionParams.preset(name) or gatekeeper.params.with_(...)"
            )
        with self._lock:
            self._history.use_params(params)

    # -- pinned content -----------------------------------------------------------------
    @property
    def system_prompt(self) -> str | tuple[str, ...] | None:
        """Always kept; counts against the budget.  A ``str`` is one system message; a
        sequence of ``str`` is one message each (an adapter's leading system messages), read
        back as a tuple, each priced as the message it is sent as (its text's count plus one
        ``message_overhead``; a blank one, such as an image alone, costs its overhead).  A
        ``str`` must not be blank; an empty sequence is ``None``."""
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, text: PinnedText) -> None:
        self._set_fixed("system_prompt", text)

    @property
    def summary(self) -> str | tuple[str, ...] | None:
        """A summary of earlier conversation: always kept; counts against the budget.  One
        message or several, as :attr:`system_prompt` takes them."""
        return self._summary

    @summary.setter
    def summary(self, text: PinnedText) -> None:
        self._set_fixed("summary", text)

    def _set_fixed(self, name: str, text: PinnedText) -> None:
        pinned = _pinned_text(text, name)
        # the texts counted before anything changes (a token counter that raises leaves the old text and its
        # cost), outside the lock; each message's overhead added under it, at the overhead it holds then: one
        # assigned while the texts were counted costs only the old text again, and this one must pay it too
        texts = _messages(pinned)
        counted = sum(map(self._count, texts))
        with self._lock:
            setattr(self, "_" + name, pinned)
            self._fixed_costs[name] = counted + self._message_overhead * len(texts)

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

    def insert_turns(
        self, after_id: int | None, turns: Iterable[tuple[str, str] | tuple[str, str, Iterable[str]]]
    ) -> list[int]:
        """Insert turns, in order, after ``after_id`` (``None``: at the start) and return their
        new ids: ``(user, assistant)`` or ``(user, assistant, tool_texts)`` each.  The result is
        the one :meth:`insert_turn` gives called turn by turn, in less time (the turns after
        them are segmented once, not after each insert).  All or nothing: a turn with bad
        texts, or whose token count fails, raises before any is inserted."""
        texts = [_turn_texts(*_turn_parts(turn)) for turn in require_turn_list(turns)]
        with self._lock:
            position = 0 if after_id is None else self._history.position(after_id) + 1
            return self._history.insert_many(position, texts)

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

    def replace_turns(
        self, texts: Mapping[int, tuple[str, str] | tuple[str, str, Iterable[str]]]
    ) -> None:
        """Replace several turns' texts at once (turn id -> ``(user, assistant)`` or
        ``(user, assistant, tool_texts)``, whole texts), keeping ids and positions: the
        result :meth:`replace_turn` gives turn by turn, in less time (later turns are
        segmented once).  All or nothing: an unknown id, bad texts or a failing token count
        raise before any turn changes."""
        if not isinstance(texts, Mapping):
            raise InvalidTypeError(f"replace_turns takes a mapping of turn id -> texts, got {type(texts).__name__}")
        given = {turn_id: _turn_texts(*_turn_parts(turn)) for turn_id, turn in texts.items()}
        with self._lock:
            self._history.replace_many(given)

    def remove_turn(self, turn_id: int) -> Turn:
        """Remove a turn; other ids are never renumbered, and this one is never reused."""
        return self.remove_turns([turn_id])[0]

    def remove_turns(self, turn_ids: Iterable[int]) -> list[Turn]:
        """Remove several turns at once and return them, in the order given: the result
        :meth:`remove_turn` gives turn by turn, in less time (later turns are segmented
        once, so replacing a long history costs what indexing it costs).  All or nothing:
        an unknown or repeated id raises before any turn is removed, and so does
        ``turn_ids`` that is not an iterable of ids (:class:`InvalidTypeError`)."""
        if not isinstance(turn_ids, Iterable) or isinstance(turn_ids, (str, bytes)):
            raise InvalidTypeError(
                f"turn_ids must be an iterable of turn ids (the ints add_turn returned), got "
                f"{type(turn_ids).__name__} {turn_ids!r:.60}; pass e.g. [3, 4], or remove_turn(3) for one"
            )
        ids = list(turn_ids)
        with self._lock:
            turns = self._history.remove_many(ids)
            self._pinned.difference_update(ids)
            return turns

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
        """Segments -- contiguous runs of one topic -- as tuples of turn ids, oldest first.

        A chat alternating two topics A, B, A, B has four segments and two topics
        (see :meth:`topics`)."""
        with self._lock:
            return self._history.segments()

    def topics(self) -> dict[int, tuple[int, ...]]:
        """Topic label -> ids of its turns (every run of it), in order of appearance.

        A topic's label is the position (0-based) of the turn that opened it; labels,
        like segments, are a pure function of the turn list."""
        with self._lock:
            return self._history.topics()

    def pinned_cost(self) -> int:
        """Tokens the pinned content costs against the budget: the system prompt, the summary
        and the pinned turns (what every selection pays first)."""
        with self._lock:
            return sum(self._fixed_costs.values()) + sum(self._history.costs[t] for t in self._pinned)

    def turn_cost(self, turn_id: int) -> int:
        """Tokens this turn costs against the budget."""
        with self._lock:
            self._history.position(turn_id)
            return self._history.costs[turn_id]

    def cost_of(self, user: str, assistant: str = "", tool_texts: Iterable[str] = ()) -> int:
        """Tokens a turn of these texts would cost against the budget, as :meth:`turn_cost`
        prices a turn added with them (each text its count, each message its overhead); the
        texts are checked as :meth:`add_turn` checks them."""
        return self._turn_cost(Turn(0, *_turn_texts(user, assistant, tool_texts)))

    # -- selection ----------------------------------------------------------------------
    def select(
        self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()
    ) -> list[dict[str, object]]:
        """The kept earlier turns as ``[{"user", "assistant", "turn_id"}, ...]`` in position order."""
        exclude = excluded_ids(exclude)  # checked before the embedder is asked
        probe = self._probe(query)  # the query's embedding, never under the lock
        with self._lock:
            selection = self._select_for(query, token_budget, exclude, probe, records=False)
            return [self._history.turns[t].as_dict() for t in selection.turn_ids]

    def build_prompt(self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()) -> str:
        """Pinned content, the kept turns and the query as one plain-text prompt."""
        exclude = excluded_ids(exclude)
        probe = self._probe(query)
        with self._lock:
            return self._select_for(query, token_budget, exclude, probe, records=False).as_prompt(self._history.turns)

    def explain(self, query: str, *, token_budget: int | None = None, exclude: Iterable[int] = ()) -> Selection:
        """Select for ``query`` and say why; changes no turn, pin or setting.

        ``token_budget`` overrides the budget for this call only (an adapter that
        knows the size of the query and the open turn passes what is left); below
        the pinned content's cost, ``on_overflow`` applies.  ``exclude`` names turns
        this call must not select (an adapter sends them itself, e.g. the current turn): an
        iterable of turn ids.
        With an embedder, only the query is embedded (one call, within ``embed_timeout``,
        never under the lock); turns not yet embedded are scored lexically.
        """
        exclude = excluded_ids(exclude)
        return self._select_for(query, token_budget, exclude, self._probe(query))

    def _select_for(
        self, query: str, token_budget: int | None, exclude: frozenset[int], probe: Any, records: bool = True
    ) -> Selection:
        """The selection for ``query`` (``exclude`` as :func:`~.history.excluded_ids` checked it,
        before the embedder was asked); ``records=False`` leaves its ``scores``, ``active_segment``
        and ``matched_segment`` empty (callers that read only the kept turns skip building what
        ``explain`` shows, and two scans of every turn: same turns)."""
        query = require_text(query, "query")
        budget_total = self._token_budget if token_budget is None else require_budget(token_budget)
        cues, content = strip_cues(query[: self.params.max_query_chars])
        anchors = extract(content, query=True)
        with self._lock:
            if self._semantic is not None:
                self._semantic.take()  # changed turns queued; cached vectors used at once
            return self._explain(query, anchors.counts, cues, budget_total, exclude, probe, records)

    def _explain(self, query: str, query_anchors: Counter[str], cues: Cues, budget_total: int,
                 exclude: frozenset[int], probe: tuple[Any, bool] | None, records: bool = True) -> Selection:
        p, history = self.params, self._history
        index, labels = history.index, history.labels
        # 1-2. weights, candidates (fused with similarity), and the gate
        weights = anchor_weights(query_anchors, index.df, len(history), p)
        candidates, topic_weight = score_candidates(weights, index, history.positions, labels, history.costs, p)
        semantic = self._semantic  # a probe comes from it: None without it
        fallback = probe is not None and probe[1]
        view = None
        if probe is not None and semantic is not None and probe[0] is not None:
            if semantic.mismatched(probe[0]):  # warned once; lexical, as on an outage
                fallback = True
            else:
                view = semantic.view(probe[0], p.semantic_min_turns)
        fuse(candidates, view, history, p)
        for turn_id in exclude:
            candidates.pop(turn_id, None)
        asks, closes = answer_ending(history)  # a question to the user, or an offer of more help

        def preference(switch_score: float) -> tuple[int, float, tuple[tuple[str, float], ...]] | None:
            """The meaning's topic preference, measured only where the gate consults it."""
            found = preference_inputs(view, history, p, topic_weight, sum(weights.values()), bool(cues.points_back))
            return None if found is None else topic_preference(with_switch_score(found, switch_score), p)

        decision, features, topic = gate_query(
            labels, history.by_position, index.df, weights, topic_weight, cues, p, topic_continuity(view, history, p),
            replying=view is not None and asks, closing=closes, asks=asks,
            preference=preference if view is not None else None,
            profiles_at=history.profiles_before)
        # "ok thanks", "好的" after an answer that asks nothing: it takes note of the latest exchange,
        # whatever its words match ("yes" to "Shall I book it for 12-15 June?" is a reply instead: the
        # action it confirms may need the topic's earlier turns)
        noted = bool(labels) and takes_note(acknowledges(query), asks, p)
        if noted:
            decision, topic = "continue", labels[-1]

        # 3. pinned content first, then the steps that keep turns with evidence
        fixed = sum(self._fixed_costs.values())
        pinned = sorted(self._pinned - exclude, key=history.positions.__getitem__)
        kept = Kept(history, budget_total - fixed - sum(history.costs[t] for t in pinned))
        for turn_id in pinned:
            kept.reasons[turn_id], kept.evidence[turn_id] = "pinned", Evidence(pinned=True)
        kept.reasons.update(dict.fromkeys(exclude, _EXCLUDED))  # blocks every later step
        # the top_m by (total, position), best first: positions are distinct, so the keys are
        # too and the tuples never compare their candidates (no key function called per candidate).
        # One sort in C (floats first: its fast tuple compare) picks the same as heapq.nlargest,
        # whose loop over the candidates runs in Python
        reasons = kept.reasons
        ranked = [(c.total, c.position, c) for c in candidates.values() if c.turn_id not in reasons]
        ranked.sort(reverse=True)
        pool = [c for _, _, c in ranked[: p.top_m]]
        # the anchors some candidate holds, inserted in the same order as a comprehension over
        # them would (so the set, and the order its weights are summed in, are the same)
        coverable: set[str] = set().union(*[c.covered for c in candidates.values()])
        coverable_weight = sum(weights[a] for a in coverable)
        total_weight = sum(weights.values())
        over_budget = kept.budget < 0
        explicit_switch = decision == "switch" and bool(cues.switch)
        if over_budget:
            self._overflow(fixed, pinned, budget_total)
        elif noted:  # the exchange it answers, nothing else
            keep_follow_up(topic, p, kept, latest_only=True)
        elif not (explicit_switch and not p.keep_on_explicit_switch):
            already = {a for t in pinned for a in index.turns[t].anchors if a in coverable}
            target = p.coverage_target * coverable_weight
            keep_coverage(pool, weights, topic, labels, p, kept, target, already)
            elliptical = bool(cues.reference) or coverable_weight < p.elliptical_threshold * total_weight
            if total_weight <= 0 or (elliptical and topic is not None and decision == "continue"):
                keep_follow_up(topic, p, kept)  # a switch keeps nothing by reference to the topic it left
            if topic is not None:
                keep_topic(pool, topic, decision == "return", p, kept)
            if view is not None:
                keep_semantic(pool, topic, p, kept)
            keep_fill(pool, weights, p, kept)
            keep_neighbours(pool, candidates, p, kept)

        for turn_id in exclude:
            kept.reasons.pop(turn_id, None)
        if not over_budget:
            # a query with no content words ("why?") has no meaning to judge its follow-ups by
            drop_unrelated(view, history, p, kept, bool(cues.reference) or total_weight <= 0)
        turn_ids = tuple(sorted(kept.reasons, key=history.positions.__getitem__))
        # the coverable anchors some kept turn holds (a few anchors, each looked up in the kept
        # turns' sets, instead of a set of every anchor of every kept turn)
        kept_sets = [index.turns[t].anchors for t in turn_ids]
        covered_weight = sum(weights[a] for a in coverable if any(a in held for held in kept_sets))
        active = labels[-1] if labels else None
        return Selection(
            query=query,
            turn_ids=turn_ids,
            decision=decision,
            weak_switch=False,
            gate=features,
            active_segment=history.topic_ids(active) if records else (),
            matched_segment=history.topic_ids(topic) if records and decision == "return" else (),
            scores=score_records(pool, candidates, weights, kept, explicit_switch, topic, p, view) if records else (),
            coverage=covered_weight / coverable_weight if coverable_weight else 1.0,
            tokens_kept=fixed + sum(history.costs[t] for t in turn_ids),
            tokens_total=fixed + history.total_cost,
            over_budget=over_budget,
            system_prompt=self._system_prompt,
            summary=self._summary,
            pinned_turn_ids=tuple(pinned),
            topic=topic,
            semantic_fallback=fallback,
        )

    # -- copying ------------------------------------------------------------------------
    def __copy__(self) -> ContextGatekeeper:
        """An independent gatekeeper, as :meth:`__deepcopy__` makes one (a copy sharing this
        one's turns, index and lock would change with it)."""
        return self._copied()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ContextGatekeeper:
        """An independent gatekeeper that selects as this one does: built from the same
        :attr:`options` (its token counter, embedder and vector cache objects shared, not
        copied), with the same budget, overhead, ``on_overflow`` and :attr:`params`; the same
        turns in the same order under the same ids (the next :meth:`add_turn` returns the id
        it would return here); the same pins, system prompt and summary; and, with an
        embedder, the turns' vectors (nothing is embedded again).  A change to either changes
        nothing in the other.  ``copy.copy`` gives the same."""
        copied = self._copied()
        if memo is not None:
            memo[id(self)] = copied
        return copied

    def __reduce__(self) -> NoReturn:
        """Refused (:class:`InvalidTypeError`): a token counter and an embedder do not pickle;
        the message says how to rebuild a gatekeeper from its turns."""
        raise InvalidTypeError(_NOT_PICKLED)

    def current_options(self) -> GateOptions:
        """This gatekeeper's settings as they are now: :attr:`options` (what it was built with)
        with the budget, overhead, ``on_overflow`` and :attr:`params` assigned since."""
        with self._lock:
            return self.options.with_(
                token_budget=self._token_budget, message_overhead=self._message_overhead,
                on_overflow=self.on_overflow, params=self._history.params,
            )

    def empty_copy(self) -> ContextGatekeeper:
        """A new gatekeeper with no turns, pins, system prompt or summary, and this one's
        current settings: built from the same :attr:`options` (its token counter, embedder and
        vector cache objects shared), with the budget, overhead, ``on_overflow`` and
        :attr:`params` as they are now (assigned since it was built, or not).
        (``ContextGatekeeper(options=gk.options)`` gives the settings it was *built* with.)"""
        with self._lock:
            empty = type(self)(options=self.options)  # the same options: the same resolved embedder
            empty._token_budget, empty.on_overflow = self._token_budget, self.on_overflow
            empty._message_overhead = self._message_overhead  # (no turn or prompt to cost again)
            empty._history.use_params(self._history.params)  # (no turn to segment again)
            return empty

    def _copied(self) -> ContextGatekeeper:
        """:meth:`__deepcopy__`'s gatekeeper, built while this one's lock is held (a snapshot)."""
        with self._lock:
            copied = self.empty_copy()
            with copied._lock:  # its embedding lane may already look at its turns
                if self._semantic is not None and copied._semantic is not None:
                    # the changes since the last selection first (a removed turn's vector goes): the
                    # copy's history holds only the turns there are now, and no vector may outlive its
                    # turn (while the embedder backs off, no background pass takes them in)
                    self._semantic.take(lookup=False)
                    copied._semantic.vectors = copy.deepcopy(self._semantic.vectors)  # by turn id and text hash
                copied._history.restore(self.turns, self._history.next_id)
                copied._pinned = set(self._pinned)
                copied._system_prompt, copied._summary = self._system_prompt, self._summary
                copied._fixed_costs = dict(self._fixed_costs)
            return copied

    def _overflow(self, fixed: int, pinned: list[int], budget_total: int) -> None:
        detail = (
            f"pinned content needs {fixed + sum(self._history.costs[t] for t in pinned)} tokens "
            f"(system prompt and summary {fixed}, pinned turns {pinned}) but token_budget is {budget_total}"
        )
        self._warned_overflow = report_overflow(
            self.on_overflow, detail, "raise token_budget, unpin turns", self._warned_overflow,
            "keeping the pinned content only", logger,
        )

    def _fixed_cost(self, text: str | tuple[str, ...] | None, overhead: int) -> int:
        """Tokens of a system prompt or summary (0 for none): each of its messages' text
        counted, plus ``overhead`` for each message."""
        texts = _messages(text)
        return sum(map(self._count, texts)) + overhead * len(texts)

    def _turn_cost(self, turn: Turn, overhead: int | None = None) -> int:
        """Tokens of each of the turn's texts, each counted as the message it is sent as, plus
        the per-message overhead (``overhead``, or the gatekeeper's) for each.  (The texts were
        counted joined: with a counter that rounds up per text, such as four characters a
        token, an agent turn of twenty small tool messages was priced 11% under what its
        messages cost, and a selection went over its budget.)"""
        count = self._count
        texts = [t for t in (turn.user, turn.assistant, *turn.tool_texts) if t]
        messages = bool(turn.user) + bool(turn.assistant) + len(turn.tool_texts)
        overhead = self._message_overhead if overhead is None else overhead
        return sum(map(count, texts)) + overhead * messages


class _TurnCost:
    """A gatekeeper's :meth:`ContextGatekeeper._turn_cost` for its history, held weakly:
    the history must not keep its gatekeeper alive (a reference cycle would leave a
    dropped gatekeeper, and its index, to the next cyclic garbage collection)."""

    __slots__ = ("_gatekeeper",)

    def __init__(self, gatekeeper: ContextGatekeeper) -> None:
        self._gatekeeper = weakref.ref(gatekeeper)

    def __call__(self, turn: Turn) -> int:
        gatekeeper = self._gatekeeper()
        assert gatekeeper is not None, "a history is only used through its gatekeeper"
        return gatekeeper._turn_cost(turn)
