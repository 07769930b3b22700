"""Shared helpers for the LlamaIndex adapter tests: scripted LLMs that record what they receive.

:class:`ScriptedLLM` is a ``CustomLLM`` (so chat engines, query engines and ReActAgent
reach it through ``complete`` / ``stream_complete``); :func:`function_calling_llm` is a
``MockFunctionCallingLLM`` for FunctionAgent.  Both record every prompt; nothing here
touches the network.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.mock import MockFunctionCallingLLM

from context_gatekeeper.testing import ScriptedModel
from llamaindex_gatekeeper import GatekeeperMemory

REDIS_1 = ("How long should a Redis lock TTL be?", "Longer than the longest job holding the lock.")
ESPRESSO = ("By the way, what espresso grind suits a moka pot?", "Medium-fine, a little coarser than espresso.")
REDIS_2 = ("How should the Redis lock renewal watchdog work?", "Extend the lock TTL from a watchdog thread.")
REDIS_QUERY = "What Redis lock TTL for a 30 second job?"
"""Needs REDIS_1 and REDIS_2, not ESPRESSO (with the three turns in that order)."""
ESPRESSO_QUERY = "Which espresso beans for a moka pot?"
OFF_TOPIC_MARKERS = ("moka", "Medium-fine")
"""Text of the ESPRESSO turn that must not reach the model on a Redis question."""

PYDANTIC_DEPRECATIONS = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]
"""Warnings llama-index / workflows raise through pydantic's deprecated attributes; nothing of ours."""

_FOLLOW_UP = re.compile(r"(?:<Follow Up Message>\s*|Follow Up Input:\s*)(.+?)\s*(?:\n|$)", re.S)


class ScriptedLLM(CustomLLM):
    """A completion LLM that answers from a script and records every prompt it gets.

    Condense calls ("... standalone question ...") are answered with the follow-up
    message itself and do not use up the script.  Once the script runs out it answers
    ``"answer N"``.
    """

    context_window: int = 3900
    _replies: deque = PrivateAttr(default_factory=deque)
    _prompts: list = PrivateAttr(default_factory=list)
    _wrap: Callable[[str], str] | None = PrivateAttr(default=None)

    def __init__(self, replies: Iterable[str] = (), wrap: Callable[[str], str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._replies = deque(replies)
        self._wrap = wrap

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=256, model_name="scripted-llm")

    @property
    def prompts(self) -> list[str]:
        """Every prompt received, in order."""
        return self._prompts

    def enqueue(self, *replies: str) -> "ScriptedLLM":
        self._replies.extend(replies)
        return self

    def _answer(self, prompt: str) -> str:
        self._prompts.append(prompt)
        if "standalone question" in prompt.lower():
            found = _FOLLOW_UP.findall(prompt)
            return found[-1] if found else prompt
        text = self._replies.popleft() if self._replies else f"answer {len(self._prompts)}"
        return self._wrap(text) if self._wrap else text

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._answer(prompt))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = self._answer(prompt)

        def gen() -> CompletionResponseGen:
            so_far = ""
            for word in text.split(" "):
                delta = word if not so_far else " " + word
                so_far += delta
                yield CompletionResponse(text=so_far, delta=delta)

        return gen()


def react(text: str) -> str:
    """A ReAct final answer around ``text``."""
    return f"Thought: I can answer without using any more tools.\nAnswer: {text}"


class CallRecorder:
    """A response generator for ``MockFunctionCallingLLM``: scripted replies, recorded inputs.

    A reply is a str (an answer) or a ``ToolCallBlock`` list (a tool call).
    """

    def __init__(self, replies: Iterable[Any] = ()) -> None:
        self.replies: deque = deque(replies)
        self.calls: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.calls.append([m.model_copy(deep=True) for m in messages])
        reply = self.replies.popleft() if self.replies else f"answer {len(self.calls)}"
        if isinstance(reply, list):
            return ChatMessage(role="assistant", blocks=reply)
        return ChatMessage(role="assistant", content=reply)

    def text(self, index: int = -1) -> str:
        """Every message's text of one call, joined."""
        return "\n".join(str(m.content or "") + json.dumps(m.model_dump(mode="json")["blocks"]) for m in self.calls[index])


def function_calling_llm(recorder: CallRecorder) -> MockFunctionCallingLLM:
    """A function-calling LLM answering through ``recorder``."""
    return MockFunctionCallingLLM(response_generator=recorder)


def tool_call(call_id: str, name: str, **kwargs: Any) -> list[ToolCallBlock]:
    """An assistant reply that calls one tool."""
    return [ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=kwargs)]


def small_index() -> VectorStoreIndex:
    """A tiny offline index (MockEmbedding) about Redis locks; nothing about coffee."""
    docs = [
        Document(text="Redis locks expire when their TTL runs out; renew them from a watchdog."),
        Document(text="Fencing tokens stop a stale lock holder from writing after its lease ended."),
    ]
    return VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))


def patch(*operations: dict[str, Any]) -> ScriptedModel:
    """A core-protocol editing model whose single reply is a patch with ``operations``."""
    return ScriptedModel([json.dumps({"operations": list(operations)})])


def user(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.USER, content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def contents(messages: list[ChatMessage]) -> list[str]:
    return [str(m.content) for m in messages]


def three_turns(memory: GatekeeperMemory) -> None:
    """Redis, espresso, Redis again: a Redis query needs turns 1 and 3, not 2."""
    for question, answer in (REDIS_1, ESPRESSO, REDIS_2):
        memory.put_messages([user(question), assistant(answer)])


def lookup(topic: str) -> str:
    """Look up notes on a topic."""
    return "Watchdog notes: renew every TTL/3 seconds."


def memory_through_restored_context(
    serializer: Any, memory: GatekeeperMemory | None = None, trusted: tuple[Any, ...] = ()
) -> GatekeeperMemory:
    """A FunctionAgent answers REDIS_1 with ``memory`` (default: a fresh in-memory one), its
    Context goes through ``serializer`` and back (inside ``GatekeeperMemory.trusted_stores(
    *trusted)``), ESPRESSO is asked on the restored Context; returns the memory the
    restored Context holds."""
    from workflows import Context

    recorder = CallRecorder([REDIS_1[1], ESPRESSO[1]])
    agent = FunctionAgent(tools=[lookup], llm=function_calling_llm(recorder))
    memory = memory if memory is not None else GatekeeperMemory.from_defaults(token_limit=2000)

    async def scenario() -> GatekeeperMemory:
        ctx = Context(agent)
        await agent.run(user_msg=REDIS_1[0], memory=memory, ctx=ctx)
        data = json.loads(json.dumps(ctx.to_dict(serializer=serializer)))  # as stored between requests
        with GatekeeperMemory.trusted_stores(*trusted):  # the state is decoded when the run starts
            restored = Context.from_dict(agent, data, serializer=serializer)
            await agent.run(user_msg=ESPRESSO[0], ctx=restored)
        return await restored.store.get("memory")

    return asyncio.run(scenario())
