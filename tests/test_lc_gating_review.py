"""Regression tests for the LangChain gating adapters (issue #12 review, defects 5-9).

5. concurrent async gating over one shared index (``thread=None``) never mixes
   conversations: agate_messages, topic_gate.ainvoke without a history, the agent
   middleware without a checkpointer; a sync call meanwhile (worker thread or the
   loop's own thread) and a cancelled waiter neither deadlock nor corrupt.
6. topic_gate with options keeps no history (nor its transcript) alive.
7. gate_messages with ``params=`` built per call reuses its kept index.
8. key inference refuses a message list ending with a human message beside a lone string.
9. ``history_messages_key`` alone infers the input key or refuses; never gates nothing.

Models are scripted fakes; the embedder is the deterministic hashing fake, with async
twins that yield to the event loop (no sleeps, no timing)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from dataclasses import dataclass, field, replace

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from context_gatekeeper import SelectionParams
from context_gatekeeper.selection.semantic.runner import wait_idle
from context_gatekeeper.errors import InvalidInputError
from context_gatekeeper.stores import InMemoryStore
from langchain_gatekeeper import (
    GatedRunnableWithMessageHistory,
    GatekeeperChatMessageHistory,
    GatekeeperMiddleware,
    TopicGateKeysError,
    agate_messages,
    gate_messages,
    topic_gate,
)
from test_semantic import HashEmbedder


class YieldingEmbedder(HashEmbedder):
    """Async twins that give the event loop to other tasks several times per call (where a
    real embedder awaits the network); ``hold`` (an asyncio.Event) keeps query calls
    waiting until it is set, ``entered`` is set once one is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: asyncio.Event | None = None
        self.entered: asyncio.Event | None = None

    async def _yield(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def aembed_documents(self, texts):
        await self._yield()
        return self.embed_documents(texts)

    async def aembed_query(self, text):
        await self._yield()
        if self.hold is not None:
            self.entered.set()
            await self.hold.wait()
        return self.embed_query(text)


def conversation(topic: str, n: int = 6) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(n):
        out += [HumanMessage(f"{topic} question {i} about {topic} setup"), AIMessage(f"{topic} answer {i}")]
    return out + [HumanMessage(f"More about {topic} setup?")]


A, B = conversation("redis"), conversation("espresso")


def texts(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages]


async def gather(*awaitables):
    return await asyncio.gather(*awaitables)


# -- 5: concurrent async gating over a shared index ----------------------------------------
def test_concurrent_agate_messages_over_different_lists_never_mix() -> None:
    emb = YieldingEmbedder()
    options = {"token_budget": 4000, "embedder": emb}
    alone = {id(x): texts(asyncio.run(agate_messages(x, **options))) for x in (A, B)}
    assert alone[id(A)] != alone[id(B)] and len(alone[id(A)]) == len(A)
    results = asyncio.run(gather(*(agate_messages(x, **options) for x in (A, B, A, B))))
    assert [texts(r) for r in results] == [alone[id(x)] for x in (A, B, A, B)]


def test_concurrent_topic_gate_ainvoke_without_a_history_never_mixes() -> None:
    gate = topic_gate(token_budget=60, message_overhead=0, embedder=YieldingEmbedder())
    mixed = [*A[:-1], *B[:-1]]  # one list with both topics: each query keeps its own
    lists = [A, B, [*mixed, HumanMessage("redis setup?")], [*mixed, HumanMessage("espresso setup?")]]
    alone = [texts(asyncio.run(gate.ainvoke(x))) for x in lists]
    assert len(set(map(tuple, alone))) == 4
    results = asyncio.run(gather(*(gate.ainvoke(x) for x in lists)))
    assert [texts(r) for r in results] == alone


def test_concurrent_agents_without_a_checkpointer_never_mix() -> None:
    from langchain.agents import create_agent
    from test_lc_middleware import scripted

    def with_ids(messages: list[BaseMessage], tag: str) -> list[BaseMessage]:
        return [m.model_copy(update={"id": f"{tag}{i}"}) for i, m in enumerate(messages)]

    middleware = GatekeeperMiddleware(token_budget=70, message_overhead=0, embedder=YieldingEmbedder())
    model = scripted([AIMessage(f"answer {i}") for i in range(10)])
    agent = create_agent(model, [], middleware=[middleware])  # no checkpointer: thread None
    a = with_ids([*A[:-1], *B[:-1], HumanMessage("redis setup?")], "a")
    b = with_ids([*B[:-1], *A[:-1], HumanMessage("espresso setup?")], "b")
    for x in (a, b):
        asyncio.run(agent.ainvoke({"messages": x}))
    alone = {tuple(texts(r)) for r in model.received}
    assert len(alone) == 2
    model.received.clear()
    asyncio.run(gather(*(agent.ainvoke({"messages": x}) for x in (a, b, a, b))))
    assert {tuple(texts(r)) for r in model.received} == alone and len(model.received) == 4


def test_a_sync_call_meanwhile_neither_deadlocks_nor_mixes() -> None:
    emb = YieldingEmbedder()
    options = {"token_budget": 4000, "embedder": emb}
    alone = {id(x): texts(gate_messages(x, **options)) for x in (A, B)}

    async def scenario():
        emb.hold, emb.entered = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(agate_messages(A, **options))
        await emb.entered.wait()  # the holder waits inside the embedder, index held
        in_loop = gate_messages(B, **options)  # the loop's own thread: must not wait on the holder
        worker = asyncio.create_task(asyncio.to_thread(gate_messages, B, **options))  # waits its turn
        waiter = asyncio.create_task(agate_messages(B, **options))
        for _ in range(20):
            await asyncio.sleep(0)
        waiter.cancel()  # a cancelled waiter leaves the lock as it was
        with pytest.raises(asyncio.CancelledError):
            await waiter
        emb.hold.set()
        done = await asyncio.gather(holder, worker)
        emb.hold = None
        return in_loop, *done, await agate_messages(B, **options)

    in_loop, held, worker, after = asyncio.run(scenario())
    assert texts(held) == alone[id(A)]
    assert texts(in_loop) == texts(worker) == texts(after) == alone[id(B)]


# -- 6: no history kept alive ---------------------------------------------------------------
def test_topic_gate_with_options_keeps_no_history_alive() -> None:
    store = InMemoryStore()
    made: list[weakref.ref] = []

    def session(session_id: str) -> GatekeeperChatMessageHistory:
        history = GatekeeperChatMessageHistory(session_id, store=store)  # a new object per call
        made.extend([weakref.ref(history), weakref.ref(history.transcript)])
        return history

    chain = GatedRunnableWithMessageHistory(RunnableLambda(lambda _: AIMessage("ok")), session,
                                            gate_options={"token_budget": 500})
    for i in [0, 1, 2, 0, 1, 2]:
        chain.invoke([HumanMessage(f"question {i} about redis")], {"configurable": {"session_id": f"s{i}"}})
    gc.collect()
    assert made and all(ref() is None for ref in made)
    assert len(GatekeeperChatMessageHistory("s0", store=store).messages) == 4  # two turns stored, answers too


def test_topic_gate_with_options_gates_a_kept_history_from_its_own_index() -> None:
    history = GatekeeperChatMessageHistory("kept", store=InMemoryStore())
    history.add_messages(A[:-1] + B[:-1])
    gate = topic_gate(token_budget=60, message_overhead=0)
    config = {"configurable": {"message_history": history}}
    first = gate.invoke([*history.messages, HumanMessage("redis setup?")], config)
    again = gate.invoke([*history.messages, HumanMessage("redis setup?")], config)
    assert texts(first) == texts(again) and "espresso answer 0" not in texts(first)
    transcript = weakref.ref(history.transcript)
    del history, config
    gc.collect()
    assert transcript() is None


# -- 7: params= built per call --------------------------------------------------------------
def test_gate_messages_with_params_built_per_call_reuses_its_index() -> None:
    emb = YieldingEmbedder()
    messages = [*A[:-1], *B[:-1], HumanMessage("redis setup?")]
    turns = (len(messages) - 1) // 2
    for _ in range(3):
        gate_messages(messages, token_budget=60, embedder=emb, params=SelectionParams())
        assert wait_idle(30)  # turns are embedded in the background
    assert sum(map(len, emb.document_calls)) == turns  # one view, one vector cache: embedded once
    asyncio.run(agate_messages(messages, token_budget=60, embedder=emb, params=SelectionParams()))
    assert wait_idle(30)  # turns are embedded in the background
    assert sum(map(len, emb.document_calls)) == turns
    mine = SelectionParams()
    gate_messages(messages, token_budget=60, embedder=emb, params=mine)
    assert wait_idle(30)  # turns are embedded in the background
    mine.kind_weights["word"] = 0.5  # other values (its dict mutated): another view, its own vectors
    gate_messages(messages, token_budget=60, embedder=emb, params=mine)
    assert wait_idle(30)  # turns are embedded in the background
    assert sum(map(len, emb.document_calls)) == 2 * turns
    gate_messages(messages, token_budget=60, embedder=emb, params=replace(SelectionParams(), k1=2.0))
    assert wait_idle(30)  # turns are embedded in the background
    assert sum(map(len, emb.document_calls)) == 3 * turns
    gate_messages(messages, token_budget=60, embedder=emb, params=SelectionParams())  # the first view again
    assert wait_idle(30)  # turns are embedded in the background
    assert sum(map(len, emb.document_calls)) == 3 * turns


@dataclass(eq=False)
class DataEmbedder:
    """An embedder that happens to be a dataclass: a live object, never copied or keyed by value."""

    calls: list = field(default_factory=list)

    def embed_documents(self, texts):
        self.calls.append(list(texts))
        return [[float(len(t)), 1.0] for t in texts]

    def embed_query(self, text):
        self.calls.append([text])
        return [float(len(text)), 1.0]


def test_gate_messages_uses_the_callers_own_embedder_object() -> None:
    emb = DataEmbedder()
    gate_messages([*A[:-1], HumanMessage("redis setup?")], token_budget=60, embedder=emb)
    wait_idle(5)  # the turns are embedded by a background pass, which may land before or after the query
    assert ["redis setup?"] in emb.calls  # the caller's own object embedded the query


# -- 8 and 9: which key is the query --------------------------------------------------------
def roman_chat() -> list[BaseMessage]:
    msgs: list[BaseMessage] = [HumanMessage("How long should a Redis lock TTL be?"), AIMessage("Longer than the job."),
                               HumanMessage("Best espresso grind for a moka pot?"), AIMessage("Medium-fine.")]
    for i in range(6):
        msgs += [HumanMessage(f"Tell me about Roman emperor number {i}"), AIMessage(f"Emperor {i} ruled long ago.")]
    return msgs


def test_a_list_ending_with_a_human_message_beside_a_lone_string_is_ambiguous() -> None:
    msgs = [*roman_chat(), HumanMessage("And how should the Redis lock watchdog renew the TTL?")]
    value = {"messages": msgs, "language": "French"}
    with pytest.raises(TopicGateKeysError) as caught:
        topic_gate(token_budget=120, message_overhead=0).invoke(value)
    message = str(caught.value)
    assert "input_messages_key='messages'" in message and "'language'" in message
    explicit = topic_gate(input_messages_key="messages", token_budget=120, message_overhead=0).invoke(value)
    assert "Longer than the job." in texts(explicit["messages"]) and explicit["language"] == "French"
    # a history ending with an answer beside a string, or beside a message: history and input
    history = roman_chat()
    for query in ("How long should the Redis lock TTL be?", HumanMessage("How long should the Redis lock TTL be?")):
        got = topic_gate(token_budget=120, message_overhead=0).invoke({"history": history, "question": query})
        assert "Longer than the job." in texts(got["history"]) and len(got["history"]) < len(history)


def test_history_key_alone_infers_the_input_key_or_refuses() -> None:
    history = roman_chat()
    value = {"history": history, "question": "Which espresso grind for a moka pot?"}
    inferred = topic_gate(history_messages_key="history", token_budget=120, message_overhead=0).invoke(value)
    both = topic_gate(history_messages_key="history", input_messages_key="question", token_budget=120,
                      message_overhead=0).invoke(value)
    assert texts(inferred["history"]) == texts(both["history"]) and len(both["history"]) < len(history)
    upstream = {**value, "input": "How long should a Redis lock TTL be?", "language": "en"}  # "input" wins
    got = topic_gate(history_messages_key="history", token_budget=120, message_overhead=0).invoke(upstream)
    assert "Longer than the job." in texts(got["history"])
    with pytest.raises(TopicGateKeysError, match="'language'.*'question'|'question'.*'language'"):
        topic_gate(history_messages_key="history").invoke({**value, "language": "en"})
    with pytest.raises(TopicGateKeysError, match="input_messages_key"):
        topic_gate(history_messages_key="history").invoke({"history": history, "k": 3})
    with pytest.raises(InvalidInputError, match="'query'"):
        topic_gate(history_messages_key="history", input_messages_key="query").invoke(value)
