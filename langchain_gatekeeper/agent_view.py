"""The gated view of an agent's messages, with a gatekeeper kept per thread.

:class:`GatedView` turns the messages a model call would receive into the ones it
needs: pinned content (leading system messages, summary messages) first, then the
earlier turns a :class:`~context_gatekeeper.ContextGatekeeper` selects for the
current query, then the current turn whole (the last human message and everything
after it: the agent's tool loop is never gated).  Turns group an AI tool call with
its ToolMessages (:func:`~context_gatekeeper.transcript_gate.group_turns`), so a
pair is never split.

Per thread, the gatekeeper is updated incrementally: turns are keyed by the id of
their first message, so a new call indexes only new or changed turns (an edit of
the thread re-indexes the turns it touched); a reordering rebuilds that thread's
index.  Threads are kept in a bounded LRU cache.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from context_gatekeeper import ContextGatekeeper, Message
from context_gatekeeper.transcript_gate import MessageTurn, group_turns

from .threads import is_edit_record

__all__ = ["GatedView", "is_summary", "current_turn_start"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def is_summary(message: BaseMessage) -> bool:
    """A summary message (LangChain's SummarizationMiddleware marks them)."""
    return message.additional_kwargs.get("lc_source") == "summarization"


def current_turn_start(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the last human message that is not a summary (None when there is none)."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, HumanMessage) and not is_summary(message):
            return i
    return None


def _indexed_text(message: BaseMessage) -> str:
    """What selection reads: the text, plus tool-call names and arguments."""
    text = message.text
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = " ".join(f"{c['name']} {json.dumps(c.get('args', {}), ensure_ascii=False)}" for c in message.tool_calls)
        text = f"{text}\n{calls}" if text else calls
    return text


class _ThreadIndex:
    """One thread's gatekeeper and the turn keys it indexes, in order."""

    def __init__(self, gatekeeper: ContextGatekeeper) -> None:
        self.gatekeeper = gatekeeper
        self.lock = threading.Lock()
        self.ids: dict[str, int] = {}
        self.texts: dict[str, tuple[str, str, tuple[str, ...]]] = {}
        self.order: list[str] = []

    def sync(self, turns: Sequence[MessageTurn]) -> dict[int, str]:
        """Bring the gatekeeper in step with ``turns``; returns gatekeeper turn id -> turn key."""
        gk = self.gatekeeper
        keys = [t.key for t in turns]
        present = set(keys)
        if [k for k in self.order if k in present] != [k for k in keys if k in self.ids]:
            gk.clear()  # a turn moved: rebuild this thread's index
            self.ids.clear()
            self.texts.clear()
        for key in [k for k in self.ids if k not in present]:
            gk.remove_turn(self.ids.pop(key))
            del self.texts[key]
        previous: int | None = None
        for turn in turns:
            user, assistant, tools = turn.texts
            if not (user.strip() or assistant.strip() or any(t.strip() for t in tools)):
                user = "[no text]"
            texts = (user, assistant, tools)
            turn_id = self.ids.get(turn.key)
            if turn_id is None:
                turn_id = gk.insert_turn(previous, user, assistant, tool_texts=tools)
                self.ids[turn.key] = turn_id
            elif self.texts[turn.key] != texts:
                gk.replace_turn(turn_id, user, assistant, tool_texts=tools)
            self.texts[turn.key] = texts
            previous = turn_id
        self.order = keys
        return {turn_id: key for key, turn_id in self.ids.items()}


class GatedView:
    """Builds gated message lists, keeping one incremental index per thread.

    Args:
        make_gatekeeper: builds a fresh, configured gatekeeper for a new thread.
        max_threads: how many threads' indexes to keep (least recently used go first).
    """

    def __init__(self, make_gatekeeper: Callable[[], ContextGatekeeper], *, max_threads: int = 1024) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {max_threads!r}")
        self._make = make_gatekeeper
        self._max = max_threads
        self._threads: OrderedDict[Any, _ThreadIndex] = OrderedDict()
        self._lock = threading.Lock()

    def _index(self, thread: Any) -> _ThreadIndex:
        with self._lock:
            index = self._threads.get(thread)
            if index is None:
                index = self._threads[thread] = _ThreadIndex(self._make())
                while len(self._threads) > self._max:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(thread)
            return index

    def gatekeeper(self, thread: Any) -> ContextGatekeeper:
        """The gatekeeper kept for ``thread`` (for inspection, e.g. ``explain``)."""
        return self._index(thread).gatekeeper

    def view(self, messages: Sequence[BaseMessage], *, thread: Any = None, system_prompt: str | None = None) -> list[BaseMessage]:
        """The gated list for ``messages`` (a model request's messages, system prompt excluded)."""
        start = current_turn_start(messages)
        if start is None:
            return list(messages)
        query = messages[start].text
        if not query.strip():
            return list(messages)
        earlier, current = messages[:start], list(messages[start:])
        pinned: list[BaseMessage] = []
        summaries: list[str] = []
        rest: list[BaseMessage] = []
        for message in earlier:
            if is_summary(message):
                pinned.append(message)
                summaries.append(message.text)
            elif isinstance(message, SystemMessage) and not rest:
                pinned.append(message)
            elif not is_edit_record(message):
                rest.append(message)
        lite = [
            Message(m.id or f"#{i}", _ROLES.get(m.type, "user"), _indexed_text(m))  # type: ignore[arg-type]
            for i, m in enumerate(rest)
        ]
        by_id = {lm.id: m for lm, m in zip(lite, rest)}
        _, turns = group_turns(lite)
        index = self._index(thread)
        with index.lock:
            keys = index.sync(turns)
            gk = index.gatekeeper
            pinned_text = "\n".join(filter(None, [system_prompt, *(m.text for m in pinned if isinstance(m, SystemMessage))]))
            if (pinned_text or None) != gk.system_prompt:
                gk.system_prompt = pinned_text or None
            summary = "\n".join(summaries) or None
            if summary != gk.summary:
                gk.summary = summary
            selection = gk.explain(query)
        by_key = {t.key: t for t in turns}
        kept: list[BaseMessage] = []
        for turn_id in selection.turn_ids:
            turn = by_key[keys[turn_id]]
            if not kept and turn.messages[0].role != "user":
                continue  # the view starts on a user message
            kept.extend(by_id[m.id] for m in turn.messages)
        return pinned + kept + current
