"""How :class:`~llamaindex_gatekeeper.memory.GatekeeperMemory` chooses what ``get`` returns
(kept apart so the memory module stays about the ``BaseMemory`` contract).

Sync ``get`` reads and selects under the memory's lock; with an embedder, ``aget``
reads under the lock in a worker thread and awaits the selection's embedding calls
with the lock released, then drops from the earlier turns any message of the
returned current turn (a ``put`` may have answered it meanwhile).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from context_gatekeeper import Message, Transcript, TranscriptGate
from context_gatekeeper.integration import BoundedCache, MessageTurn, group_turns

__all__ = ["COUNTS", "SelectingMixin"]

COUNTS: BoundedCache[tuple[Callable[[str], int], str], int] = BoundedCache(maxsize=20_000)
"""Token counts by ``(counter, text)``, shared by every memory using one counter: a message
is counted once, not on every ``get``."""


def _counted(count: Callable[[str], int], text: str) -> int:
    return COUNTS.get_or_compute((count, text), lambda: count(text))


class SelectingMixin:
    """``_select`` / ``_aselect`` for the memory; needs ``_lock``, ``_transcript``,
    ``_gate``, ``_count`` and ``token_limit``."""

    _lock: Any
    _transcript: Transcript
    _gate: TranscriptGate
    _count: Callable[[str], int]
    token_limit: int

    def _plan(self, input_text: str | None, reserved: int) -> tuple[Any, ...]:
        """Under the lock: system messages, turns, the current turn, the query, the tail
        and the budget left for earlier turns."""
        system, turns = group_turns(self._transcript.messages)
        current: MessageTurn | None = None
        if turns and (turns[-1].is_open or input_text is None):
            current = turns[-1]
        query = input_text or (current.texts[0] if current else None)
        tail = list(current.messages) if current else []
        budget = max(0, self.token_limit - reserved - self._cost(tail))  # an open turn over the limit leaves none
        return system, turns, current, query, tail, budget

    def _select(self, input_text: str | None, reserved: int) -> list[Message]:
        with self._lock:
            system, turns, current, query, tail, budget = self._plan(input_text, reserved)
            if query is None or not query.strip():
                earlier = self._recent(system, turns[:-1] if current else turns, budget)
            else:
                earlier = self._gated(query, budget, current, self._cost(tail))
            return earlier + tail

    async def _aselect(self, input_text: str | None, reserved: int) -> list[Message]:
        """:meth:`_select` with the embedding awaited (the lock is held only to read)."""

        def plan() -> tuple[Any, ...]:
            with self._lock:
                return self._plan(input_text, reserved)

        system, turns, current, query, tail, budget = await asyncio.to_thread(plan)
        if query is None or not query.strip():
            return self._recent(system, turns[:-1] if current else turns, budget) + tail
        earlier = await self._agated(query, budget, current, self._cost(tail))
        ids = {m.id for m in tail}  # a put that landed meanwhile may have closed the current turn
        return [m for m in earlier if m.id not in ids] + tail

    def _gated(self, query: str, budget: int, current: MessageTurn | None, current_cost: int) -> list[Message]:
        """Leading system messages and the selected earlier turns, within ``budget``.

        An answered current turn is indexed like any other: the gate may select it (it
        matches its own question), paying for it from the budget, so its cost is handed
        back first; the caller returns it once, at the end.
        """
        if current is None or current.is_open:
            return self._gate.select_messages(query, include_open=False, token_budget=budget)
        ids = {m.id for m in current.messages}
        selected = self._gate.select_messages(query, include_open=False, token_budget=budget + current_cost)
        if not ids & {m.id for m in selected}:  # not picked: the others must fit without it
            selected = self._gate.select_messages(query, include_open=False, token_budget=budget)
        return [m for m in selected if m.id not in ids]

    async def _agated(self, query: str, budget: int, current: MessageTurn | None, current_cost: int) -> list[Message]:
        """:meth:`_gated` with the embedding awaited."""
        gate = self._gate
        if current is None or current.is_open:
            return await gate.aselect_messages(query, include_open=False, token_budget=budget)
        ids = {m.id for m in current.messages}
        selected = await gate.aselect_messages(query, include_open=False, token_budget=budget + current_cost)
        if not ids & {m.id for m in selected}:
            selected = await gate.aselect_messages(query, include_open=False, token_budget=budget)
        return [m for m in selected if m.id not in ids]

    def _recent(self, system: list[Message], turns: list[MessageTurn], budget: int) -> list[Message]:
        """No text to gate on: the system messages and the latest whole turns that fit."""
        budget -= self._cost(system)
        kept: list[MessageTurn] = []
        for turn in reversed(turns):
            cost = self._cost(turn.messages)
            if cost > budget:
                break
            kept.append(turn)
            budget -= cost
        return list(system) + [m for turn in reversed(kept) for m in turn.messages]

    def _cost(self, messages: Sequence[Message]) -> int:
        overhead, count = self._gate.gatekeeper.message_overhead, self._count
        return sum(_counted(count, m.content) + overhead for m in messages)

