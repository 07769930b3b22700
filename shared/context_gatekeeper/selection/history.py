"""The turn list with everything selection needs, kept up to date incrementally.

:class:`TurnHistory` owns the turns in position order, their token costs, the
anchor index and the topic segments.  Every change costs time proportional to
the turn changed plus the segments recomputed after it; nothing here knows about
budgets, pins or queries.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast, overload

from ..caching import BoundedCache, text_key
from .anchors import TextAnchors, _token_anchors, extract, has_cjk, without_reasoning_scaffold
from .cues import RETURN_CUES, REFERENCE_CUES, SWITCH_CUES, Cues, strip_cues
from .gate import acknowledges, is_courtesy, last_question

from ..errors import InvalidInputError, InvalidTypeError, UnknownTurnError
from .index import AnchorIndex, TurnPostings
from .params import SelectionParams
from .segments import SegmentInput, next_label, sentence_hashes, topic_profiles
from .records import Turn
from ..validation import require_text

__all__ = ["TurnHistory", "turn_texts", "excluded_ids", "require_turn_list"]


ANCHOR_CACHE_SIZE = 65_536
"""Texts whose anchors the process keeps (a user message and an answer are a text each): a
turn indexed again (a reopened transcript, a second gate or worker, a list gated anew) costs
no extraction.  About 0.63 kB a text of chat (LoCoMo)."""

ANCHOR_CACHE_BYTES = 64_000_000
"""... and anchors of about this many bytes in all (:func:`_anchor_bytes`: a long log or a
pasted file holds thousands of anchors, which must not stay in memory for as long as 65,536
chat messages' would).  Measured (tracemalloc): about 0.9 of the estimate for chat
(LoCoMo), 0.4 for a log whose words repeat, 1.1 for a text of all distinct words: some 45 MB
when full of chat, 70 MB at most."""

GATE_INPUT_CACHE_SIZE = 32_768
"""User texts whose gate input (query-mode anchors and cues) the process keeps: about 0.7 kB
each, some 23 MB when full (a gate input reads only a message's first ``max_query_chars``
characters, so a long message's is no bigger)."""

LABEL_CACHE_SIZE = 65_536
"""Turns whose topic label (and new content) the process keeps, by the turns up to them
(:meth:`TurnHistory._resegment_from`): about 0.3 kB each, some 18 MB when full."""

PREPARED_CACHE_SIZE = 32_768
"""Turns whose prepared inputs (:func:`prepared_turn`: anchors, index entries, segmentation
input) the process keeps, by the turn's texts: a turn indexed again (a second gate over
the same transcript, a reopened one) costs no lookup of each text's anchors and no
building of its entries.  About 2.1 kB a turn of chat, its texts included."""

PREPARED_CACHE_CHARS = 8_000_000
"""... and turns of at most this many characters in all (user, assistant and tool texts):
the cache holds each turn's texts (its key) and its index entries, so turns with long tool
outputs must not stay in memory for as long as 32,768 chat turns would.  Measured
(tracemalloc, the anchors' strings left to :data:`ANCHOR_CACHE_BYTES`): about 7.3 bytes a
character of chat (LoCoMo, whose turns average 300 characters: this bound is reached first,
at some 26,000 turns), 3.4 of a log whose words repeat, 5.2 of a text of all distinct words:
some 60 MB when full, at most."""


_ANCHOR_ENTRY_BYTES = 64
"""An anchor's entry in a text's counts (its slot, count and string header), estimated."""


def _anchor_bytes(key: object, anchors: TextAnchors) -> int:
    """The weight of a text's anchors in their cache, about their bytes: the characters of
    its distinct anchors plus :data:`_ANCHOR_ENTRY_BYTES` each."""
    counts = anchors.counts
    return sum(map(len, counts)) + _ANCHOR_ENTRY_BYTES * len(counts)


_anchors: BoundedCache[str, TextAnchors] = BoundedCache(
    maxsize=ANCHOR_CACHE_SIZE, weigh=_anchor_bytes, max_weight=ANCHOR_CACHE_BYTES)
_gate_inputs: BoundedCache[tuple[int, str], tuple[tuple[str, ...], Cues]] = BoundedCache(maxsize=GATE_INPUT_CACHE_SIZE)
_labels: BoundedCache[str, tuple[int, float]] = BoundedCache(maxsize=LABEL_CACHE_SIZE)


def text_anchors(text: str, key: str | None = None) -> TextAnchors:
    """``extract(text)``, computed once per text (shared: never mutate the result);
    ``key`` is ``text_key(text)`` where the caller has it already."""
    return _anchors.get_or_compute(text_key(text) if key is None else key, lambda: extract(text))


_JOINED = re.compile(r"(?:\.(?<=\w\.)|::(?<=\w::)|->(?<=\w->))[A-Za-z_]", re.ASCII)
r"""Where an identifier may run on through a joiner (``a.b``, ``a::b``, ``a->b``): ``\w`` then a
joiner then a letter or "_", written joiner first so the engine skips to the next ".", ":"
or "-" instead of trying the pattern at each character."""
_CASE_SPLIT = re.compile(r"[A-Z](?:(?<=[a-z][A-Z])|(?=[A-Z][a-z]))", re.ASCII)
"""Where a word's case may split it (``camelCase``, ``HTTPServer``): ``[a-z][A-Z]`` or
``[A-Z][A-Z][a-z]``, written capital first so the engine skips to the next capital."""
_CUE_WORD = re.compile(r"[A-Za-z_]\w*", re.ASCII)
"""A word of a listed (ASCII) cue."""


def _cue_has_anchor(cue: str) -> bool:
    """Whether a word of ``cue`` has an anchor ("back" of "back to"; not "it" nor "by the way")."""
    return any(_token_anchors(word) for word in _CUE_WORD.findall(cue))


_ANCHORED_CUES = {cue: _cue_has_anchor(cue) for cue in (*REFERENCE_CUES, *SWITCH_CUES, *RETURN_CUES)}
""":func:`_cue_has_anchor` of each listed cue, computed once (a few hundred entries)."""


def _blanks_no_anchor(text: str, cues: Cues) -> bool:
    """Whether blanking ``cues`` out of ``text`` (:func:`strip_cues`) leaves its anchors as they
    are, in order, so the text's own anchors are its gate input.  True only for ASCII text
    with no quoted phrase or code span (a blank inside one would change it), no identifier
    joined across words (a blank could split it) and no word its case splits (each cue as
    written then has the anchors of the cue as listed), whose cues' words have no anchor
    ("it", "that", "they"): the blanks then remove only tokens that bring none.  (Numbers
    and versions are unaffected: a cue is matched only between characters that are not
    word characters, so no digit run or version touches a blank.)  ``cues`` are
    :func:`strip_cues`'s: each is a listed cue, looked up in :data:`_ANCHORED_CUES`."""
    return (
        text.isascii() and '"' not in text and "`" not in text
        and _JOINED.search(text) is None and _CASE_SPLIT.search(text) is None
        and not any(_ANCHORED_CUES[cue] for cue in (*cues.reference, *cues.switch, *cues.returning))
    )



def _gate_input(user: str, max_chars: int, key: str, anchors: TextAnchors) -> tuple[tuple[str, ...], Cues]:
    """``(query anchors, cues)`` of a user text as the topic gate reads it, once per text
    (``key`` is ``text_key(user)``, ``anchors`` its document anchors)."""

    def compute() -> tuple[tuple[str, ...], Cues]:
        cues, content = strip_cues(user[:max_chars])
        if len(user) <= max_chars and (not cues or _blanks_no_anchor(user, cues)) and not has_cjk(content):
            # nothing cut, no anchor blanked, and query mode differs only on Chinese: the same anchors
            return tuple(anchors.counts), cues
        return tuple(extract(content, query=True).counts), cues

    return _gate_inputs.get_or_compute((max_chars, key), compute)


def _closing_question(answer: str) -> tuple[bool, bool]:
    """``(asks, closes)``: the answer ends with a genuine question to the user, or with a
    courtesy question (:func:`gate.asks_question`, :func:`gate.closes_topic`)."""
    question = last_question(answer)
    courtesy = question is not None and is_courtesy(question)
    return question is not None and not courtesy, courtesy


class PreparedTurn(NamedTuple):
    """What indexing and segmenting a turn need of its texts alone (:func:`prepared_turn`):
    a value every :class:`TurnHistory` holding a turn of these texts may share."""

    user: TextAnchors
    """The user text's anchors."""
    postings: TurnPostings
    """The turn's entries in the anchor index."""
    segment: SegmentInput
    """The turn's segmentation input."""
    key: str
    """A key of the turn's texts, telling the assistant text from tool texts (what
    :attr:`TurnHistory.chain` is made of)."""


_PreparedKey = tuple[int, str, str, tuple[str, ...]]
"""``(max_query_chars, user, assistant, tool_texts)``: what a :class:`PreparedTurn` is made from."""


def _characters(key: _PreparedKey, prepared: PreparedTurn) -> int:
    """The weight of a prepared turn in its cache: the characters of its texts."""
    return len(key[1]) + len(key[2]) + sum(map(len, key[3]))


_prepared: BoundedCache[_PreparedKey, PreparedTurn] = BoundedCache(
    maxsize=PREPARED_CACHE_SIZE, weigh=_characters, max_weight=PREPARED_CACHE_CHARS)


def prepared_turn(user: str, assistant: str, tool_texts: tuple[str, ...], max_query_chars: int) -> PreparedTurn:
    """A turn's :class:`PreparedTurn`, computed once per texts and ``max_query_chars`` (the one
    parameter it reads) and kept by them (shared: never mutate it)."""

    def compute() -> PreparedTurn:
        # an agent's ReAct scaffold is read as its content (the same words in every answer tied all topics)
        read = without_reasoning_scaffold(assistant)
        answer = "\n".join(t for t in (read, *tool_texts) if t)
        user_key, answer_key = text_key(user), text_key(answer)
        user_anchors, answer_anchors = text_anchors(user, user_key), text_anchors(answer, answer_key)
        query_anchors, cues = _gate_input(user, max_query_chars, user_key, user_anchors)
        asks, closes = _closing_question(assistant) if assistant else (False, False)
        postings = AnchorIndex.postings_of(user_anchors, answer_anchors)
        anchors = postings.turn.anchors
        answered = len(anchors) > len(user_anchors.counts)  # the answer brought anchors of its own
        segment = SegmentInput(query_anchors, cues, anchors, answered, asks, closes, acknowledges(user),
                               assistant, sentence_hashes(assistant) if assistant else frozenset())
        # the answer's ending (asks, closes) is read from the assistant text alone: with tool
        # texts its own key joins the turn's, so the same words split differently between the
        # assistant and a tool are another turn to the label cache
        named = user_key + answer_key + (text_key(assistant) if tool_texts or read != assistant else "")
        return PreparedTurn(user_anchors, postings, segment, text_key(named))

    return _prepared.get_or_compute((max_query_chars, user, assistant, tool_texts), compute)


_LISTING_READS = 32
"""Labels computed by :meth:`TurnHistory._resegment_from` per turn of the history at which the
segmentation inputs are listed first (cheaper to read) instead of read where they are."""


class _ByPosition(Sequence[SegmentInput]):
    """The segmentation inputs in position order, without copying them."""

    def __init__(self, order: list[int], inputs: dict[int, SegmentInput]) -> None:
        self._order, self._inputs = order, inputs

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, position: int) -> SegmentInput: ...

    @overload
    def __getitem__(self, position: slice) -> list[SegmentInput]: ...

    def __getitem__(self, position: int | slice) -> SegmentInput | list[SegmentInput]:
        try:  # (segmentation reads positions, many per turn: no type test on that path)
            return self._inputs[self._order[position]]  # type: ignore[index]
        except TypeError:  # a slice (a Sequence slices too): its list of ids is no key
            return [self._inputs[turn_id] for turn_id in self._order[cast(slice, position)]]


class TurnHistory:
    """Turns in position order, indexed and segmented.

    Invariants: ``order`` lists every turn id once; ``positions`` inverts it;
    ``labels[i]`` and ``novelty[i]`` are the topic label and new content of the
    turn at position ``i``, equal to what :func:`segments.segment_all` computes from
    scratch; the index holds exactly these turns.

    Args:
        cost: tokens a turn costs (text and per-message overhead).
        params: the gate's parameters, used for segmentation.
    """

    def __init__(self, cost: Callable[[Turn], int], params: SelectionParams) -> None:
        self._cost = cost
        self.params = params
        self.turns: dict[int, Turn] = {}
        self.order: list[int] = []
        self.positions: dict[int, int] = {}
        self.costs: dict[int, int] = {}
        self.total_cost = 0
        self.inputs: dict[int, SegmentInput] = {}
        self.labels: list[int] = []
        self.novelty: list[float] = []
        self.index = AnchorIndex()
        self.by_position = _ByPosition(self.order, self.inputs)
        self.chain: list[str] = []
        """``chain[i]`` names the turns up to position ``i`` (their texts, in order, and the
        parameters): segmentation is a function of them, so their label is computed once."""
        self._turn_keys: dict[int, str] = {}
        self.changed: set[int] | None = None
        """Ids of turns added, changed or removed since a consumer last emptied it;
        ``None`` (the default) tracks nothing.  The semantic channel sets a set here."""
        self._next_id = 1
        self._profiles: tuple[tuple[str, int, int, float], dict[int, dict[str, float]]] | None = None
        """The last :meth:`profiles_before` result and its key."""

    def __len__(self) -> int:
        return len(self.order)

    @property
    def next_id(self) -> int:
        """The id the next inserted turn gets (ids are never reused)."""
        return self._next_id

    # -- changes ------------------------------------------------------------------------
    def insert(self, position: int, user: str, assistant: str, tool_texts: tuple[str, ...]) -> int:
        """Add a turn at ``position`` (``len(self)`` appends) under a new id, and return it."""
        return self.insert_many(position, [(user, assistant, tool_texts)])[0]

    def insert_many(self, position: int, texts: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[int]:
        """Add turns at ``position``, in order, under new ids, and return them: the state
        :meth:`insert` gives inserting them one by one (labels are a function of the turn
        list), with the later turns segmented once instead of after each insert.  Every
        turn is prepared before anything changes, so a failing one inserts none."""
        if not texts:
            return []
        first = self._next_id
        turns = [Turn(first + k, user, assistant, tools) for k, (user, assistant, tools) in enumerate(texts)]
        prepared = [self._prepare(turn) for turn in turns]  # may raise: nothing has changed yet
        self._next_id += len(turns)
        for turn, ready in zip(turns, prepared):
            self._store(turn, ready)
        ids = [turn.id for turn in turns]
        self.order[position:position] = ids
        self._renumber_from(position)
        self._resegment_from(position)
        return ids

    def restore(self, turns: Sequence[Turn], next_id: int) -> None:
        """Append ``turns`` under their own ids, in order, and number the turns added later
        from ``next_id`` on: an empty history made the copy of another
        (:meth:`ContextGatekeeper.__deepcopy__`), its labels the same (a function of the turn
        list).  Every turn is prepared before anything changes."""
        if self.order:
            raise InvalidInputError("restore() fills an empty history; this one holds turns")
        turns = [Turn(t.id, t.user, t.assistant, t.tool_texts) for t in turns]
        prepared = [self._prepare(turn) for turn in turns]  # may raise: nothing has changed yet
        for turn, ready in zip(turns, prepared):
            self._store(turn, ready)
        self.order[:] = [turn.id for turn in turns]
        self._next_id = next_id
        self._renumber_from(0)
        self._resegment_from(0)

    def replace(self, turn_id: int, user: str, assistant: str, tool_texts: tuple[str, ...]) -> None:
        """New texts for a turn; its id and position stay."""
        self.replace_many({turn_id: (user, assistant, tool_texts)})

    def replace_many(self, texts: Mapping[int, tuple[str, str, tuple[str, ...]]]) -> None:
        """New texts for turns (id -> texts); ids and positions stay.  The state :meth:`replace`
        gives one by one, with the turns after the first segmented once instead of after each
        replacement.  Every turn is prepared before anything changes (an unknown id or a
        failing token count changes nothing)."""
        if not texts:
            return
        start = min(self.position(turn_id) for turn_id in texts)
        turns = [Turn(turn_id, *parts) for turn_id, parts in texts.items()]
        prepared = [self._prepare(turn) for turn in turns]  # may raise: nothing has changed yet
        for turn, ready in zip(turns, prepared):
            self.index.remove(turn.id)
            self.total_cost -= self.costs[turn.id]
            self._store(turn, ready)
        self._resegment_from(start)

    def remove(self, turn_id: int) -> Turn:
        """Take a turn out; later turns move up one position."""
        return self.remove_many([turn_id])[0]

    def remove_many(self, turn_ids: Sequence[int]) -> list[Turn]:
        """Take turns out (distinct ids) and return them, in the order given; later turns move
        up.  The state :meth:`remove` gives one by one, with the turns after the first
        segmented once instead of after each removal (a list replaced whole costs what
        indexing it costs, not its square).  An unknown id changes nothing."""
        if not turn_ids:
            return []
        start = min(self.position(turn_id) for turn_id in turn_ids)  # may raise: nothing has changed yet
        gone = set(turn_ids)
        if len(gone) != len(turn_ids):
            raise InvalidInputError("each turn id may be removed once; the ids given repeat one")
        removed = []
        for turn_id in turn_ids:
            removed.append(self.turns.pop(turn_id))
            self.total_cost -= self.costs.pop(turn_id)
            del self.positions[turn_id], self.inputs[turn_id], self._turn_keys[turn_id]
            self.index.remove(turn_id)
        if self.changed is not None:
            self.changed.update(gone)
        self.order[start:] = [turn_id for turn_id in self.order[start:] if turn_id not in gone]
        self._renumber_from(start)
        self._resegment_from(start)
        return removed

    def recost(self, costs: dict[int, int]) -> None:
        """New token costs for every turn (``costs``: turn id -> tokens, each turn's), as the
        cost function now gives them (a changed per-message overhead)."""
        assert costs.keys() == self.turns.keys(), "a cost for each turn"
        self.costs.update(costs)
        self.total_cost = sum(costs.values())

    def use_params(self, params: SelectionParams) -> None:
        """Segment with ``params`` from now on: every turn's segmentation input prepared again
        when ``max_query_chars`` changed (the one parameter it reads), then every label computed
        again (the label cache serves what was computed before under these parameters).
        Prepared before anything changes."""
        prepared = {} if params.max_query_chars == self.params.max_query_chars else {
            turn_id: prepared_turn(turn.user, turn.assistant, turn.tool_texts, params.max_query_chars)
            for turn_id, turn in self.turns.items()
        }
        self.params = params
        for turn_id, ready in prepared.items():
            self.inputs[turn_id] = ready.segment
        self._profiles = None
        self._resegment_from(0)

    def clear(self) -> None:
        """Remove every turn at once; ids keep counting."""
        if self.changed is not None:
            self.changed.update(self.turns)
        for container in (self.turns, self.positions, self.costs, self.inputs):
            container.clear()
        self.total_cost = 0
        del self.order[:], self.labels[:], self.novelty[:], self.chain[:]
        self._turn_keys.clear()
        self.index = AnchorIndex()

    # -- reading ------------------------------------------------------------------------
    def position(self, turn_id: object) -> int:
        """The position of ``turn_id``, or :class:`UnknownTurnError`."""
        valid = isinstance(turn_id, int) and not isinstance(turn_id, bool)
        position = self.positions.get(turn_id) if isinstance(turn_id, int) and valid else None
        if position is None:
            shown = ", ".join(map(str, self.order[:10])) + (", ..." if len(self.order) > 10 else "")
            raise UnknownTurnError(
                f"no turn with id {turn_id!r}: ids are the integers add_turn returned; current ids are [{shown}]"
            )
        return position

    def segment_start(self, position: int) -> int:
        """The position where the segment (run of one topic) holding ``position`` starts."""
        label = self.labels[position]
        while position > 0 and self.labels[position - 1] == label:
            position -= 1
        return position

    def topic_ids(self, label: int | None) -> tuple[int, ...]:
        """Ids of the turns of topic ``label``, every run of it (empty for ``None``)."""
        if label is None:
            return ()
        return tuple(t for t, lbl in zip(self.order, self.labels) if lbl == label)

    def latest_of_topic(self, label: int | None, count: int) -> list[int]:
        """Positions of the last ``count`` turns of topic ``label``, newest first."""
        found: list[int] = []
        if label is None or count <= 0:
            return found
        for position in range(len(self.order) - 1, -1, -1):
            if self.labels[position] == label:
                found.append(position)
                if len(found) == count:
                    break
        return found

    def topics(self) -> dict[int, tuple[int, ...]]:
        """Topic label -> ids of its turns, every run of it, in order of first appearance."""
        out: dict[int, list[int]] = {}
        for turn_id, label in zip(self.order, self.labels):
            out.setdefault(label, []).append(turn_id)
        return {label: tuple(ids) for label, ids in out.items()}

    def segments(self) -> list[tuple[int, ...]]:
        """Segments (contiguous runs of one topic) as tuples of turn ids, oldest first."""
        out: list[list[int]] = []
        for position, turn_id in enumerate(self.order):
            if position == 0 or self.labels[position] != self.labels[position - 1]:
                out.append([])
            out[-1].append(turn_id)
        return [tuple(s) for s in out]

    # -- internals ----------------------------------------------------------------------
    def _prepare(self, turn: Turn) -> tuple[int, PreparedTurn]:
        """Everything a turn needs that can fail (a token counter may raise), computed
        before anything changes: ``(cost, prepared inputs)`` (:func:`prepared_turn`)."""
        cost = self._cost(turn)
        return cost, prepared_turn(turn.user, turn.assistant, turn.tool_texts, self.params.max_query_chars)

    def _store(self, turn: Turn, prepared: tuple[int, PreparedTurn]) -> None:
        """Record, cost and index a prepared turn (its position is the caller's business)."""
        cost, ready = prepared
        turn_id = turn.id
        self._turn_keys[turn_id] = ready.key
        self.index.add_postings(turn_id, ready.postings)
        self.turns[turn_id] = turn
        if self.changed is not None:
            self.changed.add(turn_id)
        self.costs[turn_id] = cost
        self.total_cost += cost
        self.inputs[turn_id] = ready.segment

    def _renumber_from(self, position: int) -> None:
        for pos in range(position, len(self.order)):
            self.positions[self.order[pos]] = pos

    def _resegment_from(self, start: int) -> None:
        """Recompute segment labels from ``start`` on, with document frequencies of each prefix
        (counted only once a label is not known already)."""
        order, turns, postings = self.order, self.index.turns, self.index.postings
        counts: Counter[str] | None = None  # anchors of the turns before the current position, or from it on
        prefix = False

        def prefix_df(anchor: str) -> int:  # index.df(anchor) - counts[anchor] from the position on, inlined
            bucket = postings.get(anchor)
            return (len(bucket) if bucket else 0) - later_count(anchor, 0)

        del self.labels[start:], self.novelty[start:], self.chain[start:]
        chain, keys, sha256 = self.chain, self._turn_keys, hashlib.sha256
        previous = chain[start - 1] if start else self._params_fingerprint()
        for turn_id in order[start:]:
            # a turn's label depends only on the turns up to it (their texts) and the parameters
            previous = sha256(f"{previous}{keys[turn_id]}".encode()).hexdigest()
            chain.append(previous)
        known = _labels.get_many(chain[start:])  # the labels known already, looked up at once
        computed: list[tuple[str, tuple[int, float]]] = []
        inputs = self.inputs
        # segmenting reads a dozen positions per turn: where many labels are computed, by_position
        # is listed once (faster to read); where few are (an append), the listing would cost more
        # than the reads, so they go through by_position itself
        listed: Sequence[SegmentInput] = []
        list_them = known.count(None) * _LISTING_READS >= len(order)

        def profiles_at(end: int) -> dict[int, dict[str, float]]:
            return self.profiles_before(end, listed)
        last = len(order) - 1
        for position in range(start, len(order)):
            turn_id = order[position]
            found = known[position - start]
            if found is None:
                if counts is None:
                    # the prefix's document frequencies: counted directly when fewer turns come
                    # before the position than from it (a list indexed from its start: the lookup
                    # is then the counter's own), else the index's minus the turns from it on
                    prefix = position <= len(order) - position
                    counts = Counter()
                    for other in order[:position] if prefix else order[position:]:
                        counts.update(turns[other].anchors)
                    later_count = counts.get
                    df = counts.__getitem__ if prefix else prefix_df
                if not listed:
                    listed = [inputs[other] for other in order] if list_them else self.by_position
                found = next_label(self.labels, listed, position, df, self.params, profiles_at)
                computed.append((chain[position], found))
            self.labels.append(found[0])
            self.novelty.append(found[1])
            if counts is not None and position < last:  # (after the last turn nothing reads it)
                if prefix:
                    counts.update(turns[turn_id].anchors)
                else:
                    counts.subtract(turns[turn_id].anchors)
        if computed:
            _labels.put_many(computed)

    def profiles_before(self, end: int, turns: Sequence[SegmentInput] | None = None) -> dict[int, dict[str, float]]:
        """:func:`segments.topic_profiles` before position ``end`` (labels up to ``end`` set),
        kept for the next call with the same ``end`` and turns before it: the query gate's
        profiles after an append are the ones the next appended turn is segmented with.
        Keyed by ``chain[end - 1]`` (which names the turns up to it, their texts and the
        parameters, and so their labels) and the profile parameters.  Shared: read only.
        ``turns``, when given, is :attr:`by_position` as a list (the same inputs)."""
        p = self.params
        key = (self.chain[end - 1], p.topic_lookback, p.topic_window, p.topic_decay) if end > 0 else None
        kept = self._profiles
        if key is not None and kept is not None and kept[0] == key:
            return kept[1]
        profiles = topic_profiles(self.labels, self.by_position if turns is None else turns, end, p.topic_lookback,
                                  p.topic_window, p.topic_decay)
        if key is not None:
            self._profiles = (key, profiles)
        return profiles

    def _params_fingerprint(self) -> str:
        """A key of the parameters segmentation reads: their record's fingerprint, a key of
        its values (kept on the record, which cannot change: its dicts are read-only)."""
        return self.params._fingerprint


def turn_texts(user: Any, assistant: Any, tool_texts: Any) -> tuple[str, str, tuple[str, ...]]:
    """Validated texts of a turn: strings, and not all of them blank."""
    user = require_text(user, "user", allow_empty=True)
    assistant = require_text(assistant, "assistant", allow_empty=True)
    if isinstance(tool_texts, str):
        raise InvalidTypeError(
            f"tool_texts must be an iterable of strings, not a single string; pass ({tool_texts[:20]!r},) for one text"
        )
    if type(tool_texts) is not tuple and not _is_collection(tool_texts):  # (the default () checked at once)
        raise InvalidTypeError(
            f"tool_texts must be an iterable of strings, got {type(tool_texts).__name__}; pass () for none, "
            "(text,) for one"
        )
    tools = tuple(require_text(t, "tool text", allow_empty=True) for t in tool_texts)
    if not (user.strip() or assistant.strip() or any(t.strip() for t in tools)):
        raise InvalidInputError("a turn needs some text: user, assistant and tool texts are all empty")
    return user, assistant, tools


def _is_collection(value: Any) -> bool:
    """Whether ``value`` is an iterable of items (not ``None``, a string, bytes or a mapping)."""
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping))


def require_turn_list(turns: Any) -> Iterable[Any]:
    """``turns`` if it is an iterable of turns (:meth:`ContextGatekeeper.insert_turns`),
    else :class:`InvalidTypeError` saying what to pass."""
    if not _is_collection(turns):
        raise InvalidTypeError(
            f"turns must be an iterable of (user, assistant) or (user, assistant, tool_texts) tuples, got "
            f"{type(turns).__name__}; pass [] for none"
        )
    return cast(Iterable[Any], turns)


_NO_IDS: frozenset[int] = frozenset()


def excluded_ids(exclude: Any) -> frozenset[int]:
    """``exclude`` (turn ids a selection must not keep) as a frozenset, or
    :class:`InvalidTypeError` when it is not an iterable of ints (a turn id is one)."""
    if type(exclude) is tuple and not exclude:  # the default: no work on the hot path
        return _NO_IDS
    if _is_collection(exclude):
        try:
            ids = frozenset(exclude)
        except TypeError:  # an unhashable item
            ids = None
        if ids is not None and all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            return ids
    raise InvalidTypeError(
        f"exclude must be an iterable of turn ids (ints), got {type(exclude).__name__} {exclude!r:.60}; "
        "pass e.g. [3, 4], or () for none"
    )
