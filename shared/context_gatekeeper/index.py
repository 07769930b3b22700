"""The incremental inverted index over turns.

Adding or removing a turn costs time proportional to that turn's anchors;
looking up an anchor touches only its postings.  Nothing here knows about
gating or budgets.
"""

from __future__ import annotations

from dataclasses import dataclass

from .anchors import TextAnchors

__all__ = ["IndexedTurn", "AnchorIndex"]


@dataclass(frozen=True)
class IndexedTurn:
    """The anchors of one turn, split by side.

    Attributes:
        user: anchors of the user message.
        assistant: anchors of the assistant answer and any tool messages.
        anchors: every distinct anchor of the turn (user and assistant).
    """

    user: TextAnchors
    assistant: TextAnchors
    anchors: frozenset[str]

    @classmethod
    def of(cls, user: TextAnchors, assistant: TextAnchors) -> "IndexedTurn":
        return cls(user, assistant, frozenset(user.counts) | frozenset(assistant.counts))


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

    def add(self, turn_id: int, turn: IndexedTurn) -> None:
        """Index a turn under ``turn_id`` (which must not be indexed yet)."""
        if turn_id in self.turns:
            raise ValueError(f"turn {turn_id} is already indexed")
        self.turns[turn_id] = turn
        self.total_user_len += turn.user.length
        self.total_assistant_len += turn.assistant.length
        user_counts, assistant_counts = turn.user.counts, turn.assistant.counts
        postings = self.postings
        for anchor in turn.anchors:
            entry = (user_counts.get(anchor, 0), assistant_counts.get(anchor, 0))
            bucket = postings.get(anchor)
            if bucket is None:
                postings[anchor] = {turn_id: entry}
            else:
                bucket[turn_id] = entry

    def remove(self, turn_id: int) -> IndexedTurn:
        """Drop a turn from the index and return what it held."""
        turn = self.turns.pop(turn_id)
        self.total_user_len -= turn.user.length
        self.total_assistant_len -= turn.assistant.length
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
