"""topic_gate and GatedRunnableWithMessageHistory: classic chains get the gated history.

What the model receives is captured by a callback handler.  Every test here runs with
warnings as errors (the module name must not start with ``langchain``, or langchain-core
would treat it as internal and hide its deprecation warnings).
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from langchain_core._api.deprecation import LangChainDeprecationWarning
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import gc
import weakref

from langchain_core.runnables import RunnableLambda

from context_gatekeeper import BudgetError, GateOptions, InvalidTypeError
from context_gatekeeper.errors import InvalidInputError
from context_gatekeeper.stores import InMemoryStore
from langchain_gatekeeper import TopicGateKeysError
from test_lc_trim import A, B, YieldingEmbedder, gather
from langchain_gatekeeper.gate import GatedRunnableWithMessageHistory, topic_gate
from langchain_gatekeeper.history import GatekeeperChatMessageHistory
from lc_support import (
    ESPRESSO,
    ESPRESSO_QUERY,
    REDIS_1,
    REDIS_2,
    REDIS_QUERY,
    Recorder,
    numbered_answers,
    patch_reply,
)

pytestmark = pytest.mark.filterwarnings("error")

PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
)


class ListHistory(BaseChatMessageHistory):
    """Any other chat history (a plain list), to exercise the gate's in-memory path."""

    def __init__(self) -> None:
        self.messages: list[BaseMessage] = []

    def add_messages(self, messages: Any) -> None:
        self.messages.extend(messages)

    def clear(self) -> None:
        self.messages = []


class Sessions(dict):
    """``get_session_history``: one history object per session id."""

    def __init__(self, factory: Any = lambda sid: GatekeeperChatMessageHistory(sid)) -> None:
        super().__init__()
        self.factory = factory

    def __call__(self, session_id: str) -> BaseChatMessageHistory:
        if session_id not in self:
            self[session_id] = self.factory(session_id)
        return self[session_id]


def texts(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages]


def seeded(history: BaseChatMessageHistory) -> BaseChatMessageHistory:
    for user, assistant in (REDIS_1, ESPRESSO, REDIS_2):
        history.add_messages([HumanMessage(user), AIMessage(assistant)])
    return history


def config(recorder: Recorder, session: str = "s") -> dict[str, Any]:
    return {"configurable": {"session_id": session}, "callbacks": [recorder]}


def dict_chain(sessions: Sessions, **options: Any) -> GatedRunnableWithMessageHistory:
    return GatedRunnableWithMessageHistory(
        PROMPT | numbered_answers(), sessions, input_messages_key="question", history_messages_key="history", **options
    )


FULL = [*REDIS_1, *ESPRESSO, *REDIS_2]


# -- dict mode -------------------------------------------------------------------------------
def test_dict_mode_sends_the_gated_view_and_stores_everything_once():
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    chain = dict_chain(sessions)
    answer = chain.invoke({"question": REDIS_QUERY}, config(rec))
    assert answer.text == "answer 0"
    assert texts(rec.last) == ["Be brief.", *REDIS_1, *REDIS_2, REDIS_QUERY]
    assert texts(sessions["s"].messages) == [*FULL, REDIS_QUERY, "answer 0"]
    chain.invoke({"question": ESPRESSO_QUERY}, config(rec))
    assert texts(rec.last) == ["Be brief.", *ESPRESSO, ESPRESSO_QUERY]
    assert texts(sessions["s"].messages) == [*FULL, REDIS_QUERY, "answer 0", ESPRESSO_QUERY, "answer 1"]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_stored_unanswered_message_is_charged_and_sent_only_if_it_fits(use_async: bool):
    """A history that ends with an unanswered message (a run that failed after storing it, a
    message added by hand): the new input is the open turn, so the stored message is charged
    to the history's own budget and left out when it does not fit (the history's index sent it
    whole as its open turn: 4,834 tokens for a budget of 300; gating it as a plain list used
    topic_gate's default budget of 4,000 instead of the history's)."""
    from context_gatekeeper.tokens import resolve_token_counter

    count = resolve_token_counter(None)
    manual = "Here is our whole espresso machine manual: " + "grind, tamp, pull the shot. " * 600
    short = "Also: our grinder is a Baratza Encore."
    for stored, expected in ((manual, list(REDIS_1)), (short, [*REDIS_1, short])):
        sessions, rec = Sessions(lambda sid: GatekeeperChatMessageHistory(sid, token_budget=300)), Recorder()
        sessions("s").add_messages([HumanMessage(REDIS_1[0]), AIMessage(REDIS_1[1]), HumanMessage(stored)])
        chain = dict_chain(sessions)  # no gate options: the history's own settings
        ask = chain.ainvoke if use_async else chain.invoke
        result = ask({"question": REDIS_QUERY}, config(rec))
        if use_async:
            asyncio.run(result)
        history = rec.last[1:-1]  # between the prompt's system message and the question
        assert texts(history) == expected
        assert sum(count(m.text) + 3 for m in history) <= 300


def test_dict_mode_async():
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    chain = dict_chain(sessions)
    asyncio.run(chain.ainvoke({"question": REDIS_QUERY}, config(rec)))
    assert texts(rec.last) == ["Be brief.", *REDIS_1, *REDIS_2, REDIS_QUERY]
    assert texts(sessions["s"].messages) == [*FULL, REDIS_QUERY, "answer 0"]


def test_messages_under_the_input_key_without_a_history_key():
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    model = numbered_answers()
    chain = GatedRunnableWithMessageHistory((lambda d: d["messages"]) | model, sessions, input_messages_key="messages")
    chain.invoke({"messages": [HumanMessage(ESPRESSO_QUERY)]}, config(rec))
    assert texts(rec.last) == [*ESPRESSO, ESPRESSO_QUERY]
    assert texts(sessions["s"].messages) == [*FULL, ESPRESSO_QUERY, "answer 0"]


# -- list mode -------------------------------------------------------------------------------
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_list_mode_gates_the_history_and_keeps_the_new_message(use_async: bool):
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    chain = GatedRunnableWithMessageHistory(numbered_answers(), sessions)
    call = chain.ainvoke if use_async else chain.invoke
    result = call([HumanMessage(ESPRESSO_QUERY)], config(rec))
    if use_async:
        asyncio.run(result)
    assert texts(rec.last) == [*ESPRESSO, ESPRESSO_QUERY]
    assert texts(sessions["s"].messages) == [*FULL, ESPRESSO_QUERY, "answer 0"]
    second = call(REDIS_QUERY, config(rec))  # a plain string input works too
    if use_async:
        asyncio.run(second)
    assert texts(rec.last) == [*REDIS_1, *REDIS_2, REDIS_QUERY]
    assert texts(sessions["s"].messages).count(REDIS_QUERY) == 1


def test_any_chat_history_is_gated_in_memory_without_being_changed():
    sessions, rec = Sessions(lambda sid: seeded(ListHistory())), Recorder()
    chain = dict_chain(sessions)
    chain.invoke({"question": ESPRESSO_QUERY}, config(rec))
    assert texts(rec.last) == ["Be brief.", *ESPRESSO, ESPRESSO_QUERY]
    assert texts(sessions["s"].messages) == [*FULL, ESPRESSO_QUERY, "answer 0"]
    listed = GatedRunnableWithMessageHistory(numbered_answers(), sessions)
    asyncio.run(listed.ainvoke([HumanMessage(REDIS_QUERY)], config(rec)))
    assert texts(rec.last) == [*REDIS_1, *REDIS_2, REDIS_QUERY]
    assert texts(sessions["s"].messages)[-2:] == [REDIS_QUERY, "answer 0"]
    assert len(sessions["s"].messages) == len(FULL) + 4


# -- topic_gate inside the upstream class ----------------------------------------------------
def upstream(*args: Any, **kwargs: Any) -> RunnableWithMessageHistory:
    """A plain RunnableWithMessageHistory: upstream warns, and the user may act on that."""
    with pytest.warns(LangChainDeprecationWarning):
        return RunnableWithMessageHistory(*args, **kwargs)


def test_topic_gate_inside_runnable_with_message_history_dict_and_list_modes():
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    gate = topic_gate(input_messages_key="question", history_messages_key="history")
    chain = upstream(
        gate | PROMPT | numbered_answers(), sessions, input_messages_key="question", history_messages_key="history"
    )
    chain.invoke({"question": ESPRESSO_QUERY}, config(rec))
    assert texts(rec.last) == ["Be brief.", *ESPRESSO, ESPRESSO_QUERY]
    listed = upstream(topic_gate() | numbered_answers(), sessions)
    asyncio.run(listed.ainvoke([HumanMessage(REDIS_QUERY)], config(rec)))
    assert texts(rec.last)[-1] == REDIS_QUERY and ESPRESSO[0] not in texts(rec.last)
    assert texts(sessions["s"].messages) == [*FULL, ESPRESSO_QUERY, "answer 0", REDIS_QUERY, "answer 0"]


def test_topic_gate_standalone_on_a_list():
    history = [HumanMessage(REDIS_1[0]), AIMessage(REDIS_1[1]), HumanMessage(ESPRESSO[0]), AIMessage(ESPRESSO[1])]
    history += [HumanMessage(REDIS_2[0]), AIMessage(REDIS_2[1])]
    new = HumanMessage(ESPRESSO_QUERY)
    gated = topic_gate().invoke([SystemMessage("sys"), *history, new])
    assert texts(gated) == ["sys", *ESPRESSO, ESPRESSO_QUERY]
    assert gated[-1] is new and gated[1] is history[2]  # the caller's own objects, unchanged
    assert texts(asyncio.run(topic_gate().ainvoke(history + [new]))) == texts(gated)[1:]
    assert topic_gate().invoke("a string passes through") == "a string passes through"


def test_gate_options_apply_and_are_checked_up_front():
    with pytest.raises(BudgetError):
        topic_gate(token_budget=-1)
    with pytest.raises(TypeError):
        topic_gate(no_such_option=1)
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    tiny = dict_chain(sessions, gate_options={"token_budget": 1})  # pinned content alone overflows: kept, no error
    tiny.invoke({"question": REDIS_QUERY}, config(rec))
    assert texts(rec.last) == ["Be brief.", REDIS_QUERY]
    assert tiny.gate_options == {"token_budget": 1}
    assert len(sessions["s"].messages) == len(FULL) + 2


# -- edits through a chain -------------------------------------------------------------------
def test_after_edit_the_chain_sees_the_revised_text_and_undo_brings_it_back():
    sessions, rec = Sessions(), Recorder()
    history = sessions("s")
    chain = dict_chain(sessions)
    history.add_messages(
        [HumanMessage("Our trip: Ireland in 2021, two weeks."), AIMessage("Ireland, 2021, two weeks.")]
    )
    history.edit(
        "It was Iceland, not Ireland.",
        patch_reply(
            {"op": "replace", "id": "1", "content": "Our trip: Iceland in 2021, two weeks."},
            {"op": "replace", "id": "2", "content": "Iceland, 2021, two weeks."},
        ),
    )
    chain.invoke({"question": "Which trip was two weeks long?"}, config(rec))
    assert "Iceland" in rec.last_text() and "Ireland" not in rec.last_text()
    history.undo()
    chain.invoke({"question": "Which trip was two weeks long, again?"}, config(rec))
    seen = texts(rec.last)
    assert "Our trip: Ireland in 2021, two weeks." in seen and "Iceland" not in rec.last_text()
    assert "Which trip was two weeks long?" in seen  # the turn added after the edit is kept
    assert texts(history.messages)[:2] == ["Our trip: Ireland in 2021, two weeks.", "Ireland, 2021, two weeks."]


def test_a_malformed_edit_changes_nothing_the_chain_sees():
    sessions, rec = Sessions(), Recorder()
    history = sessions("s")
    history.add_messages([HumanMessage("Budget is 300 EUR for the trip."), AIMessage("300 EUR noted.")])
    with pytest.raises(ValueError):
        history.edit("500 EUR", patch_reply({"op": "replace", "id": "99", "content": "x"}))
    dict_chain(sessions).invoke({"question": "What is the trip budget?"}, config(rec))
    assert "300 EUR" in rec.last_text()


# -- warnings --------------------------------------------------------------------------------
def test_our_classes_raise_no_warning_and_upstream_still_warns_for_its_own():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sessions, rec = Sessions(), Recorder()
        chain = dict_chain(sessions)
        listed = GatedRunnableWithMessageHistory(numbered_answers(), sessions)
        gate = topic_gate(input_messages_key="question", history_messages_key="history", token_budget=500)
        chain.invoke({"question": REDIS_QUERY}, config(rec))
        asyncio.run(chain.ainvoke({"question": ESPRESSO_QUERY}, config(rec)))
        listed.invoke([HumanMessage("hi")], config(rec))
        gate.invoke({"question": "q", "history": []})
        assert isinstance(chain, RunnableWithMessageHistory)
    upstream(numbered_answers(), sessions)  # the suppression is scoped to our constructor


# -- concurrent async gating without a history ----------------------------------------------
def test_concurrent_topic_gate_ainvoke_without_a_history_never_mixes() -> None:
    gate = topic_gate(token_budget=60, message_overhead=0, embedder=YieldingEmbedder())
    mixed = [*A[:-1], *B[:-1]]  # one list with both topics: each query keeps its own
    lists = [A, B, [*mixed, HumanMessage("redis setup?")], [*mixed, HumanMessage("espresso setup?")]]
    alone = [texts(asyncio.run(gate.ainvoke(x))) for x in lists]
    assert len(set(map(tuple, alone))) == 4
    results = asyncio.run(gather(*(gate.ainvoke(x) for x in lists)))
    assert [texts(r) for r in results] == alone


# -- options keep no history alive ---------------------------------------------------------
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


# -- which key is the query --------------------------------------------------------------------
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


# -- options: keywords or one GateOptions ---------------------------------------------------
def test_topic_gate_takes_one_gate_options_or_its_keywords():
    history = [*A[:-1], *B[:-1]]
    new = HumanMessage("redis setup?")
    by_record = topic_gate(options=GateOptions(token_budget=60, message_overhead=0)).invoke([*history, new])
    by_keywords = topic_gate(token_budget=60, message_overhead=0).invoke([*history, new])
    assert texts(by_record) == texts(by_keywords) and len(by_record) < len(history) + 1
    with pytest.raises(InvalidTypeError, match="not both"):
        topic_gate(options=GateOptions(), token_budget=100)
    with pytest.raises(InvalidTypeError, match="must be a GateOptions"):
        topic_gate(options={"token_budget": 100})
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    tiny = dict_chain(sessions, gate_options={"options": GateOptions(token_budget=1)})  # None: keep_pinned
    tiny.invoke({"question": REDIS_QUERY}, config(rec))
    assert texts(rec.last) == ["Be brief.", REDIS_QUERY]
    strict = topic_gate(options=GateOptions(token_budget=1, on_overflow="raise"))  # a policy given is kept
    with pytest.raises(BudgetError, match="keep_pinned"):
        strict.invoke([SystemMessage("Be brief and exact."), *history, new])


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("history", [lambda sid: GatekeeperChatMessageHistory(sid), lambda sid: ListHistory()],
                         ids=["gatekeeper history", "any history"])
def test_a_message_with_no_text_is_gated_within_the_budget(use_async: bool, history: Any) -> None:
    """An image alone is the current message: the gate continues the active topic (as for "ok?")
    instead of sending the whole history."""
    sessions, rec = Sessions(lambda sid: seeded(history(sid))), Recorder()
    chain = GatedRunnableWithMessageHistory(numbered_answers(), sessions)
    image = HumanMessage([{"type": "image", "source_type": "url", "url": "https://example.com/lock.png"}])
    result = (chain.ainvoke if use_async else chain.invoke)([image], config(rec))
    if use_async:
        asyncio.run(result)
    sent = rec.last
    assert isinstance(sent[-1], HumanMessage) and not sent[-1].text.strip() and len(sent) < len(FULL) + 1
    assert not set(ESPRESSO) & set(texts(sent))  # the topic left behind is not sent


def test_count_tokens_approximately_is_read_as_the_approximate_counter() -> None:
    """trim_messages's counter takes a list of messages: given one text it counts each character
    as a message (about five tokens a character), which would leave no turn within the budget."""
    from langchain_core.messages.utils import count_tokens_approximately

    from langchain_gatekeeper.trim import approximate_tokens

    history = [HumanMessage(REDIS_1[0]), AIMessage(REDIS_1[1]), HumanMessage(ESPRESSO[0]), AIMessage(ESPRESSO[1])]
    new = HumanMessage(REDIS_QUERY)
    budget = 200
    approximate = topic_gate(token_budget=budget, token_counter=approximate_tokens).invoke([*history, new])
    assert texts(approximate) == [*REDIS_1, REDIS_QUERY]
    assert texts(topic_gate(token_budget=budget, token_counter=count_tokens_approximately).invoke([*history, new])) \
        == texts(approximate)


def test_topic_gate_on_a_list_keeps_the_unanswered_human_messages_before_the_question() -> None:
    """A pasted text, then the question (a HumanMessage or a ChatMessage of role user), both
    unanswered: the current turn, sent whole, its texts the query (as gate_messages reads it)."""
    from langchain_core.messages import ChatMessage

    history = [HumanMessage(REDIS_1[0]), AIMessage(REDIS_1[1]), HumanMessage(ESPRESSO[0]), AIMessage(ESPRESSO[1])]
    paste = HumanMessage("maxmemory 2gb\nappendfsync always")
    for question in (HumanMessage(REDIS_QUERY), ChatMessage(REDIS_QUERY, role="user")):
        gated = topic_gate().invoke([*history, paste, question])
        assert gated[-2:] == [paste, question] and texts(gated[:-2]) == list(REDIS_1)
        assert asyncio.run(topic_gate().ainvoke([*history, paste, question])) == gated


def test_a_history_reads_count_tokens_approximately_as_the_approximate_counter() -> None:
    from langchain_core.messages.utils import count_tokens_approximately

    from langchain_gatekeeper.trim import approximate_tokens

    turn = (REDIS_1[0], REDIS_1[1])
    costs = []
    for counter in (approximate_tokens, count_tokens_approximately):
        history = GatekeeperChatMessageHistory("s", token_counter=counter)
        history.add_messages([HumanMessage(turn[0]), AIMessage(turn[1])])
        history.gate.sync()
        costs.append(history.gate.gatekeeper.turn_cost(history.gate.gatekeeper.turns[0].id))
    assert costs[0] == costs[1]


@pytest.fixture
def llm_cache() -> Any:
    """LangChain's global LLM cache, on for one test."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import get_llm_cache, set_llm_cache

    before = get_llm_cache()
    set_llm_cache(InMemoryCache())
    yield
    set_llm_cache(before)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_cached_answer_to_a_repeated_question_is_stored(llm_cache: Any, use_async: bool) -> None:
    """With an LLM cache, a gated prompt sent again is answered with the earlier AIMessage, its
    id included; the repeated question's answer is stored all the same."""
    sessions, rec = Sessions(), Recorder()
    chain = GatedRunnableWithMessageHistory(
        PROMPT | numbered_answers(), sessions, input_messages_key="question", history_messages_key="history",
        gate_options={"token_budget": 0},
    )
    for question in (REDIS_1[0], ESPRESSO[0], REDIS_1[0]):
        if use_async:
            asyncio.run(chain.ainvoke({"question": question}, config(rec)))
        else:
            chain.invoke({"question": question}, config(rec))
    stored = sessions["s"].messages
    assert texts(stored) == [REDIS_1[0], "answer 0", ESPRESSO[0], "answer 1", REDIS_1[0], "answer 0"]
    assert stored[5].id != stored[1].id


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("mode", ["list", "dict"])
def test_message_like_input_is_gated_and_every_turn_stored(use_async: bool, mode: str) -> None:
    """(role, text) tuples and role/content dicts as the chain's input: gated like messages, and
    the question and answer of every call stored (they used to be lost in upstream's listener)."""
    sessions, rec = Sessions(), Recorder()
    seeded(sessions("s"))
    if mode == "list":
        chain = GatedRunnableWithMessageHistory(numbered_answers(), sessions)
    else:
        prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), MessagesPlaceholder("question")])
        chain = GatedRunnableWithMessageHistory(
            prompt | numbered_answers(), sessions, input_messages_key="question", history_messages_key="history"
        )
    asked = []
    for n, question in enumerate(([("human", ESPRESSO_QUERY)], [{"role": "user", "content": REDIS_QUERY}])):
        value = question if mode == "list" else {"question": question}
        if use_async:
            asyncio.run(chain.ainvoke(value, config(rec)))
        else:
            chain.invoke(value, config(rec))
        query = ESPRESSO_QUERY if n == 0 else REDIS_QUERY
        asked += [query, f"answer {n}"]
        assert texts(sessions["s"].messages) == [*FULL, *asked]
    assert texts(rec.calls[0]) == [*ESPRESSO, ESPRESSO_QUERY]
    assert texts(rec.last) == [*REDIS_1, *REDIS_2, REDIS_QUERY]


@pytest.mark.parametrize("bad", [[1], "token_budget=5", GateOptions(token_budget=5)])
def test_gate_options_that_are_no_dict_are_the_librarys_type_error(bad: Any) -> None:
    with pytest.raises(InvalidTypeError, match=r"gate_options must be a dict.*\{'options': "):
        dict_chain(Sessions(), gate_options=bad)
    chain = dict_chain(Sessions(), gate_options={"options": GateOptions(token_budget=5)})  # a record goes so
    assert chain.gate_options is not None
