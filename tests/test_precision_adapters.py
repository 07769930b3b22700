"""Precision through the adapters: interleaved topics stay apart, content-free follow-ups keep
their topic, an announced switch keeps nothing, a return keeps the topic returned to.

Each chat runs through the real framework object (RunnableWithMessageHistory's gated twin,
LlamaIndex's SimpleChatEngine, LangChain's create_agent) with a scripted model that records
what it receives, so the tests check what a model would actually have been sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from llama_index.core.chat_engine import SimpleChatEngine

from langchain_gatekeeper.gate import GatedRunnableWithMessageHistory
from langchain_gatekeeper.history import GatekeeperChatMessageHistory
from langchain_gatekeeper.middleware import GatekeeperMiddleware
from lc_support import Recorder, answers
from li_support import ScriptedLLM
from llamaindex_gatekeeper import GatekeeperMemory
from test_lc_middleware import call, scripted

REDIS = [
    ("How long should a Redis lock TTL be?", "A few times the p99 of the critical section, renewed by a watchdog."),
    ("What happens if the Redis lock watchdog dies?", "The lock expires after its TTL and another client can take it."),
    ("Can a client extend a Redis lock TTL it already holds?", "Yes, with PEXPIRE, after checking the value is its token."),
]
MOKA = [
    ("How much coffee goes into a moka pot?", "Fill the basket level with medium-fine coffee, about 15 g; do not tamp."),
    ("Should the moka pot bottom chamber get hot water?", "Yes: hot water shortens the time on the stove, so nothing burns."),
    ("How do I clean the moka pot gasket?", "Rinse it with warm water only; soap and the dishwasher dry the rubber out."),
]
INTERLEAVED = [REDIS[0], MOKA[0], REDIS[1], MOKA[1], REDIS[2], MOKA[2]]
"""Redis, moka pot, Redis, moka pot, Redis, moka pot: each question needs only its own topic."""
REDIS_WORDS = ("Redis", "watchdog", "TTL", "PEXPIRE")
MOKA_WORDS = ("moka", "coffee", "gasket", "stove")


def topic_of(question: str) -> list[tuple[str, str]]:
    return REDIS if any(question == q for q, _ in REDIS) else MOKA


def assert_only_its_topic(question: str, earlier: list[tuple[str, str]], received: str) -> None:
    """``received`` holds every earlier turn of the question's topic and nothing of the other."""
    own = [turn for turn in earlier if turn in topic_of(question)]
    for user, answer in own:
        assert user in received and answer in received, f"{question!r} lost its own turn {user!r}"
    other = MOKA_WORDS if topic_of(question) is REDIS else REDIS_WORDS
    leaked = [w for w in other if w in received.replace(question, "")]
    assert not leaked, f"{question!r} was sent the other topic's turns ({leaked})"


# -- LangChain: GatedRunnableWithMessageHistory ----------------------------------------------------
PROMPT = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])


def lc_chat(questions_and_answers: list[tuple[str, str]]) -> tuple[GatedRunnableWithMessageHistory, Recorder]:
    histories: dict[str, GatekeeperChatMessageHistory] = {}
    model = answers(*(a for _, a in questions_and_answers), *(f"answer {i}" for i in range(10)))
    chain = GatedRunnableWithMessageHistory(
        PROMPT | model,
        lambda sid: histories.setdefault(sid, GatekeeperChatMessageHistory(sid)),
        input_messages_key="question",
        history_messages_key="history",
    )
    return chain, Recorder()


def lc_ask(chain: GatedRunnableWithMessageHistory, recorder: Recorder, question: str) -> str:
    chain.invoke({"question": question}, {"configurable": {"session_id": "s"}, "callbacks": [recorder]})
    return recorder.last_text()


@pytest.mark.parametrize("length", [4, 6])
def test_langchain_chain_keeps_interleaved_topics_apart(length: int) -> None:
    chat = INTERLEAVED[:length]
    chain, recorder = lc_chat(chat)
    for k, (question, _) in enumerate(chat):
        assert_only_its_topic(question, chat[:k], lc_ask(chain, recorder, question))


@pytest.mark.parametrize("follow_up", ["Why?", "Tell me more", "Try again", "Is that right?", "为什么？", "详细说说"])
def test_langchain_chain_sends_a_content_free_follow_up_its_topic(follow_up: str) -> None:
    chat = INTERLEAVED[:4]
    chain, recorder = lc_chat(chat)
    for question, _ in chat:
        lc_ask(chain, recorder, question)
    received = lc_ask(chain, recorder, follow_up)
    assert MOKA[1][0] in received and MOKA[1][1] in received  # the latest turn, whole
    assert not any(w in received for w in REDIS_WORDS)


def test_langchain_chain_sends_nothing_on_a_switch_to_an_unseen_topic_and_the_topic_on_a_return() -> None:
    chat = INTERLEAVED[:4]
    chain, recorder = lc_chat(chat)
    for question, _ in chat:
        lc_ask(chain, recorder, question)
    switch = "By the way, how often should I water a cactus?"
    assert lc_ask(chain, recorder, switch).strip() == switch
    received = lc_ask(chain, recorder, "Back to the Redis lock: is Redlock safer?")
    assert REDIS[0][1] in received and REDIS[1][1] in received
    assert not any(w in received for w in MOKA_WORDS) and "cactus" not in received


# -- LlamaIndex: SimpleChatEngine with GatekeeperMemory ---------------------------------------------
def test_llamaindex_simple_chat_engine_keeps_interleaved_topics_apart() -> None:
    llm = ScriptedLLM([a for _, a in INTERLEAVED])
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for k, (question, _) in enumerate(INTERLEAVED):
        engine.chat(question)
        assert_only_its_topic(question, INTERLEAVED[:k], llm.prompts[-1])


@pytest.mark.parametrize("follow_up", ["Why?", "为什么？", "Tell me more"])
def test_llamaindex_content_free_follow_up_keeps_the_latest_turn(follow_up: str) -> None:
    llm = ScriptedLLM([a for _, a in INTERLEAVED[:4]])
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for question, _ in INTERLEAVED[:4]:
        engine.chat(question)
    engine.chat(follow_up)
    assert MOKA[1][1] in llm.prompts[-1]
    assert not any(w in llm.prompts[-1] for w in REDIS_WORDS)


# -- LangChain agents: "Try again" after a failed tool call ------------------------------------------
@tool
def export_job_duration(job: str) -> str:
    """How long a batch job runs."""
    return "The nightly export job runs for at most 45 seconds."


def test_agent_try_again_after_a_failed_tool_call_is_sent_the_error_and_its_call() -> None:
    model = scripted([
        call("export_job_durations", {"job": "export"}, "call-1"),  # no such tool: an error ToolMessage
        AIMessage("Sorry, the lookup failed."),
        call("export_job_duration", {"job": "export"}, "call-2"),
        AIMessage("It runs for at most 45 seconds, so a 2-minute TTL is safe."),
    ])
    agent = create_agent(model, [export_job_duration], checkpointer=InMemorySaver(),
                         middleware=[GatekeeperMiddleware(token_budget=2000)])
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("How long does the nightly export job take?")]}, config)
    agent.invoke({"messages": [HumanMessage("Try again")]}, config)
    first_call_of_retry = model.received[2]
    errors = [m for m in first_call_of_retry if isinstance(m, ToolMessage)]
    assert errors and errors[0].tool_call_id == "call-1" and "export_job_durations" in errors[0].text
    calls = [m for m in first_call_of_retry if isinstance(m, AIMessage) and m.tool_calls]
    assert calls and calls[0].tool_calls[0]["id"] == "call-1"  # the pair travels whole
    assert first_call_of_retry[0].text == "How long does the nightly export job take?"
    assert first_call_of_retry[-1].text == "Try again"


def test_agent_keeps_interleaved_topics_apart() -> None:
    model = scripted([AIMessage(a) for _, a in INTERLEAVED])
    agent = create_agent(model, [export_job_duration], checkpointer=InMemorySaver(),
                         middleware=[GatekeeperMiddleware(token_budget=2000)])
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    for k, (question, _) in enumerate(INTERLEAVED):
        asyncio.run(agent.ainvoke({"messages": [HumanMessage(question)]}, config))
        received = "\n".join(m.text for m in model.received[-1])
        assert_only_its_topic(question, INTERLEAVED[:k], received)


REPLICATION = [
    ("How does PostgreSQL streaming replication work?",
     "The primary ships its WAL records to each standby over a replication connection and the standby replays "
     "them, so it trails the primary by a small replication lag."),
    ("What about its lag?",
     "Watch replay_lag in pg_stat_replication on the primary; with asynchronous replication it is usually "
     "milliseconds, and synchronous replication trades it for commit latency."),
    ("Is synchronous mode worth it for that setup?",
     "Only if losing the last transactions on a failover is unacceptable: synchronous_commit makes every commit "
     "wait for a standby, so a slow standby slows the primary."),
    ("Can a standby take over if the primary dies?",
     "Yes: promote it with pg_ctl promote or pg_promote(), then point the clients and the other standbys at it."),
]
SOURDOUGH = [
    ("How do I keep a sourdough starter alive?",
     "Feed it equal weights of flour and water once a day at room temperature, or once a week from the fridge."),
    ("Should I use whole wheat flour for it?",
     "A spoonful of whole wheat or rye in each feeding makes the starter livelier; plain white flour works too."),
    ("How long until the bread tastes sour?",
     "A longer, cooler proof makes the loaf more sour: shape it in the evening and bake it from the fridge next morning."),
    ("And how do I store it over a holiday?",
     "Feed the starter, let it rise an hour, then keep it in the fridge; it survives two weeks without a feeding."),
]
ABAB = [turn for pair in zip(REPLICATION, SOURDOUGH) for turn in pair]
"""Replication, sourdough, replication, ...: eight turns, pronoun follow-ups in both topics."""
REPLICATION_WORDS = ("WAL", "standby", "replay_lag", "synchronous_commit", "promote")
SOURDOUGH_WORDS = ("flour", "starter", "loaf", "rye", "proof")


def test_an_agent_alternating_two_topics_with_pronoun_follow_ups_sends_at_most_one_call_the_other_topic() -> None:
    model = scripted([AIMessage(a) for _, a in ABAB])
    agent = create_agent(model, [export_job_duration], checkpointer=InMemorySaver(),
                         middleware=[GatekeeperMiddleware(token_budget=2000)])
    config: dict[str, Any] = {"configurable": {"thread_id": "abab"}}
    polluted = []
    for k, (question, _) in enumerate(ABAB):
        asyncio.run(agent.ainvoke({"messages": [HumanMessage(question)]}, config))
        received = "\n".join(m.text for m in model.received[-1]).replace(question, "")
        other = SOURDOUGH_WORDS if (question, ABAB[k][1]) in REPLICATION else REPLICATION_WORDS
        if any(w in received for w in other):
            polluted.append(question)
    assert len(polluted) <= 1, f"calls sent the other topic: {polluted}"
