"""LangChain's own contracts, kept by the adapter: written here, after what
langchain-core's unit tests for chat histories and RunnableWithMessageHistory check.

* a chat history gives messages back as they were added (equality, ids absent or kept),
  sync and async, and ``clear`` empties it;
* ``RunnableWithMessageHistory`` (upstream's class and our drop-in) stores each turn once
  per session, with message-list or dict input and output, custom config specs, and
  listener errors raised the way the wrapped runnable raises them;
* the plain-list functions (``topic_gate`` without a session history, ``gate_messages``)
  keep their index across calls, so a list that grew by one turn costs one turn.
Everything is real (LangChain runnables, SQLite files); models are scripted fakes.
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import ConfigurableFieldSpec, Runnable, RunnableBinding, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tracers.root_listeners import RootListenersTracer

from context_gatekeeper import ContextGatekeeper, Delete, InsertAfter, InvalidInputError, Replace, UnknownMessageError
from langchain_gatekeeper import (
    GatedRunnableWithMessageHistory,
    GatekeeperChatMessageHistory,
    TopicGateKeysError,
    agate_messages,
    gate_messages,
    topic_gate,
)
from langchain_gatekeeper.agent_view import GatedView
from lc_support import ESPRESSO, ESPRESSO_QUERY, REDIS_1, REDIS_2, REDIS_QUERY, Recorder, numbered_answers


def echo(messages: list[BaseMessage]) -> str:
    """What upstream's tests wrap: an answer naming every human message it was sent."""
    return "you said: " + "\n".join(str(m.content) for m in messages if isinstance(m, HumanMessage))


def with_history(cls: type, runnable: Any, sessions: Any, **keys: Any) -> RunnableWithMessageHistory:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # upstream's class warns that it is deprecated
        return cls(runnable, sessions, **keys)


class Sessions(dict):
    """``get_session_history`` over a dict, as upstream's tests write it."""

    def __call__(self, session_id: str) -> GatekeeperChatMessageHistory:
        return self.setdefault(session_id, GatekeeperChatMessageHistory(f"contract-{session_id}"))


def cfg(session: str = "1", **extra: Any) -> dict[str, Any]:
    return {"configurable": {"session_id": session, **extra}}


BOTH = pytest.mark.parametrize("cls", [RunnableWithMessageHistory, GatedRunnableWithMessageHistory], ids=["upstream", "gated"])


# -- chat history: messages come back as added ------------------------------------------------
def test_messages_come_back_equal_to_what_was_added() -> None:
    history = GatekeeperChatMessageHistory("eq")
    added = [HumanMessage("Hello"), AIMessage("Hi there", id="mine"), SystemMessage("note")]
    history.add_messages(added)
    assert history.messages == added
    assert history.messages[0].id is None and history.messages[1].id == "mine"
    history.add_message(HumanMessage("World"))
    history.add_user_message("and you?")
    history.add_ai_message("fine")
    assert history.messages == [*added, HumanMessage("World"), HumanMessage("and you?"), AIMessage("fine")]
    other = GatekeeperChatMessageHistory("eq-other")
    assert other.messages == []
    history.clear()
    assert history.messages == [] and len(history.record()) == 6


def test_async_twins_round_trip() -> None:
    async def run() -> None:
        history = GatekeeperChatMessageHistory("eq-async")
        await history.aadd_messages([HumanMessage("Hello")])
        assert await history.aget_messages() == [HumanMessage("Hello")]
        other = GatekeeperChatMessageHistory("eq-async-other")
        await other.aadd_messages([HumanMessage("World")])
        assert history.messages == [HumanMessage("Hello")] and other.messages == [HumanMessage("World")]
        await history.aclear()
        assert await history.aget_messages() == []
        assert await other.amessage_ids() == other.message_ids()

    asyncio.run(run())


def test_id_less_messages_stay_id_less_in_a_reopened_sqlite_history(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    history = GatekeeperChatMessageHistory("s", store=path)
    added = [HumanMessage("Hello"), AIMessage("Hi", id="a1")]
    history.add_messages(added)
    ids = history.message_ids()
    history.close()
    reopened = GatekeeperChatMessageHistory("s", store=path)
    assert reopened.messages == added and reopened.message_ids() == ids
    assert ids[1] == "a1" and ids[0]  # the transcript keeps an id of its own for the first
    reopened.close()


def test_message_ids_address_messages_for_apply_and_diff() -> None:
    history = GatekeeperChatMessageHistory("addr")
    history.add_messages([HumanMessage("Trip to Irland?"), AIMessage("Ireland, two weeks.")])
    ids = history.message_ids()
    revision = history.apply([Replace(0, "Trip to Ireland?"), InsertAfter(-1, "assistant", "Pack a coat.")])
    assert [m.text for m in history.messages] == ["Trip to Ireland?", "Ireland, two weeks.", "Pack a coat."]
    assert history.messages[0].id is None  # still the caller's id-less message, edited
    diff = history.diff(revision.number - 1)
    assert {d.id for d in diff.messages} >= {ids[0]}
    history.apply([Delete(ids[1])])
    assert [m.text for m in history.messages] == ["Trip to Ireland?", "Pack a coat."]
    before = history.messages
    with pytest.raises(UnknownMessageError, match="position 5"):
        history.apply([Replace(5, "x")])
    assert history.messages == before
    asyncio.run(history.aapply([Replace(-1, "Pack a raincoat.")]))
    assert history.messages[-1].text == "Pack a raincoat."


# -- RunnableWithMessageHistory with our history --------------------------------------------
@BOTH
def test_message_list_input_stores_each_turn_once(cls: type) -> None:
    sessions = Sessions()
    chain = with_history(cls, RunnableLambda(echo), sessions)
    assert chain.invoke([HumanMessage("hello")], cfg()) == "you said: hello"
    assert chain.invoke([HumanMessage("good bye")], cfg()) == "you said: hello\ngood bye"
    assert [*chain.stream([HumanMessage("hi again")], cfg())] == ["you said: hello\ngood bye\nhi again"]
    assert sessions["1"].messages == [
        HumanMessage("hello"), AIMessage("you said: hello"), HumanMessage("good bye"),
        AIMessage("you said: hello\ngood bye"), HumanMessage("hi again"), AIMessage("you said: hello\ngood bye\nhi again"),
    ]


@BOTH
def test_dict_input_and_output_keys_and_session_isolation(cls: type) -> None:
    sessions = Sessions()

    def answer(value: dict[str, Any]) -> dict[str, Any]:
        return {"output": AIMessage(echo([*value["history"], HumanMessage(value["question"])])), "n": len(value["history"])}

    chain = with_history(
        cls, RunnableLambda(answer), sessions,
        input_messages_key="question", history_messages_key="history", output_messages_key="output",
    )
    first = chain.invoke({"question": "hello"}, cfg("a"))
    assert first["output"] == AIMessage("you said: hello") and first["n"] == 0
    chain.invoke({"question": "other session"}, cfg("b"))
    assert chain.invoke({"question": "again"}, cfg("a"))["output"].content == "you said: hello\nagain"
    again = [HumanMessage("hello"), AIMessage("you said: hello"), HumanMessage("again"), AIMessage("you said: hello\nagain")]
    assert sessions["a"].messages == again
    assert sessions["b"].messages == [HumanMessage("other session"), AIMessage("you said: other session")]


@BOTH
def test_async_invocation_stores_the_turn(cls: type) -> None:
    sessions = Sessions()
    chain = with_history(cls, RunnableLambda(echo), sessions)
    assert asyncio.run(chain.ainvoke([HumanMessage("hello")], cfg("x"))) == "you said: hello"
    assert asyncio.run(chain.ainvoke("again", cfg("x"))) == "you said: hello\nagain"
    assert sessions["x"].messages == [HumanMessage("hello"), AIMessage("you said: hello"), HumanMessage("again"),
                                      AIMessage("you said: hello\nagain")]


@BOTH
def test_custom_config_specs_pick_the_session(cls: type) -> None:
    store: dict[tuple[str, str], GatekeeperChatMessageHistory] = {}

    def get_session_history(user_id: str, conversation_id: str) -> GatekeeperChatMessageHistory:
        key = (user_id, conversation_id)
        if key not in store:
            store[key] = GatekeeperChatMessageHistory(f"{user_id}/{conversation_id}")
        return store[key]

    specs = [
        ConfigurableFieldSpec(id="user_id", annotation=str, name="User ID", default="", is_shared=True),
        ConfigurableFieldSpec(id="conversation_id", annotation=str, name="Conversation ID", default="", is_shared=True),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chain = cls(RunnableLambda(echo), get_session_history, history_factory_config=specs)
    assert {s.id for s in chain.config_specs} >= {"user_id", "conversation_id"}
    chain.invoke([HumanMessage("hello")], {"configurable": {"user_id": "u1", "conversation_id": "c1"}})
    chain.invoke([HumanMessage("hi")], {"configurable": {"user_id": "u1", "conversation_id": "c2"}})
    assert store[("u1", "c1")].messages == [HumanMessage("hello"), AIMessage("you said: hello")]
    assert store[("u1", "c2")].messages == [HumanMessage("hi"), AIMessage("you said: hi")]
    with pytest.raises(ValueError, match="Missing keys"):
        chain.invoke([HumanMessage("x")], {"configurable": {"user_id": "u1"}})


class RaisingListeners(RunnableLambda):
    """A runnable whose listeners raise their errors (as one of upstream's tests builds)."""

    def with_listeners(self, *, on_start: Any = None, on_end: Any = None, on_error: Any = None) -> Runnable:
        def tracer(config: Any) -> dict[str, Any]:
            t = RootListenersTracer(config=config, on_start=on_start, on_end=on_end, on_error=on_error)
            t.raise_error = True
            return {"callbacks": [t]}

        return RunnableBinding(bound=self, config_factories=[tracer])


@BOTH
def test_an_unusable_output_raises_where_the_runnable_raises_listener_errors(cls: type) -> None:
    sessions = Sessions()
    chain = with_history(cls, RaisingListeners(lambda _: 123), sessions)
    with pytest.raises(ValueError, match="Got 123"):
        chain.bound.invoke([HumanMessage("hello")], {"configurable": {"session_id": "1", "message_history": sessions("1")}})


def test_the_drop_in_listeners_see_the_ungated_input() -> None:
    sessions = Sessions()
    for user, assistant in (REDIS_1, ESPRESSO, REDIS_2):
        sessions("s").add_messages([HumanMessage(user), AIMessage(assistant)])
    rec = Recorder()
    chain = GatedRunnableWithMessageHistory(numbered_answers(), sessions)
    chain.invoke([HumanMessage(ESPRESSO_QUERY)], {"configurable": {"session_id": "s"}, "callbacks": [rec]})
    assert [m.text for m in rec.last] == [*ESPRESSO, ESPRESSO_QUERY]
    assert [m.text for m in sessions["s"].messages][-2:] == [ESPRESSO_QUERY, "answer 0"]
    assert len(sessions["s"].messages) == 8  # six seeded, the query and the answer: once each


# -- topic_gate: the history's own incremental index ----------------------------------------
@pytest.fixture
def inserts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The turns ContextGatekeeper indexed by insert_turn or insert_turns (one entry a turn)."""
    calls: list[int] = []
    original, original_many = ContextGatekeeper.insert_turn, ContextGatekeeper.insert_turns

    def counting(self: ContextGatekeeper, *args: Any, **kwargs: Any) -> int:
        calls.append(1)
        return original(self, *args, **kwargs)

    def counting_many(self: ContextGatekeeper, after_id: int | None, turns: Any) -> list[int]:
        turns = list(turns)
        calls.extend([1] * len(turns))
        return original_many(self, after_id, turns)

    monkeypatch.setattr(ContextGatekeeper, "insert_turn", counting)
    monkeypatch.setattr(ContextGatekeeper, "insert_turns", counting_many)
    return calls


def test_topic_gate_matches_id_less_history_by_position_and_stays_incremental(inserts: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_list_index(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the session history's own index should have answered")

    monkeypatch.setattr(GatedView, "gated", no_list_index)
    sessions, rec = Sessions(), Recorder()
    for user, assistant in (REDIS_1, ESPRESSO, REDIS_2):
        sessions("s").add_messages([HumanMessage(user), AIMessage(assistant)])  # id-less
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    chain = GatedRunnableWithMessageHistory(
        prompt | numbered_answers(), sessions, input_messages_key="question", history_messages_key="history"
    )
    chain.invoke({"question": REDIS_QUERY}, {"configurable": {"session_id": "s"}, "callbacks": [rec]})
    assert [m.text for m in rec.last] == [*REDIS_1, *REDIS_2, REDIS_QUERY]
    assert len(inserts) == 3  # the history's index, built once
    for i in range(3):
        inserts.clear()
        chain.invoke({"question": f"{ESPRESSO_QUERY} ({i})"}, {"configurable": {"session_id": "s"}, "callbacks": [rec]})
        assert len(inserts) == 1  # only the turn the previous call stored
    assert ESPRESSO[0] in rec.last_text() and REDIS_1[0] not in rec.last_text()


# -- topic_gate: dict input without keys ----------------------------------------------------
def test_topic_gate_infers_unambiguous_dict_keys() -> None:
    prior = [HumanMessage(REDIS_1[0]), AIMessage(REDIS_1[1]), HumanMessage(ESPRESSO[0]), AIMessage(ESPRESSO[1])]
    out = topic_gate().invoke({"history": prior, "question": ESPRESSO_QUERY})
    assert [m.text for m in out["history"]] == list(ESPRESSO) and out["question"] == ESPRESSO_QUERY
    listed = topic_gate().invoke({"messages": [*prior, HumanMessage(REDIS_QUERY)]})
    assert [m.text for m in listed["messages"]] == [*REDIS_1, REDIS_QUERY]


def test_topic_gate_in_an_upstream_dict_chain_gates_without_keys() -> None:
    sessions, rec = Sessions(), Recorder()
    for user, assistant in (REDIS_1, ESPRESSO, REDIS_2):
        sessions("s").add_messages([HumanMessage(user), AIMessage(assistant)])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    chain = with_history(
        RunnableWithMessageHistory, topic_gate() | prompt | numbered_answers(), sessions,
        input_messages_key="question", history_messages_key="history",
    )
    chain.invoke({"question": ESPRESSO_QUERY}, {"configurable": {"session_id": "s"}, "callbacks": [rec]})
    assert [m.text for m in rec.last] == [*ESPRESSO, ESPRESSO_QUERY]


@pytest.mark.parametrize(
    "value",
    [
        {"history": [], "question": "q", "language": "en"},
        {"a": [HumanMessage("x")], "b": [HumanMessage("y")]},
        {"question": "q"},
    ],
    ids=["two-strings", "two-lists", "no-list"],
)
def test_topic_gate_refuses_ambiguous_dicts_naming_the_keys(value: dict[str, Any]) -> None:
    with pytest.raises(TopicGateKeysError) as caught:
        topic_gate().invoke(value)
    assert isinstance(caught.value, TypeError) and "history_messages_key" in str(caught.value)
    assert all(repr(k) in str(caught.value) for k in value)


def test_topic_gate_missing_keys_are_library_errors() -> None:
    with pytest.raises(InvalidInputError, match="'history'"):
        topic_gate(history_messages_key="history").invoke({"question": "q"})
    with pytest.raises(InvalidInputError, match="'messages'"):
        topic_gate(input_messages_key="messages").invoke([HumanMessage("q")])


# -- gate_messages: trim_messages' shape ----------------------------------------------------
def conversation() -> list[BaseMessage]:
    call = AIMessage("", tool_calls=[{"name": "grind_chart", "args": {"brewer": "moka pot"}, "id": "c1"}])
    return [
        SystemMessage("Be brief."), HumanMessage(REDIS_1[0]), AIMessage(REDIS_1[1]), HumanMessage(ESPRESSO[0]), call,
        ToolMessage("moka pot: medium-fine", tool_call_id="c1"), AIMessage(ESPRESSO[1]), HumanMessage(REDIS_2[0]),
        AIMessage(REDIS_2[1]),
    ]


def test_gate_messages_keeps_system_tool_pairs_and_the_current_turn_whole() -> None:
    chat = conversation()
    coffee = gate_messages([*chat, HumanMessage(ESPRESSO_QUERY)], token_budget=1000, thread="t1")
    assert coffee[0] is chat[0] and coffee[1:5] == chat[3:7] and coffee[-1].text == ESPRESSO_QUERY
    assert len(coffee) == 6  # system, the coffee turn with its tool call and result, the query
    redis = gate_messages([*chat, HumanMessage(REDIS_QUERY)], max_tokens=1000, thread="t1")
    assert [m.text for m in redis] == ["Be brief.", *REDIS_1, *REDIS_2, REDIS_QUERY]
    loop = [*chat, HumanMessage(REDIS_QUERY), AIMessage("", tool_calls=[{"name": "ttl", "args": {}, "id": "c2"}])]
    tail = gate_messages(loop, token_budget=1000)
    assert tail[-2:] == loop[-2:]  # the current turn, tool call included, is never gated
    assert gate_messages(chat[:1] + [AIMessage("no human yet")]) == chat[:1] + [AIMessage("no human yet")]


def test_gate_messages_without_messages_is_a_runnable_and_accepts_message_likes() -> None:
    runnable = gate_messages(token_budget=1000, token_counter="approximate")
    assert isinstance(runnable, Runnable)
    likes = [("system", "Be brief."), ("human", REDIS_1[0]), ("ai", REDIS_1[1]), ("human", ESPRESSO[0]),
             ("ai", ESPRESSO[1]), ("human", ESPRESSO_QUERY)]
    out = runnable.invoke(likes, {"configurable": {"thread_id": "r1"}})
    assert [m.text for m in out] == ["Be brief.", *ESPRESSO, ESPRESSO_QUERY]
    assert [m.text for m in asyncio.run(runnable.ainvoke(likes))] == [m.text for m in out]
    prompt_value = ChatPromptTemplate.from_messages(likes).invoke({})
    assert [m.text for m in gate_messages(prompt_value)] == [m.text for m in out]
    assert [m.text for m in asyncio.run(agate_messages(likes, token_budget=1000))] == [m.text for m in out]


def test_gate_messages_checks_its_options() -> None:
    with pytest.raises(InvalidInputError, match="not both"):
        gate_messages([HumanMessage("q")], token_budget=10, max_tokens=20)
    with pytest.raises(ValueError):
        gate_messages(token_budget=-1)  # 0 is a budget, as trim_messages(max_tokens=0)
    with pytest.raises(TypeError):
        gate_messages(no_such_option=1)
    with pytest.raises(InvalidInputError, match="not a string"):
        gate_messages("just text")


def test_gate_messages_is_the_middleware_view(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    original = GatedView.view

    def spy(self: GatedView, messages: Any, **kwargs: Any) -> Any:
        seen.append(len(messages))
        return original(self, messages, **kwargs)

    monkeypatch.setattr(GatedView, "view", spy)
    gate_messages([*conversation(), HumanMessage(REDIS_QUERY)], token_budget=1000)
    assert seen == [10]


# -- list mode keeps its index across calls --------------------------------------------------
def growing(n: int) -> list[BaseMessage]:
    topics = ["redis lock ttl", "espresso grind", "kubernetes helm chart", "postgres vacuum", "rust borrow checker"]
    out: list[BaseMessage] = [SystemMessage("Be brief.")]
    for i in range(n):
        topic = topics[i % len(topics)]
        out += [HumanMessage(f"Question {i} about {topic}?"), AIMessage(f"Answer {i}: {topic} details.")]
    return out


@pytest.mark.parametrize("how", ["gate_messages", "topic_gate"])
def test_a_list_that_grew_by_one_turn_indexes_one_turn(how: str, inserts: list[int]) -> None:
    gate = topic_gate(token_budget=300)
    call = (lambda ms: gate_messages(ms, token_budget=300, thread=("grow", how))) if how == "gate_messages" else gate.invoke
    call([*growing(30), HumanMessage("What about the redis lock ttl?")])
    assert len(inserts) == 30
    for n in range(31, 35):
        inserts.clear()
        out = call([*growing(n), HumanMessage("What about the espresso grind?")])
        assert len(inserts) == 1
        assert out[-1].text == "What about the espresso grind?" and "espresso" in " ".join(m.text for m in out[1:-1])
    inserts.clear()
    window = growing(34)[0:1] + growing(34)[11:]  # the oldest five turns trimmed away
    call([*window, HumanMessage("And the postgres vacuum?")])
    assert inserts == []  # removals only
