"""Counting doubles for incremental-indexing tests: a real ContextGatekeeper that counts how its turns
are changed, and a token counter that records what it counts."""

from __future__ import annotations

from collections import Counter
from typing import Any

from context_gatekeeper import ContextGatekeeper


class Calls(Counter):  # type: ignore[type-arg]
    """Counts per kind of change; equal to any mapping with the same non-zero counts."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, dict):
            return NotImplemented
        return {k: v for k, v in self.items() if v} == {k: v for k, v in other.items() if v}

    __hash__ = None  # type: ignore[assignment]


class CountingGatekeeper(ContextGatekeeper):
    """A real gatekeeper that counts the index changes made to it (``calls``)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls = Calls()

    def insert_turn(self, *args: Any, **kwargs: Any) -> int:
        self.calls["insert"] += 1
        return super().insert_turn(*args, **kwargs)

    def insert_turns(self, after_id: int | None, turns: Any) -> list[int]:
        turns = list(turns)
        self.calls["insert"] += len(turns)  # a turn inserted, alone or with others
        return super().insert_turns(after_id, turns)

    def replace_turn(self, *args: Any, **kwargs: Any) -> None:
        self.calls["replace"] += 1
        super().replace_turn(*args, **kwargs)

    def replace_turns(self, texts: Any) -> None:
        self.calls["replace"] += len(texts)  # a turn replaced, alone or with others
        super().replace_turns(texts)

    def remove_turns(self, turn_ids: Any) -> Any:  # remove_turn goes through it
        turn_ids = list(turn_ids)
        self.calls["remove"] += len(turn_ids)  # a turn removed, alone or with others
        return super().remove_turns(turn_ids)

    def clear(self) -> None:
        self.calls["clear"] += 1
        super().clear()


class CountingCounter:
    """A token counter (words as tokens) that records every text it counts: ``texts`` in
    order, ``seen`` per text."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.seen: Counter[str] = Counter()

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        self.seen[text] += 1
        return len(text.split())
