"""What LangChain's own agent tests expect of ``create_agent``, with GatekeeperMiddleware in it.

Written here, not copied: each test runs the same scripted agent with and without the
middleware and checks that the contract upstream tests hold either way: invalid tool
calls (an unknown tool, bad arguments, malformed JSON) answered by an error result
paired with its call; ``stream`` in "messages" and "values" modes giving the same
chunks and snapshots; two threads never mixed; and ``SummarizationMiddleware`` beside
ours (its summary pinned, our gate still narrowing what the model sees).  The one
intended difference is what the model is sent: fewer earlier turns.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.checkpoint.memory import InMemorySaver

from context_gatekeeper import HistoryError
from context_gatekeeper.testing import ScriptedModel
from langchain_gatekeeper import GatekeeperMiddleware, edit_thread, thread_history, undo_thread
from langchain_gatekeeper.threads import TURN_KEY
from lc_support import check_tool_pairs

from test_lc_middleware import (
    COFFEE, COFFEE_ANSWER, FOLLOW_UP, REDIS, REDIS_ANSWER, ToolCallingFake, call, lookup_job_duration, swap_editor, texts,
)

CONFIG = {"configurable": {"thread_id": "contracts"}}
PLANTS = "Which office plants survive with little light?"
PLANTS_ANSWER = "Snake plants and ZZ plants cope with little light."


class StreamingFake(ToolCallingFake):
    """The scripted fake, streamed word by word; a reply's tool calls ride on its last chunk."""

    def _stream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        message = self._generate(messages, stop=stop, **kwargs).generations[0].message
        words = re.findall(r"\S+\s*", message.text) or [""]
        for i, word in enumerate(words):
            calls = [
                {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": n, "type": "tool_call_chunk"}
                for n, c in enumerate(message.tool_calls)
            ] if i == len(words) - 1 else []
            yield ChatGenerationChunk(message=AIMessageChunk(content=word, tool_call_chunks=calls))


def agent(replies: list[AIMessage], ours: bool, *, others: list[Any] = (), editor: Any = None, fake: type = ToolCallingFake) -> tuple[Any, ToolCallingFake]:
    model = fake(messages=iter(replies))
    middleware = [*others, GatekeeperMiddleware(model=editor or ScriptedModel([]))] if ours else list(others)
    return create_agent(model, [lookup_job_duration], middleware=middleware, checkpointer=InMemorySaver()), model


def shape(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    """What a message list says, without the ids a run makes up."""
    return [
        (m.type, m.text, getattr(m, "tool_call_id", None), getattr(m, "status", None),
         tuple(c["name"] for c in getattr(m, "tool_calls", [])), m.additional_kwargs.get("lc_source"))
        for m in messages
    ]


def run_both(replies: list[AIMessage], questions: list[str], **options: Any) -> dict[bool, tuple[Any, ToolCallingFake]]:
    runs = {}
    for ours in (False, True):
        graph, model = agent(list(replies), ours, **options)
        for question in questions:
            graph.invoke({"messages": [HumanMessage(question)]}, CONFIG)
        runs[ours] = graph, model
    return runs


# -- invalid tool calls ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bad_call", "error"),
    [
        (call("no_such_tool", {"job": "export"}, "c1"), "no_such_tool is not a valid tool, try one of [lookup_job_duration]"),
        (call("lookup_job_duration", {"wrong": 1}, "c1"), "Error invoking tool 'lookup_job_duration'"),
    ],
    ids=["unknown-tool", "bad-arguments"],
)
def test_a_bad_tool_call_gets_an_error_result_and_the_model_a_second_chance(bad_call: AIMessage, error: str) -> None:
    runs = run_both([bad_call, AIMessage("Sorry, let me answer directly.")], [REDIS])
    for ours, (graph, model) in runs.items():
        stored = graph.get_state(CONFIG).values["messages"]
        assert [m.type for m in stored] == ["human", "ai", "tool", "ai"], ours
        assert stored[2].status == "error" and error in stored[2].text
        assert len(model.received) == 2 and shape(model.received[1]) == shape(stored[:3])
        check_tool_pairs(model.received[1])
    assert shape(runs[True][0].get_state(CONFIG).values["messages"]) == shape(runs[False][0].get_state(CONFIG).values["messages"])


def test_malformed_tool_call_json_is_answered_in_the_next_request_and_never_orphaned() -> None:
    malformed = AIMessage(content="", invalid_tool_calls=[
        {"name": "lookup_job_duration", "args": "{job: nightly", "id": "bad1", "error": "invalid JSON", "type": "invalid_tool_call"}
    ])
    replies = [AIMessage(REDIS_ANSWER), malformed, AIMessage("Renew it every 30 seconds."), AIMessage("Medium-fine.")]
    runs = run_both(replies, [REDIS, COFFEE, FOLLOW_UP, "And for a moka pot, what grind size for espresso-like coffee?"])
    plain, gated = runs[False][1].received, runs[True][1].received
    # upstream: the next request carries an error result for the malformed call, right after it
    assert [m.type for m in plain[2][-3:]] == ["ai", "tool", "human"] and plain[2][-2].status == "error"
    # ours: the off-topic coffee turn goes whole, its patched error result with it
    assert COFFEE not in texts(gated[2]) and not any(isinstance(m, ToolMessage) for m in gated[2])
    # back on coffee: the turn comes back with its call and its error result paired
    assert COFFEE in texts(gated[3]) and any(m.type == "tool" and m.tool_call_id == "bad1" for m in gated[3])
    for received in (*plain, *gated):
        check_tool_pairs(received)
    assert shape(runs[True][0].get_state(CONFIG).values["messages"]) == shape(runs[False][0].get_state(CONFIG).values["messages"])


# -- streaming ----------------------------------------------------------------------------------------
def streamed(graph: Any, question: str, mode: str) -> list[Any]:
    return list(graph.stream({"messages": [HumanMessage(question)]}, CONFIG, stream_mode=mode))


def test_stream_messages_mode_gives_the_same_chunks_with_the_middleware() -> None:
    replies = [call("lookup_job_duration", {"job": "nightly export"}, "c1"), AIMessage(REDIS_ANSWER), AIMessage(COFFEE_ANSWER)]
    chunks = {}
    for ours in (False, True):
        graph, _ = agent(list(replies), ours, fake=StreamingFake)
        chunks[ours] = [
            (type(chunk).__name__, chunk.text, meta["langgraph_node"], len(getattr(chunk, "tool_call_chunks", [])))
            for question in (REDIS, COFFEE) for chunk, meta in streamed(graph, question, "messages")
        ]
    assert chunks[True] == chunks[False]
    answer = "".join(text for kind, text, node, _ in chunks[True] if kind == "AIMessageChunk")
    assert REDIS_ANSWER in answer and COFFEE_ANSWER in answer
    assert ("ToolMessage", "The nightly export job runs for at most 45 seconds.", "tools", 0) in chunks[True]


def test_stream_values_mode_gives_the_same_snapshots_with_the_middleware() -> None:
    replies = [call("lookup_job_duration", {"job": "nightly export"}, "c1"), AIMessage(REDIS_ANSWER), AIMessage(COFFEE_ANSWER)]
    snapshots = {}
    for ours in (False, True):
        graph, _ = agent(list(replies), ours, fake=StreamingFake)
        values = [v for question in (REDIS, COFFEE) for v in streamed(graph, question, "values")]
        snapshots[ours] = [(sorted(v), shape(v["messages"])) for v in values]
    # ours records each run's input in a private key (one more snapshot a run, its messages unchanged)
    assert any(TURN_KEY in keys for keys, _ in snapshots[True])
    ours = [([k for k in keys if k != TURN_KEY], messages) for keys, messages in snapshots[True]]
    assert [s for n, s in enumerate(ours) if not n or s != ours[n - 1]] == snapshots[False]


def test_a_routed_edit_streams_its_confirmation_and_never_the_main_model() -> None:
    graph, model = agent([AIMessage(REDIS_ANSWER)], True, editor=ScriptedModel([swap_editor("90 seconds", "120 seconds")]),
                         fake=StreamingFake)
    streamed(graph, REDIS, "messages")
    chunks = streamed(graph, "/edit the TTL is 120 seconds", "messages")
    assert len(model.received) == 1
    assert [(type(c).__name__, m["langgraph_node"]) for c, m in chunks] == [("AIMessage", "model")]
    assert chunks[0][0].text.startswith("Edited the conversation") and "+Set the Redis lock TTL to 120 seconds" in chunks[0][0].text


def test_async_stream_matches_the_sync_one() -> None:
    async def collect(graph: Any) -> list[tuple[str, str]]:
        out = []
        async for chunk, meta in graph.astream({"messages": [HumanMessage(REDIS)]}, CONFIG, stream_mode="messages"):
            out.append((chunk.text, meta["langgraph_node"]))
        return out

    graph, _ = agent([AIMessage(REDIS_ANSWER)], True, fake=StreamingFake)
    chunks = asyncio.run(collect(graph))
    assert "".join(text for text, node in chunks if node == "model") == REDIS_ANSWER


# -- threads ------------------------------------------------------------------------------------------
def test_two_threads_never_mix() -> None:
    replies = [AIMessage(f"answer {i}") for i in range(6)]
    graph, model = agent(replies, True)
    one, two = {"configurable": {"thread_id": "one"}}, {"configurable": {"thread_id": "two"}}
    questions = {"one": [REDIS, FOLLOW_UP, "Should the Redis lock TTL change?"], "two": [COFFEE, PLANTS, "More on espresso?"]}
    for a, b in zip(questions["one"], questions["two"]):
        graph.invoke({"messages": [HumanMessage(a)]}, one)
        graph.invoke({"messages": [HumanMessage(b)]}, two)
    for received in model.received:
        asked = {m.text for m in received if m.type == "human"}
        assert asked <= set(questions["one"]) or asked <= set(questions["two"]), asked
    edit_thread(graph, one, "Valkey, not Redis", ScriptedModel([swap_editor("Redis", "Valkey")]))
    assert "Redis" not in texts(graph.get_state(one).values["messages"])
    assert [m.text for m in graph.get_state(two).values["messages"] if m.type == "human"] == questions["two"]
    assert len(thread_history(graph, one)) == 1 and thread_history(graph, two) == []
    with pytest.raises(HistoryError, match="nothing to undo"):
        undo_thread(graph, two)


def test_two_threads_run_concurrently_never_mix() -> None:
    async def scenario() -> ToolCallingFake:
        graph, model = agent([AIMessage(f"answer {i}") for i in range(8)], True)
        async def thread(name: str, questions: list[str]) -> None:
            for question in questions:
                await graph.ainvoke({"messages": [HumanMessage(f"{name}: {question}")]}, {"configurable": {"thread_id": name}})
        await asyncio.gather(thread("one", [REDIS, FOLLOW_UP, REDIS, FOLLOW_UP]), thread("two", [COFFEE, PLANTS, COFFEE, PLANTS]))
        return model

    model = asyncio.run(scenario())
    assert len(model.received) == 8
    for received in model.received:
        assert len({m.text.split(":")[0] for m in received if m.type == "human"}) == 1


# -- SummarizationMiddleware beside ours --------------------------------------------------------------
def summarizer() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage("The user asked which office plants survive low light.")]))


@pytest.mark.parametrize("order", ["summarization-first", "gatekeeper-first"])
def test_summaries_are_pinned_and_our_gate_still_applies(order: str) -> None:
    replies = [AIMessage(PLANTS_ANSWER), AIMessage(REDIS_ANSWER), AIMessage(COFFEE_ANSWER), AIMessage("Every 30 seconds.")]
    questions = [PLANTS, REDIS, COFFEE, FOLLOW_UP]
    seen, stored = {}, {}
    for ours in (False, True):
        summary = SummarizationMiddleware(model=summarizer(), trigger=("messages", 7), keep=("messages", 5))
        model = ToolCallingFake(messages=iter(list(replies)))
        gate = [GatekeeperMiddleware()] if ours else []
        middleware = [summary, *gate] if order == "summarization-first" else [*gate, summary]
        graph = create_agent(model, [], middleware=middleware, checkpointer=InMemorySaver())
        for question in questions:
            graph.invoke({"messages": [HumanMessage(question)]}, CONFIG)
        seen[ours], stored[ours] = model.received[-1], graph.get_state(CONFIG).values
    # upstream: the summary replaces the oldest turn and leads what the model sees
    assert seen[False][0].additional_kwargs.get("lc_source") == "summarization" and PLANTS not in texts(seen[False])
    assert COFFEE in texts(seen[False])
    # ours: the summary stays pinned first, the off-topic coffee turn is dropped, the Redis turn kept
    assert shape(seen[True][:1]) == shape(seen[False][:1])
    assert REDIS in texts(seen[True]) and REDIS_ANSWER in texts(seen[True]) and COFFEE not in texts(seen[True])
    assert seen[True][-1].text == FOLLOW_UP
    # the stored state is upstream's
    assert sorted(set(stored[True]) - {TURN_KEY}) == sorted(stored[False])  # and our private key, the run's input
    assert shape(stored[True]["messages"]) == shape(stored[False]["messages"])
