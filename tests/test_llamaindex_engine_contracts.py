"""LlamaIndex's chat-engine, agent and postprocessor contracts, held by the adapter.

Every chat engine (``SimpleChatEngine``, ``ContextChatEngine``, ``CondensePlusContextChatEngine``,
``CondenseQuestionChatEngine``) with ``GatekeeperMemory``: sync, async, streaming and async
streaming, a ``QueryBundle`` where upstream accepts one; a ``FunctionAgent`` with a tool
call, streamed events and a pickled ``Context``; ``GatekeeperNodePostprocessor`` with
``query_bundle`` / ``query_str`` / no query / no nodes.  LLMs are scripted (``MockLLM``
echoes its prompt; ``ScriptedLLM`` and ``MockFunctionCallingLLM`` record what they get).
The memory's own contracts: ``test_llamaindex_contracts.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    CondenseQuestionChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.llms.mock import MockLLM
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from li_support import (
    ESPRESSO,
    OFF_TOPIC_MARKERS,
    PYDANTIC_DEPRECATIONS,
    REDIS_1,
    REDIS_2,
    REDIS_QUERY,
    CallRecorder,
    ScriptedLLM,
    assistant,
    contents,
    function_calling_llm,
    lookup,
    memory_through_restored_context,
    small_index,
    three_turns,
    tool_call,
    user,
)
from llamaindex_gatekeeper import GatekeeperMemory, GatekeeperNodePostprocessor

pytestmark = PYDANTIC_DEPRECATIONS


# -- chat engines ---------------------------------------------------------------------------


def _prompts_since(llm: ScriptedLLM, mark: int) -> str:
    return "\n".join(llm.prompts[mark:])


def _engine(kind: str, llm: Any, memory: GatekeeperMemory) -> Any:
    if kind == "simple":
        return SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    retriever = small_index().as_retriever(similarity_top_k=1)
    post = [GatekeeperNodePostprocessor(token_budget=200)]
    if kind == "context":
        return ContextChatEngine.from_defaults(retriever, llm=llm, memory=memory, node_postprocessors=post)
    if kind == "condense_plus_context":
        return CondensePlusContextChatEngine.from_defaults(retriever, llm=llm, memory=memory, node_postprocessors=post)
    query_engine = small_index().as_query_engine(llm=llm, similarity_top_k=1, node_postprocessors=post)
    return CondenseQuestionChatEngine.from_defaults(query_engine, llm=llm, memory=memory)


ENGINES = ["simple", "context", "condense_plus_context", "condense_question"]


async def _ask(engine: Any, message: Any, mode: str) -> str:
    if mode == "chat":
        return str(engine.chat(message))
    if mode == "achat":
        return str(await engine.achat(message))
    if mode == "stream":
        response = engine.stream_chat(message)
        return "".join(response.response_gen)
    response = await engine.astream_chat(message)
    return "".join([token async for token in response.async_response_gen()])


@pytest.mark.parametrize("mode", ["chat", "achat", "stream", "astream"])
@pytest.mark.parametrize("kind", ENGINES)
def test_every_engine_sends_the_relevant_turns_and_records_the_exchange(kind: str, mode: str) -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000, session_id=kind)
    three_turns(memory)
    llm = ScriptedLLM(["Keep the TTL above the job time."])
    engine = _engine(kind, llm, memory)
    answer = asyncio.run(_ask(engine, REDIS_QUERY, mode))
    assert answer.strip() == "Keep the TTL above the job time."
    sent = _prompts_since(llm, 0)
    assert REDIS_1[1] in sent and REDIS_2[1] in sent  # the related turns reach the LLM
    for marker in OFF_TOPIC_MARKERS:
        assert marker not in sent  # the unrelated one does not (ChatMemoryBuffer would send it)
    history = memory.get_all()
    assert contents(history[-2:]) == [REDIS_QUERY, "Keep the TTL above the job time."]
    assert len(history) == 8 and len(engine.chat_history) == 8
    engine.reset()
    assert memory.get_all() == []


@pytest.mark.parametrize("mode", ["chat", "achat", "stream", "astream"])
@pytest.mark.parametrize("kind", ["context", "condense_plus_context"])
def test_retrieving_engines_take_a_query_bundle(kind: str, mode: str) -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000, session_id=kind)
    three_turns(memory)
    llm = MockLLM()  # echoes its prompt
    engine = _engine(kind, llm, memory)
    query = QueryBundle(REDIS_QUERY)
    answer = asyncio.run(_ask(engine, query, mode))
    assert REDIS_QUERY in answer and REDIS_1[1] in answer
    assert "moka" not in answer
    engine.reset()
    answer = asyncio.run(_ask(engine, QueryBundle("Hello World through QueryBundle"), mode))
    assert "Hello World through QueryBundle" in answer
    assert len(engine.chat_history) == 2
    if kind == "context":  # stored as its text (CondensePlusContext stores ChatMessage(content=bundle),
        # which LlamaIndex turns into a message with no blocks, whatever the memory)
        assert str(engine.chat_history[0].content) == "Hello World through QueryBundle"


def test_mock_llm_engine_sees_a_related_earlier_turn_and_not_an_unrelated_one() -> None:
    """Upstream's engine tests expect every earlier message in the prompt; with gating only
    a related one comes (the 'Hello World!' then 'how far is the moon' pair is unrelated).
    (Upstream's own 'What is the capital of the moon?' brings two content words after a
    one-turn chat: the fitted switch score reads so little as a follow-up, score -0.31.)"""
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=GatekeeperMemory.from_defaults())
    assert "Hello World!" in str(engine.chat("Hello World!"))
    assert "Hello World!" not in str(engine.chat("How far is the moon from the earth in kilometres?"))
    assert "far is the moon" in str(engine.chat("And how far is the moon, again?"))
    assert len(engine.chat_history) == 6


def test_chat_history_argument_replaces_the_state() -> None:
    memory = GatekeeperMemory.from_defaults()
    engine = _engine("simple", MockLLM(), memory)
    engine.chat("Which Redis lock TTL?", chat_history=[user(REDIS_1[0]), assistant(REDIS_1[1])])
    assert contents(memory.get_all())[:2] == list(REDIS_1)
    assert [r.kind for r in memory.history()] == ["set", "append", "append"]


# -- agent workflow ------------------------------------------------------------------------


def test_a_function_agent_uses_the_memory_with_a_tool_call_and_streams_events() -> None:
    recorder = CallRecorder([REDIS_1[1], ESPRESSO[1], tool_call("call-1", "lookup", topic="redis"), REDIS_2[1]])
    agent = FunctionAgent(tools=[lookup], llm=function_calling_llm(recorder))
    memory = GatekeeperMemory.from_defaults(token_limit=2000)

    async def scenario() -> list[str]:
        for question in (REDIS_1[0], ESPRESSO[0]):
            await agent.run(user_msg=question, memory=memory)
        handler = agent.run(user_msg=REDIS_2[0], memory=memory)
        kinds = [type(event).__name__ async for event in handler.stream_events()]
        await handler
        return kinds

    kinds = asyncio.run(scenario())
    assert "ToolCallResult" in kinds
    last = "\n".join(recorder.text(i) for i in range(2, len(recorder.calls)))
    assert REDIS_1[1] in last and "moka" not in last  # gated on the Redis question
    roles = [m.role.value for m in memory.get_all()]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "tool", "assistant"]
    assert contents(memory.get_all())[-1] == REDIS_2[1]


def test_an_agent_context_pickles_with_the_memory() -> None:
    from workflows.context.serializers import PickleSerializer

    restored_memory = memory_through_restored_context(PickleSerializer())
    assert isinstance(restored_memory, GatekeeperMemory)
    assert contents(restored_memory.get_all()) == [*REDIS_1, *ESPRESSO]


# -- node postprocessor ------------------------------------------------------------------------


def _nodes() -> list[NodeWithScore]:
    texts = [
        "Redis locks expire when their TTL runs out.",
        "Renew a Redis lock from a watchdog thread before the TTL ends.",
        "A moka pot wants a medium-fine grind.",
    ]
    return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0 - i / 10) for i, t in enumerate(texts)]


QUERY = "How do I renew a Redis lock before its TTL runs out?"


@pytest.mark.parametrize(
    "call",
    [
        lambda post, nodes: post.postprocess_nodes(nodes, query_bundle=QueryBundle(QUERY)),
        lambda post, nodes: post.postprocess_nodes(nodes, query_str=QUERY),
        lambda post, nodes: post.postprocess_nodes(nodes, query_bundle=QueryBundle(QueryBundle(QUERY))),  # type: ignore[arg-type]
        lambda post, nodes: asyncio.run(post.apostprocess_nodes(nodes, query_bundle=QueryBundle(QUERY))),
        lambda post, nodes: asyncio.run(post.apostprocess_nodes(nodes, query_str=QUERY)),
    ],
    ids=["query_bundle", "query_str", "nested bundle", "async query_bundle", "async query_str"],
)
def test_postprocessor_reads_the_query_in_every_shape(call: Any) -> None:
    nodes = _nodes()
    kept = call(GatekeeperNodePostprocessor(), nodes)
    assert [n.node.node_id for n in kept] == ["n0", "n1"]
    assert all(a is b for a, b in zip(kept, nodes))  # the very objects, in retrieval order


def test_postprocessor_without_a_query_keeps_the_nodes_in_order_within_the_budget() -> None:
    nodes = _nodes()
    assert GatekeeperNodePostprocessor().postprocess_nodes(nodes) == nodes
    cost = GatekeeperNodePostprocessor()._count(nodes[0].node.get_content())
    assert GatekeeperNodePostprocessor(token_budget=cost).postprocess_nodes(nodes) == nodes[:1]
    assert GatekeeperNodePostprocessor(fallback=False).postprocess_nodes(nodes) == []


def test_postprocessor_with_no_nodes_returns_none_and_both_queries_are_refused() -> None:
    post = GatekeeperNodePostprocessor()
    assert post.postprocess_nodes([], query_str=QUERY) == []
    assert post.postprocess_nodes([]) == []
    assert asyncio.run(post.apostprocess_nodes([], query_bundle=QueryBundle(QUERY))) == []
    with pytest.raises(ValueError):
        post.postprocess_nodes(_nodes(), query_bundle=QueryBundle(QUERY), query_str=QUERY)
