"""Shared helpers for the LangChain adapter tests: scripted chat models and a recorder of
what a model actually receives (a callback handler, so nothing is patched)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

REDIS_1 = ("How long should a Redis lock TTL be?", "Longer than the longest job holding the lock.")
ESPRESSO = ("By the way, what espresso grind suits a moka pot?", "Medium-fine, a little coarser than espresso.")
REDIS_2 = ("How should the Redis lock renewal watchdog work?", "Extend the lock TTL from a watchdog thread.")
REDIS_QUERY = "What Redis lock TTL for a 30 second job?"
"""Needs REDIS_1 and REDIS_2, not ESPRESSO (with the three turns in that order)."""
ESPRESSO_QUERY = "Which espresso beans for a moka pot?"
"""Needs ESPRESSO only."""


class Recorder(BaseCallbackHandler):
    """Records the message list of every chat-model call it sees."""

    run_inline = True

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.calls.extend(list(batch) for batch in messages)

    @property
    def last(self) -> list[BaseMessage]:
        """The messages of the latest call."""
        return self.calls[-1]

    def last_text(self) -> str:
        """Every text of the latest call, joined."""
        return "\n".join(m.text for m in self.last)


def answers(*texts: str) -> FakeMessagesListChatModel:
    """A chat model that answers with ``texts`` in order."""
    return FakeMessagesListChatModel(responses=[AIMessage(t) for t in texts])


def numbered_answers(n: int = 20) -> FakeMessagesListChatModel:
    """A chat model answering "answer 0", "answer 1", ..."""
    return answers(*(f"answer {i}" for i in range(n)))


def patch_reply(*operations: dict[str, Any]) -> FakeMessagesListChatModel:
    """An editing chat model whose single answer is a patch with ``operations``."""
    return answers(json.dumps({"operations": list(operations)}))


def check_tool_pairs(messages: list[BaseMessage]) -> None:
    """Every tool result right after the call it answers (a valid or an invalid call), and every call answered."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"orphan tool result {message.tool_call_id}"
            open_calls.discard(message.tool_call_id)
            continue
        assert not open_calls, f"calls without results: {open_calls}"
        if isinstance(message, AIMessage):
            open_calls = {c["id"] for c in [*message.tool_calls, *message.invalid_tool_calls]}
    assert not open_calls


def check_steps(messages: list[BaseMessage]) -> None:
    """Every tool call answered before the next AI message, and every result answering a call
    of the last AI message before it (a message a tool delivered may stand between results,
    as LangGraph stores parallel calls: :func:`check_tool_pairs` wants them adjacent)."""
    calls: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            assert not calls, f"calls without results: {calls}"
            calls = {c["id"] for c in message.tool_calls}
        elif isinstance(message, ToolMessage):
            assert message.tool_call_id in calls, f"orphan tool result {message.tool_call_id}"
            calls.discard(message.tool_call_id)
    assert not calls, f"calls without results: {calls}"


class FailsOnce(GenericFakeChatModel):
    """Fails its first call, invoke or stream, with a transient network error; answers after."""

    calls: int = 0

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("transient")
        return super()._generate(*args, **kwargs)

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("transient")
        yield from super()._stream(*args, **kwargs)
