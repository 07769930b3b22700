"""The incremental inverted index over turns.

Adding or removing a turn costs time proportional to that turn's anchors;
looking up an anchor touches only its postings.  Nothing here knows about
gating or budgets.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidInputError
from .anchors import TextAnchors

__all__ = ["IndexedTurn", "TurnPostings", "AnchorIndex"]


@dataclass(frozen=True)
class IndexedTurn:
    """What the index keeps of one turn (term counts live in the postings).

    Attributes:
        user_len: anchor occurrences in the user message (BM25 document length).
        assistant_len: anchor occurrences in the assistant answer and tool messages.
        anchors: every distinct anchor of the turn (user and assistant).
    """

    __slots__ = ("user_len", "assistant_len", "anchors")
    user_len: int
    assistant_len: int
    anchors: frozenset[str]


@dataclass(frozen=True)
class TurnPostings:
    """A turn's entries in the index, computed once from its anchors (:meth:`AnchorIndex.postings_of`):
    a value (nothing in it is changed), so every index holding a turn with these anchors may
    share it.

    Attributes:
        turn: what the index keeps of the turn.
        entries: ``(tf in user text, tf in assistant text)`` of each of ``turn.anchors``, in
            the order that frozenset iterates (always the same for one object).
    """

    __slots__ = ("turn", "entries")
    turn: IndexedTurn
    entries: tuple[tuple[int, int], ...]


_SMALL = 16
_PAIRS = [[(u, a) for a in range(_SMALL)] for u in range(_SMALL)]
"""Shared (tf_user, tf_assistant) tuples: most postings hold small counts, and one
tuple object per pair instead of one per posting saves a third of the index's memory."""


class AnchorIndex:
    """anchor -> {turn id: (tf in user text, tf in assistant text)}, plus length totals.

    Invariant: ``postings`` holds exactly the anchors of the turns in ``turns``,
    and the totals are the sums of their lengths.
    """

    __slots__ = ("postings", "turns", "total_user_len", "total_assistant_len")

    def __init__(self) -> None:
        self.postings: dict[str, dict[int, tuple[int, int]]] = {}
        self.turns: dict[int, IndexedTurn] = {}
        self.total_user_len = 0
        self.total_assistant_len = 0

    def __len__(self) -> int:
        return len(self.turns)

    def add(self, turn_id: int, user: TextAnchors, assistant: TextAnchors) -> IndexedTurn:
        """Index a turn's user and assistant anchors under ``turn_id`` (not yet indexed)."""
        return self.add_postings(turn_id, self.postings_of(user, assistant))

    @staticmethod
    def postings_of(user: TextAnchors, assistant: TextAnchors) -> TurnPostings:
        """What :meth:`add_postings` indexes for a turn of these user and assistant anchors."""
        user_counts, assistant_counts = user.counts, assistant.counts
        turn = IndexedTurn(user.length, assistant.length, frozenset(user_counts).union(assistant_counts))
        pairs, user_tf, assistant_tf = _PAIRS, user_counts.get, assistant_counts.get
        entries = []
        for anchor in turn.anchors:
            tf_user, tf_assistant = user_tf(anchor, 0), assistant_tf(anchor, 0)
            entries.append(pairs[tf_user][tf_assistant] if tf_user < _SMALL and tf_assistant < _SMALL
                           else (tf_user, tf_assistant))
        return TurnPostings(turn, tuple(entries))

    def add_postings(self, turn_id: int, prepared: TurnPostings) -> IndexedTurn:
        """Index a turn's prepared entries (:meth:`postings_of`) under ``turn_id`` (not yet indexed)."""
        if turn_id in self.turns:
            raise InvalidInputError(f"turn {turn_id} is already indexed; remove it first, or use a new turn id")
        turn = prepared.turn
        self.turns[turn_id] = turn
        self.total_user_len += turn.user_len
        self.total_assistant_len += turn.assistant_len
        postings = self.postings
        get = postings.get
        for anchor, entry in zip(turn.anchors, prepared.entries):  # once per anchor of every turn indexed
            bucket = get(anchor)
            if bucket is None:
                postings[anchor] = {turn_id: entry}
            else:
                bucket[turn_id] = entry
        return turn

    def remove(self, turn_id: int) -> IndexedTurn:
        """Drop a turn from the index and return what it held."""
        turn = self.turns.pop(turn_id)
        self.total_user_len -= turn.user_len
        self.total_assistant_len -= turn.assistant_len
        for anchor in turn.anchors:
            bucket = self.postings[anchor]
            del bucket[turn_id]
            if not bucket:
                del self.postings[anchor]
        return turn

    def df(self, anchor: str) -> int:
        """Number of indexed turns holding ``anchor``."""
        bucket = self.postings.get(anchor)
        return len(bucket) if bucket else 0

    @property
    def avg_user_len(self) -> float:
        return self.total_user_len / len(self.turns) if self.turns else 0.0

    @property
    def avg_assistant_len(self) -> float:
        return self.total_assistant_len / len(self.turns) if self.turns else 0.0

    def snapshot(self) -> tuple[dict[str, dict[int, tuple[int, int]]], int, int]:
        """A comparable copy of the whole index state (for tests)."""
        return (
            {a: dict(b) for a, b in self.postings.items()},
            self.total_user_len,
            self.total_assistant_len,
        )
