"""GatekeeperMiddleware, edit_thread and undo_thread through a real create_agent + InMemorySaver.

A scripted, tool-calling fake chat model records what it receives on every call, so
the tests check what the model actually saw, not what the middleware meant to send.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain.tools import ToolRuntime
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import Field

from context_gatekeeper import EditError, HistoryError, InvalidInputError, ModelUnavailableError
from context_gatekeeper.testing import ScriptedModel
from langchain_gatekeeper.middleware import GatekeeperMiddleware
from langchain_gatekeeper.threads import EDITS_KEY, edit_thread, aedit_thread, undo_thread, aundo_thread
from lc_support import check_steps, check_tool_pairs
from net_support import no_network

JOB = "The nightly export job runs for at most 45 seconds."


@tool
def lookup_job_duration(job: str) -> str:
    """How long a batch job runs."""
    return JOB


class ToolCallingFake(GenericFakeChatModel):
    """GenericFakeChatModel that accepts tools and records every message list it receives."""

    received: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ToolCallingFake":
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.received.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


def scripted(replies: list[AIMessage]) -> ToolCallingFake:
    iterator: Iterator[AIMessage] = iter(replies)
    return ToolCallingFake(messages=iterator)


def swap_editor(old: str, new: str):
    """A scripted edit reply: replace ``old`` by ``new`` in every shown message that has it."""

    def reply(messages: list[dict[str, Any]]) -> str:
        shown = json.loads(re.search(r"<conversation>\n(.*)\n</conversation>", messages[1]["content"], re.S).group(1))
        ops = [{"op": "replace", "id": m["id"], "content": m["content"].replace(old, new)} for m in shown if old in m["content"]]
        return json.dumps({"operations": ops})

    return reply


def texts(messages: list[BaseMessage]) -> str:
    return "\n".join(m.text for m in messages)


CONFIG = {"configurable": {"thread_id": "t1"}}

REDIS = "How long should the Redis lock TTL be for the nightly export job?"
REDIS_ANSWER = "Set the Redis lock TTL to 90 seconds, twice the export, and renew the lock with a watchdog."
COFFEE = "By the way, what grind size should I use for espresso at home?"
COFFEE_ANSWER = "Use a fine espresso grind, like table salt, and pull 25 seconds."
FOLLOW_UP = "How often should the watchdog renew the Redis lock for the export job?"


def redis_agent(model: ToolCallingFake, **options: Any) -> Any:
    return create_agent(
        model,
        [lookup_job_duration],
        system_prompt="You are a concise engineering assistant.",
        middleware=[GatekeeperMiddleware(**options)],
        checkpointer=InMemorySaver(),
    )


def redis_script() -> list[AIMessage]:
    return [
        call("lookup_job_duration", {"job": "nightly export"}, "call_1"),
        AIMessage(content=REDIS_ANSWER),
        AIMessage(content=COFFEE_ANSWER),
        call("lookup_job_duration", {"job": "nightly export"}, "call_2"),
        AIMessage(content="Renew the Redis lock every 30 seconds, a third of the TTL."),
    ]


def run_redis_thread(agent: Any) -> None:
    for text in (REDIS, COFFEE, FOLLOW_UP):
        agent.invoke({"messages": [HumanMessage(text)]}, CONFIG)


# -- gating ------------------------------------------------------------------------------------
def test_gated_view_drops_the_off_topic_turn_and_keeps_the_relevant_one() -> None:
    model = scripted(redis_script())
    agent = redis_agent(model)
    run_redis_thread(agent)
    assert len(model.received) == 5
    last = model.received[-1]  # the follow-up's second call, inside its tool loop
    seen = texts(last)
    assert REDIS in seen and REDIS_ANSWER in seen
    assert COFFEE not in seen and COFFEE_ANSWER not in seen
    assert last[0].type == "system" and last[1].text == REDIS  # starts on a user message after the system prompt
    check_tool_pairs(last)
    # the current turn's tool loop is whole: the follow-up, its tool call and the result
    assert [m.type for m in last[-3:]] == ["human", "ai", "tool"] and last[-3].text == FOLLOW_UP
    assert last[-1].tool_call_id == "call_2"
    # the earlier turn's tool pair came along with it
    assert any(isinstance(m, ToolMessage) and m.tool_call_id == "call_1" for m in last)


def test_stored_state_stays_complete() -> None:
    model = scripted(redis_script())
    agent = redis_agent(model)
    run_redis_thread(agent)
    stored = agent.get_state(CONFIG).values["messages"]
    assert [m.type for m in stored] == ["human", "ai", "tool", "ai", "human", "ai", "human", "ai", "tool", "ai"]
    assert COFFEE in texts(stored) and COFFEE_ANSWER in texts(stored)


def test_tight_budget_keeps_pinned_content_and_the_current_turn() -> None:
    model = scripted(redis_script())
    agent = redis_agent(model, token_budget=5)
    run_redis_thread(agent)
    last = model.received[-1]
    assert [m.type for m in last] == ["system", "human", "ai", "tool"]
    assert last[1].text == FOLLOW_UP


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_dynamic_prompt_listed_before_the_middleware_is_priced_within_the_budget(use_async: bool) -> None:
    """A prompt-setting middleware listed before the gatekeeper (outer to it, as the guide says to
    list it) hands it the request with its prompt: what the model gets before the current turn,
    that prompt included, stays within token_budget."""
    from langchain.agents.middleware import dynamic_prompt

    long_prompt = "You help with the ACME platform. " + "Follow the style guide carefully. " * 40

    @dynamic_prompt
    def prompt(request: Any) -> str:
        return long_prompt

    model = scripted([AIMessage(f"Set the Redis lock TTL {i} above the job and renew it.") for i in range(8)])
    agent = create_agent(model, [], checkpointer=InMemorySaver(), middleware=[
        prompt, GatekeeperMiddleware(token_budget=300, token_counter=lambda t: len(t.split()), message_overhead=0)])

    async def run() -> None:
        for i in range(8):
            await agent.ainvoke({"messages": [HumanMessage(f"How long should Redis lock TTL {i} be?")]}, CONFIG)

    if use_async:
        asyncio.run(run())
    else:
        for i in range(8):
            agent.invoke({"messages": [HumanMessage(f"How long should Redis lock TTL {i} be?")]}, CONFIG)
    sent = model.received[-1]
    assert sent[0].text == long_prompt and len(sent) > 2  # the prompt and some earlier turns
    assert sum(len(m.text.split()) for m in sent[:-1]) <= 300


def test_gatekeeper_is_kept_per_thread_and_updated_incrementally() -> None:
    middleware = GatekeeperMiddleware()
    model = scripted(redis_script())
    agent = create_agent(model, [lookup_job_duration], middleware=[middleware], checkpointer=InMemorySaver())
    run_redis_thread(agent)
    gk = middleware.views.gatekeeper("t1")
    assert [t.id for t in gk.turns] == [1, 2]  # ids stable: turns were added, never rebuilt
    assert middleware.views.gatekeeper("other") is not gk


def test_incremental_view_indexes_only_new_turns_on_a_long_thread() -> None:
    # speed is measured in benchmarks/speed.py; here: a grown thread is never indexed again from scratch
    middleware = GatekeeperMiddleware(token_counter=len, message_overhead=0)
    history: list[BaseMessage] = []
    for i in range(300):
        history += [HumanMessage(f"question {i} about topic{i % 17} details", id=f"h{i}"),
                    AIMessage(f"answer {i} on topic{i % 17}", id=f"a{i}")]
    query = HumanMessage("more on topic3 please", id="q")
    middleware.views.view([*history, query], thread="long")  # first call indexes everything
    gatekeeper, index = middleware.views.gatekeeper("long"), middleware.views.index("long")
    ids = [t.id for t in gatekeeper.turns]
    for i in range(10):
        history += [HumanMessage(f"next {i} topic3", id=f"n{i}"), AIMessage("ok", id=f"m{i}")]
        view = middleware.views.view([*history, query], thread="long")
    assert view[-1].id == "q" and view[0].type == "human"
    assert index.builds == 1 and len(gatekeeper) == 310
    assert [t.id for t in gatekeeper.turns][:300] == ids  # the 300 turns kept their ids: not re-added


def test_summary_messages_are_pinned() -> None:
    middleware = GatekeeperMiddleware()
    summary = HumanMessage("Summary: we sized a Redis lock.", id="s", additional_kwargs={"lc_source": "summarization"})
    messages = [summary, HumanMessage(COFFEE, id="c"), AIMessage(COFFEE_ANSWER, id="ca"), HumanMessage(FOLLOW_UP, id="q")]
    view = middleware.views.view(messages, thread="s")
    assert view[0].id == "s" and view[-1].id == "q"


@tool
def screenshot(url: str, runtime: ToolRuntime) -> Command:
    """Take a screenshot of a page and show it to the model."""
    image = HumanMessage([{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}])
    return Command(update={"messages": [ToolMessage("screenshot attached below", tool_call_id=runtime.tool_call_id), image]})


CHECKOUT = ("Why can't customers find the checkout button on https://acme.test/checkout? Look at the page and "
            "tell me what blocks it; it started after Tuesday's release of the cookie banner.")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_message_a_tool_adds_keeps_the_runs_question_and_tool_calls(use_async: bool) -> None:
    """A tool that hands the model an image (a HumanMessage in its Command, after its result):
    the next model call still gets the run's question, its tool call and result, and the image;
    the earlier off-topic turn is still gated out."""
    model = scripted([AIMessage(COFFEE_ANSWER), call("screenshot", {"url": "https://acme.test/checkout"}, "shot"),
                      AIMessage("The cookie banner covers the checkout button.")])
    agent = create_agent(model, [screenshot], system_prompt="You are a QA assistant.",
                         middleware=[GatekeeperMiddleware(token_budget=30)], checkpointer=InMemorySaver())

    async def run() -> None:
        for text in (COFFEE, CHECKOUT):
            await agent.ainvoke({"messages": [HumanMessage(text)]}, CONFIG)

    if use_async:
        asyncio.run(run())
    else:
        for text in (COFFEE, CHECKOUT):
            agent.invoke({"messages": [HumanMessage(text)]}, CONFIG)
    last = model.received[-1]
    assert [m.type for m in last] == ["system", "human", "ai", "tool", "human"] and last[1].text == CHECKOUT
    assert last[3].tool_call_id == "shot" and last[4].content[0]["type"] == "image_url"
    check_tool_pairs(last)


@tool
def page_text(url: str, runtime: ToolRuntime) -> Command:
    """Fetch a page and show its text to the model."""
    text = HumanMessage("The page's text: Accept cookies. Checkout. Your basket is empty.")
    return Command(update={"messages": [ToolMessage("page fetched, text below", tool_call_id=runtime.tool_call_id), text]})


@tool(return_direct=True)
def kb_article(topic: str) -> str:
    """Look a topic up in the knowledge base and hand the article straight to the user."""
    return f"Knowledge base article about {topic}: " + f"{topic} details and numbers. " * 40


def test_a_text_a_tool_adds_keeps_the_runs_question() -> None:
    """A tool that hands the model text as a HumanMessage: the run's input is known to the
    middleware (it notes it when the run starts), so the text is the tool's, not the question."""
    model = scripted([AIMessage(COFFEE_ANSWER), call("page_text", {"url": "https://acme.test/checkout"}, "page"),
                      AIMessage("The basket is empty, so the checkout button is hidden.")])
    agent = create_agent(model, [page_text], middleware=[GatekeeperMiddleware(token_budget=30)],
                         checkpointer=InMemorySaver())
    for text in (COFFEE, CHECKOUT):
        agent.invoke({"messages": [HumanMessage(text)]}, CONFIG)
    last = model.received[-1]
    assert [m.type for m in last] == ["human", "ai", "tool", "human"] and last[0].text == CHECKOUT
    check_tool_pairs(last)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_runs_that_end_on_a_tool_result_are_earlier_turns_for_the_next_run(use_async: bool) -> None:
    """A return_direct tool ends each run on its result, with no answer after it: the next run's
    question is its own current turn, and the runs before it are gated within the budget (they
    were all taken for the current turn and sent whole: 1,805 tokens for a budget of 300)."""
    topics = ["redis lock ttl", "postgres jsonb gin index", "kubernetes liveness probe", "sourdough hydration"]
    model = scripted([call("kb_article", {"topic": t}, f"kb{n}") for n, t in enumerate(topics)])
    agent = create_agent(model, [kb_article], middleware=[GatekeeperMiddleware(token_budget=300)],
                         checkpointer=InMemorySaver())
    questions = [f"What does the knowledge base say about {t}?" for t in topics]

    async def run() -> None:
        for text in questions:
            await agent.ainvoke({"messages": [HumanMessage(text)]}, CONFIG)

    if use_async:
        asyncio.run(run())
    else:
        for text in questions:
            agent.invoke({"messages": [HumanMessage(text)]}, CONFIG)
    assert agent.get_state(CONFIG).values["messages"][-1].type == "tool"  # each run ended on the tool's result
    last = model.received[-1]
    assert last[-1].text == questions[-1]
    assert [m.text for m in last if m.type == "human"] == [questions[-1]]  # no earlier run joined it
    check_tool_pairs(last)


def test_a_message_a_middleware_adds_in_the_run_keeps_the_runs_question() -> None:
    """An after_model guard that asks the model again in the same run (a HumanMessage and a
    jump back): the run's recorded input keeps the question and the first answer in the current
    turn, whatever the earlier runs (the guard's message alone was taken for the question)."""
    from langchain.agents.middleware import after_model

    @after_model(can_jump_to=["model"])
    def guard(state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and "source" not in last.text:
            return {"messages": [HumanMessage("Your answer has no citation. Cite a source and answer again.")],
                    "jump_to": "model"}
        return None

    replies = [AIMessage(f"Grind the espresso beans finer {i}. source: barista guide") for i in range(4)]
    model = scripted([*replies, AIMessage("Use repeatable read."), AIMessage("Serializable; source: the docs")])
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=100), guard],
                         checkpointer=InMemorySaver())
    for i in range(4):
        agent.invoke({"messages": [HumanMessage(f"How do I tune espresso grind size {i}?")]}, CONFIG)
    question = "Which postgres isolation level prevents write skew for the billing ledger transfers?"
    agent.invoke({"messages": [HumanMessage(question)]}, CONFIG)
    last = model.received[-1]
    assert [m.text for m in last[-3:]] == [question, "Use repeatable read.",
                                           "Your answer has no citation. Cite a source and answer again."]
    assert not any("espresso" in m.text for m in last)


@tool
def shot_image(url: str, runtime: ToolRuntime) -> Command:
    """Screenshot a page and show it to the model (its result, then the image)."""
    image = HumanMessage([{"type": "image", "url": "https://x.test/shot.png"}])
    return Command(update={"messages": [ToolMessage("screenshot attached below", tool_call_id=runtime.tool_call_id), image]})


@tool
def read_config(name: str) -> str:
    """Read a config value."""
    return "checkout.banner.zindex = 9999 ; checkout.button.zindex = 10"


def parallel_step() -> AIMessage:
    return AIMessage("", tool_calls=[
        {"name": "shot_image", "args": {"url": "https://acme.test/checkout"}, "id": "shot", "type": "tool_call"},
        {"name": "read_config", "args": {"name": "checkout zindex"}, "id": "cfg", "type": "tool_call"}])


@pytest.mark.parametrize("budget", [0, 20, 40, 60, 80, 120, 400])
def test_an_earlier_parallel_step_with_a_delivered_image_between_its_results_is_never_split(budget: int) -> None:
    """Parallel tool calls where one tool hands the model an image (a HumanMessage in its Command):
    LangGraph stores call, result, image, other result.  In later runs that step is an earlier
    turn, kept or dropped whole at every budget: no sent list has a result without its call
    or a call without its result (the image started a turn, so the second result went with it
    and its call was left behind)."""
    model = scripted([parallel_step(), AIMessage("The cookie banner (z-index 9999) covers the checkout button."),
                      AIMessage("Medium-fine grind."), AIMessage("It is 9999.")])
    agent = create_agent(model, [shot_image, read_config], middleware=[GatekeeperMiddleware(token_budget=budget)],
                         checkpointer=InMemorySaver())
    for text in ("Why is the checkout button hidden? check the page and its zindex config",
                 "Best espresso grind for a moka pot?", "What was the banner zindex config value again?"):
        agent.invoke({"messages": [HumanMessage(text)]}, CONFIG)
    stored = agent.get_state(CONFIG).values["messages"]
    assert [m.type for m in stored[:6]] == ["human", "ai", "tool", "human", "tool", "ai"]  # the shape LangGraph stores
    assert len(model.received) == 4
    for sent in model.received:
        check_steps(sent)
    last = model.received[-1]
    assert last[-1].text == "What was the banner zindex config value again?"
    assert ("cfg" in {m.tool_call_id for m in last if isinstance(m, ToolMessage)}) == any(
        m.type == "ai" and m.tool_calls for m in last)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_question_sent_with_an_image_in_one_invoke_is_the_current_turn_whatever_the_budget(use_async: bool) -> None:
    """One invoke whose input is two messages, the question and then the image it is about: the
    whole input is the current turn, sent and never charged to the budget (only the image's id
    was recorded as the run's input, so the question competed for a budget of 30 and was left
    out: the model got the image alone)."""
    model = scripted([AIMessage("Medium-fine grind."), AIMessage("Use a 90 second TTL.")])
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=30)], checkpointer=InMemorySaver())
    question = HumanMessage("Here is the stack trace from our checkout service after the deploy; why does the Redis lock "
                            "acquisition time out and what TTL should we use for the 45 second export job?", id="q")
    image = HumanMessage([{"type": "image", "url": "https://x.test/trace.png"}], id="img")

    async def run() -> None:
        await agent.ainvoke({"messages": [HumanMessage("Best espresso grind for a moka pot?")]}, CONFIG)
        await agent.ainvoke({"messages": [question, image]}, CONFIG)

    if use_async:
        asyncio.run(run())
    else:
        agent.invoke({"messages": [HumanMessage("Best espresso grind for a moka pot?")]}, CONFIG)
        agent.invoke({"messages": [question, image]}, CONFIG)
    assert [m.id for m in model.received[-1][-2:]] == ["q", "img"]
    assert agent.get_state(CONFIG).values["gatekeeper_turn"] == ["q", "img"]  # the first and last of the run's input


def test_a_run_that_failed_before_answering_leaves_its_question_out_of_the_next_runs_input() -> None:
    """A run whose model call failed leaves its question unanswered at the end of the thread: the
    next run's input starts after it (the old question is an earlier, unanswered message, joining
    the current turn only within the budget), and an edit command sent as the last message of a
    run's input is still routed."""

    class FailsOnce(ToolCallingFake):
        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            if not self.received:
                self.received.append(list(messages))
                raise RuntimeError("provider down")
            return super()._generate(messages, *args, **kwargs)

    model = FailsOnce(messages=iter([AIMessage("Use a 90 second TTL.")]))
    editor = ScriptedModel([swap_editor("90 second", "120 second")])
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=5, model=editor)],
                         checkpointer=InMemorySaver())
    with pytest.raises(RuntimeError, match="provider down"):
        agent.invoke({"messages": [HumanMessage("Best espresso grind for a moka pot, at home?", id="old")]}, CONFIG)
    agent.invoke({"messages": [HumanMessage("Redis lock TTL for a 45 second job?", id="new")]}, CONFIG)
    assert agent.get_state(CONFIG).values["gatekeeper_turn"] == "new"
    assert [m.id for m in model.received[-1]] == ["new"]  # the old question does not fit a budget of 5
    agent.invoke({"messages": [HumanMessage("see the log", id="log"), HumanMessage("/edit it is 120", id="cmd")]},
                 CONFIG)
    assert len(editor.calls) == 1 and agent.get_state(CONFIG).values["gatekeeper_turn"] == ["log", "cmd"]
    assert "120 second" in texts(agent.get_state(CONFIG).values["messages"])


def record(messages: list[BaseMessage], recorded: Any = None) -> Any:
    """The run input :meth:`GatekeeperMiddleware.before_agent` records for a run starting on
    ``messages`` after a run that recorded ``recorded``."""
    from langchain_gatekeeper.threads import TURN_KEY

    state: dict[str, Any] = {"messages": messages}
    if recorded is not None:
        state[TURN_KEY] = recorded
    update = GatekeeperMiddleware(token_budget=500).before_agent(state, None)  # type: ignore[arg-type]
    return recorded if update is None else update[TURN_KEY]


def test_before_agent_records_where_a_failed_runs_input_ends_and_keeps_it_for_a_retry() -> None:
    """The record holds the first and the last id of a run's input (the id alone for one message):
    a run after a failed one whose input was [question, image] starts after the image (the image
    was recorded as the next input's first: the old image went with the new question), and a run
    with no new input keeps the previous input (the start of the unanswered messages was taken: both
    failed questions became the current turn)."""
    history: list[BaseMessage] = [HumanMessage("hi", id="h0"), AIMessage("hello", id="a0")]
    q1 = HumanMessage("What is in this photo?", id="q1")
    img1 = HumanMessage([{"type": "image", "url": "https://x.test/1.png"}], id="img1")
    q2 = HumanMessage("Forget it: how long should a Redis TTL be?", id="q2")
    assert record([*history, q1, img1]) == ["q1", "img1"]
    assert record([*history, q1, img1, q2], ["q1", "img1"]) == "q2"  # (a) not img1
    assert record([*history, q1, img1, q2], "q2") == "q2"  # (b) a retry: not q1
    assert record([*history, q1, img1], ["q1", "img1"]) == ["q1", "img1"]  # a retry of a run of two
    assert record([*history, q1, img1, q2], "q1") == ["img1", "q2"]  # a record of one id (an older checkpoint's)
    assert record([*history, q1, AIMessage("A cat.", id="a1"), q2], ["q1", "img1"]) == "q2"  # answered
    assert record([*history, q1, AIMessage("A cat.", id="a1")], "q1") is None  # no new input


def test_before_agent_records_the_system_messages_a_runs_input_opens_with() -> None:
    """System messages right before the run's first human message, at the end of the thread as the
    run starts (an instruction sent with the question in one invoke), open the run's input; one
    that an earlier run's input opened with is an older reminder, never the next run's input, and a
    failed run's input, instruction and all, is left out of the next one's (kept for a retry)."""
    history: list[BaseMessage] = [HumanMessage("hi", id="h0"), AIMessage("hello", id="a0")]
    french = SystemMessage("Reply in French only.", id="fr")
    q1 = HumanMessage("How long should a Redis lock TTL be?", id="q1")
    img = HumanMessage([{"type": "image", "url": "https://x.test/1.png"}], id="img")
    q2 = HumanMessage("And the watchdog?", id="q2")
    assert record([*history, french, q1]) == ["fr", "q1"]
    assert record([*history, SystemMessage("Be brief.", id="b"), french, q1, img]) == ["b", "img"]
    assert record([*history, french, q1, AIMessage("Plus que le travail.", id="a1"), q2], ["fr", "q1"]) == "q2"
    assert record([*history, french, q1, q2], ["fr", "q1"]) == "q2"  # after a failed run
    assert record([*history, french, q1], ["fr", "q1"]) == ["fr", "q1"]  # a retry
    assert record([*history, french, q1, q2], "q1") == "q2"  # an older checkpoint's record of the failed run
    assert record([*history, q1, french, q2], "q1") == ["fr", "q2"]  # a new instruction after a failed run
    assert record([*history, french]) is None  # no question: no input


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_system_message_sent_with_the_question_in_one_invoke_is_the_current_turn(use_async: bool) -> None:
    """One invoke whose input is a per-request instruction, then the question: the whole input is
    the current turn, sent whole and never charged to the budget (only the question was recorded
    as the run's input, so the instruction was read as a reminder of the turn before, which a
    budget of 5 left out: the model never saw it); the next run's input is its own question."""
    model = scripted([AIMessage("Medium-fine grind."), AIMessage("Environ 90 secondes."), AIMessage("Toutes les 30 s.")])
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=5)], checkpointer=InMemorySaver())
    first = {"messages": [HumanMessage("Best espresso grind for a moka pot?")]}
    french = {"messages": [SystemMessage("Reply in French only.", id="fr"),
                           HumanMessage("How long should a Redis lock TTL be for a 45 second export job?", id="q")]}
    follow_up = {"messages": [HumanMessage("And how often should the watchdog renew it?", id="q2")]}

    async def run() -> None:
        for request in (first, french):
            await agent.ainvoke(request, CONFIG)

    if use_async:
        asyncio.run(run())
    else:
        for request in (first, french):
            agent.invoke(request, CONFIG)
    assert [m.id for m in model.received[-1]] == ["fr", "q"]
    assert agent.get_state(CONFIG).values["gatekeeper_turn"] == ["fr", "q"]
    agent.invoke(follow_up, CONFIG)
    assert agent.get_state(CONFIG).values["gatekeeper_turn"] == "q2"
    assert [m.id for m in model.received[-1]] == ["q2"]  # nothing earlier fits 5 tokens


class FailsFirst(ToolCallingFake):
    """Raises on its first ``failures`` calls (a provider down), then answers from its script."""

    failures: int = 1

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            self.received.append(list(messages))
            raise RuntimeError("provider down")
        return super()._generate(messages, *args, **kwargs)


def test_a_failed_run_of_a_question_and_an_image_leaves_the_image_out_of_the_next_runs_turn() -> None:
    """A run whose input was a question and an image fails before the model answers: the next
    run's current turn is its own question (the image was taken for the start of its input and
    sent with the new question whatever the budget)."""
    model = FailsFirst(messages=iter([AIMessage("Use a 90 second TTL.")]))
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=2)], checkpointer=InMemorySaver())
    photo = HumanMessage([{"type": "image", "url": "https://x.test/cat.png"}], id="img1")
    with pytest.raises(RuntimeError, match="provider down"):
        agent.invoke({"messages": [HumanMessage("What is in this photo?", id="q1"), photo]}, CONFIG)
    assert [m.id for m in model.received[-1]] == ["q1", "img1"]
    agent.invoke({"messages": [HumanMessage("Redis lock TTL for a 45 second job?", id="q2")]}, CONFIG)
    assert [m.id for m in model.received[-1]] == ["q2"]  # neither the old question nor its image fits 2 tokens
    assert agent.get_state(CONFIG).values["gatekeeper_turn"] == "q2"


@pytest.mark.parametrize("use_async", [False, True])
def test_a_run_retried_with_no_new_input_keeps_the_failed_runs_input_as_its_turn(use_async: bool) -> None:
    """Two runs fail before the model answers; a third with no new input retries the last: its
    current turn is that run's question alone (the start of the unanswered messages was taken:
    both failed questions were sent as the current turn whatever the budget)."""
    model = FailsFirst(messages=iter([AIMessage("Use a 90 second TTL.")]), failures=2)
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=5)], checkpointer=InMemorySaver())
    old = HumanMessage("Best espresso grind for a moka pot, at home?", id="q1")
    new = HumanMessage("Redis lock TTL for a 45 second job?", id="q2")

    async def run() -> None:
        for message in (old, new):
            with pytest.raises(RuntimeError, match="provider down"):
                await agent.ainvoke({"messages": [message]}, CONFIG)
        await agent.ainvoke({"messages": []}, CONFIG)

    if use_async:
        asyncio.run(run())
    else:
        for message in (old, new):
            with pytest.raises(RuntimeError, match="provider down"):
                agent.invoke({"messages": [message]}, CONFIG)
        agent.invoke({"messages": []}, CONFIG)
    assert [m.id for m in model.received[-1]] == ["q2"]  # the retry's view: q1 does not fit 5 tokens
    assert agent.get_state(CONFIG).values["gatekeeper_turn"] == "q2"
    assert texts(agent.get_state(CONFIG).values["messages"]).endswith("Use a 90 second TTL.")


MOKA_AND_REDIS = [
    ("Best espresso grind for a moka pot at home?", "Grind the espresso beans medium-fine for the moka pot."),
    ("What water temperature suits the moka pot espresso?", "Start the moka pot with hot water, near boiling."),
    ("Which Redis lock TTL suits a 45 second export job?", "Set the Redis lock TTL to 90 seconds for the export job."),
    ("How should the Redis lock watchdog renew the TTL?", "Renew the Redis lock every 30 seconds from a watchdog."),
]
ABANDONED = ["Redis lock watchdog renew interval for the export job?", "Should the Redis watchdog renew the lock TTL faster?"]
BACK_TO_MOKA = "And how fine should the espresso grind be for the moka pot?"


class Abandons(ToolCallingFake):
    """Answers from its script, except the questions of :data:`ABANDONED`: on those a run fails
    (``invoke``) or streams one chunk and never finishes (``astream``, which the user stops)."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        if messages[-1].text in ABANDONED:
            raise RuntimeError("provider down")
        return super()._generate(messages, *args, **kwargs)

    async def _astream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        from langchain_core.messages import AIMessageChunk
        from langchain_core.outputs import ChatGenerationChunk

        if messages[-1].text not in ABANDONED:
            async for chunk in super()._astream(messages, *args, **kwargs):
                yield chunk
            return
        yield ChatGenerationChunk(message=AIMessageChunk(content="Renew"))
        await asyncio.Event().wait()  # never answers: the user stops the run


@pytest.mark.parametrize("how", ["failed", "failed async", "stopped"])
def test_questions_left_unanswered_by_earlier_runs_never_select_the_next_runs_turns(how: str) -> None:
    """Runs that failed or that the user stopped leave their questions unanswered in the thread:
    the next run's query is its own input, so they select nothing (the thread gets the earlier
    turns a thread without them gets), and they are still sent, before the question, within the
    budget (their words pulled the Redis turns into an espresso question)."""
    from lc_support import Recorder

    async def scenario(abandon: bool) -> list[BaseMessage]:
        recorder = Recorder()
        model = Abandons(messages=iter([AIMessage(a) for _, a in MOKA_AND_REDIS] + [AIMessage("Medium-fine.")]),
                         callbacks=[recorder])
        agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=400)], checkpointer=InMemorySaver())

        async def ask(text: str) -> None:
            request = {"messages": [HumanMessage(text)]}
            await agent.ainvoke(request, CONFIG) if how != "failed" else agent.invoke(request, CONFIG)

        for question, _ in MOKA_AND_REDIS:
            await ask(question)
        for question in ABANDONED if abandon else ():
            if how == "stopped":
                stream = agent.astream({"messages": [HumanMessage(question)]}, CONFIG, stream_mode="messages")
                async for _ in stream:
                    break  # the first token streamed: the user presses stop
                await stream.aclose()
            else:
                with pytest.raises(RuntimeError, match="provider down"):
                    await ask(question)
        stored = (await agent.aget_state(CONFIG)).values["messages"]
        assert [m.text for m in stored[-2:]] == (ABANDONED if abandon else list(MOKA_AND_REDIS[-1]))  # unanswered
        await ask(BACK_TO_MOKA)
        return recorder.last

    alone, after = asyncio.run(scenario(False)), asyncio.run(scenario(True))
    assert [m.text for m in after[-3:]] == [*ABANDONED, BACK_TO_MOKA]  # sent: they fit the budget
    assert [m.text for m in after[:-3]] == [m.text for m in alone[:-1]]  # and selected nothing
    assert "Which Redis lock TTL suits a 45 second export job?" not in texts(after)


@tool
def cached_lookup(q: str) -> str:
    """Look something up."""
    return "Dublin"


def test_a_cached_answer_in_the_thread_is_edited_by_the_route_and_edit_thread() -> None:
    """An LLM cache hit is an AIMessage with usage_metadata {"total_cost": 0}, which LangChain's
    own validation refuses: edit_thread and the /edit route convert the thread through the core
    and back, and raised pydantic's ValidationError for it.  They edit it, and the cached
    answer reads back as it was stored."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    class CachedTools(FakeListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> "CachedTools":
            return self

    model = CachedTools(responses=["Dublin is the capital of Ireland."] * 3, cache=InMemoryCache())
    agent = create_agent(model, [cached_lookup], middleware=[GatekeeperMiddleware(model=swap_editor("Ireland", "Éire"))],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("Capital of Ireland?")]}, {"configurable": {"thread_id": "warm"}})
    agent.invoke({"messages": [HumanMessage("Capital of Ireland?")]}, CONFIG)  # the same prompt: a cache hit
    hit = agent.get_state(CONFIG).values["messages"][-1]
    assert hit.usage_metadata == {"total_cost": 0}
    entry = edit_thread(agent, CONFIG, "Éire, not Ireland", model=swap_editor("Ireland", "Éire"))
    assert entry.changed and "Éire" in texts(agent.get_state(CONFIG).values["messages"])
    undo_thread(agent, CONFIG)
    out = agent.invoke({"messages": [HumanMessage("/edit Éire, not Ireland")]}, CONFIG)
    assert out["messages"][-1].text.startswith("Edited the conversation")
    assert agent.get_state(CONFIG).values["messages"][1].usage_metadata == {"total_cost": 0}


# -- the /edit route --------------------------------------------------------------------------
IRELAND = "What was the GDP of Ireland in 2021?"
IRELAND_ANSWER = "Ireland's GDP in 2021 was about 500 billion USD."


def ireland_agent(edit_model: Any, main: ToolCallingFake) -> Any:
    return create_agent(
        main, [lookup_job_duration], middleware=[GatekeeperMiddleware(model=edit_model)], checkpointer=InMemorySaver()
    )


def test_edit_route_edits_the_thread_and_answers_with_the_diff_without_the_main_model() -> None:
    main = scripted([AIMessage(IRELAND_ANSWER), AIMessage("Iceland's population is about 380,000.")])
    editor = ScriptedModel([swap_editor("Ireland", "Iceland")])
    agent = ireland_agent(editor, main)
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    ids = [m.id for m in agent.get_state(CONFIG).values["messages"]]
    out = agent.invoke({"messages": [HumanMessage("/edit it was Iceland, not Ireland")]}, CONFIG)
    assert len(main.received) == 1  # the main model was not called for the edit
    assert len(editor.calls) == 1
    assert EDITS_KEY not in out  # private: not part of the agent's output
    reply = out["messages"][-1]
    assert reply.type == "ai" and "Edited the conversation" in reply.text
    assert "-What was the GDP of Ireland in 2021?" in reply.text and "+What was the GDP of Iceland in 2021?" in reply.text
    stored = agent.get_state(CONFIG).values["messages"]
    assert [m.id for m in stored[:2]] == ids  # ids preserved
    assert stored[0].text == "What was the GDP of Iceland in 2021?" and "Iceland's GDP" in stored[1].text
    assert len(stored) == 4  # the command and its confirmation are recorded
    # a later call sees the revised text and never the superseded one, nor the edit bookkeeping
    agent.invoke({"messages": [HumanMessage("And what was Iceland's GDP growth in 2021?")]}, CONFIG)
    seen = texts(main.received[-1])
    assert "Iceland" in seen and "Ireland" not in seen and "/edit" not in seen
    # undo restores the text and keeps the later turn
    entry = undo_thread(agent, CONFIG)
    assert entry.kind == "undo" and entry.target == 1
    stored = agent.get_state(CONFIG).values["messages"]
    assert stored[0].text == IRELAND and stored[1].text == IRELAND_ANSWER
    assert stored[-1].text == "Iceland's population is about 380,000."


@pytest.mark.parametrize("command, edits", [
    ("/edit\nit was Iceland, not Ireland", True), ("/edit\tit was Iceland", True), ("/Edit it was Iceland", True),
    ("  /EDIT it was Iceland", True), ("/edit", False), ("/edit   ", False),
])
def test_edit_commands_are_read_as_people_type_them(command: str, edits: bool) -> None:
    main = scripted([AIMessage(IRELAND_ANSWER), AIMessage("never sent")])
    editor = ScriptedModel([swap_editor("Ireland", "Iceland")])
    agent = ireland_agent(editor, main)
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    reply = agent.invoke({"messages": [HumanMessage(command)]}, CONFIG)["messages"][-1].text
    assert len(main.received) == 1  # never the main model: a bare command gets the usage hint
    assert len(editor.calls) == int(edits)
    assert ("Edited the conversation" in reply) if edits else reply.startswith("Say what to change after '/edit'")


def test_a_word_that_starts_like_the_edit_prefix_is_a_message() -> None:
    main = scripted([AIMessage(IRELAND_ANSWER), AIMessage("An editor is a program.")])
    agent = ireland_agent(ScriptedModel([]), main)
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    assert agent.invoke({"messages": [HumanMessage("/editor what is it?")]}, CONFIG)["messages"][-1].text == (
        "An editor is a program.")


def test_edit_route_with_a_malformed_edit_answers_and_changes_nothing() -> None:
    main = scripted([AIMessage(IRELAND_ANSWER)])
    editor = ScriptedModel(["not json at all", '{"operations": [{"op": "replace", "id": "99", "content": "x"}]}'])
    agent = ireland_agent(editor, main)
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    before = agent.get_state(CONFIG).values["messages"]
    out = agent.invoke({"messages": [HumanMessage("/edit it was Iceland")]}, CONFIG)
    assert "nothing was changed" in out["messages"][-1].text
    after = agent.get_state(CONFIG).values["messages"]
    assert [(m.id, m.text) for m in after[:2]] == [(m.id, m.text) for m in before]
    assert not agent.get_state(CONFIG).values.get(EDITS_KEY)
    assert len(main.received) == 1


def test_edit_route_with_a_langchain_chat_model_as_editor() -> None:
    editor = GenericFakeChatModel(messages=iter([AIMessage(
        '```json\n{"operations": [{"op": "replace", "id": "2", "content": "Iceland\'s GDP in 2021 was about 25 billion USD."}]}\n```'
    )]))
    main = scripted([AIMessage(IRELAND_ANSWER)])
    agent = ireland_agent(editor, main)
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    agent.invoke({"messages": [HumanMessage("/edit the answer is about Iceland")]}, CONFIG)
    assert agent.get_state(CONFIG).values["messages"][1].text.startswith("Iceland's GDP")


TRIP_SCHEMA = {"title": "Trip", "description": "The trip plan.", "type": "object",
               "properties": {"country": {"type": "string"}}, "required": ["country"]}


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("after", ["none", "after_model listed after", "after_model listed before"])
def test_an_edit_route_in_an_agent_with_a_tool_strategy_ends_the_run_on_its_reply(use_async: bool, after: str) -> None:
    """create_agent with response_format=ToolStrategy and no other tool loops from the model back to
    the model until a structured response comes: the route's reply ends the run, the main model
    never answers the command, and no structured response is made up for it, whatever other
    middleware's after_model hooks run on the reply (a jump in the route's Command alone would be
    gone by then)."""
    from langchain.agents.middleware import after_model
    from langchain.agents.structured_output import ToolStrategy

    seen: list[str] = []

    @after_model
    def watch(state: dict[str, Any], runtime: Any) -> None:
        seen.append(state["messages"][-1].text)

    gatekeeper = GatekeeperMiddleware(model=ScriptedModel([swap_editor("Ireland", "Iceland")]))
    middleware = {"none": [gatekeeper], "after_model listed after": [gatekeeper, watch],
                  "after_model listed before": [watch, gatekeeper]}[after]
    main = scripted([call("Trip", {"country": "Ireland"}, "so_1"), call("Trip", {"country": "never"}, "so_2")])
    agent = create_agent(main, [], response_format=ToolStrategy(TRIP_SCHEMA), middleware=middleware,
                         checkpointer=InMemorySaver())

    def run(text: str) -> dict[str, Any]:
        request = {"messages": [HumanMessage(text)]}
        return asyncio.run(agent.ainvoke(request, CONFIG)) if use_async else agent.invoke(request, CONFIG)

    assert run("Plan a trip to Ireland.")["structured_response"] == {"country": "Ireland"}
    out = run("/edit Iceland, not Ireland")
    assert len(main.received) == 1  # the main model never saw the command
    assert out.get("structured_response") is None
    stored = agent.get_state(CONFIG).values["messages"]
    assert stored[0].text == "Plan a trip to Iceland."
    assert [m.type for m in stored[-2:]] == ["human", "ai"] and stored[-1].text.startswith("Edited the conversation")
    if after == "after_model listed after":  # it runs before the route's hook ends the run: it saw the reply
        assert seen[-1].startswith("Edited the conversation")


def test_without_a_response_format_the_edit_routes_reply_reaches_every_after_model_hook() -> None:
    """In an agent without a response_format the run ends on the route's reply anyway (it calls no
    tool): the route's hook does not jump, so a middleware listed before it (whose after_model
    hook runs after it, e.g. output redaction) still sees the reply."""
    from langchain.agents.middleware import after_model

    seen: list[str] = []

    @after_model
    def watch(state: dict[str, Any], runtime: Any) -> None:
        seen.append(state["messages"][-1].text)

    main = scripted([AIMessage(IRELAND_ANSWER)])
    editor = ScriptedModel([swap_editor("Ireland", "Iceland")])
    agent = create_agent(main, [lookup_job_duration], middleware=[watch, GatekeeperMiddleware(model=editor)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    out = agent.invoke({"messages": [HumanMessage("/edit it was Iceland, not Ireland")]}, CONFIG)
    assert out["messages"][-1].text.startswith("Edited the conversation") and len(main.received) == 1
    assert seen == [IRELAND_ANSWER, out["messages"][-1].text]


# -- edit_thread / undo_thread ----------------------------------------------------------------
def test_edit_thread_then_later_calls_see_the_revision_and_undo_keeps_later_messages() -> None:
    model = scripted(redis_script() + [AIMessage("Keep the TTL at 120 seconds.")])
    agent = redis_agent(model)
    run_redis_thread(agent)
    before = agent.get_state(CONFIG).values["messages"]
    entry = edit_thread(agent, CONFIG, "the TTL is 120 seconds", ScriptedModel([swap_editor("90 seconds", "120 seconds")]))
    assert entry.changed and entry.kind == "edit" and "+Set the Redis lock TTL to 120 seconds" in str(entry)
    edited = agent.get_state(CONFIG).values["messages"]
    assert [m.id for m in edited] == [m.id for m in before]
    assert isinstance(edited[1], AIMessage) and edited[1].tool_calls  # untouched tool call kept
    agent.invoke({"messages": [HumanMessage("Should the Redis lock TTL for the export job change?")]}, CONFIG)
    seen = texts(model.received[-1])
    assert "120 seconds" in seen and "90 seconds" not in seen
    check_tool_pairs(model.received[-1])
    undone = undo_thread(agent, CONFIG)
    assert undone.changed
    restored = agent.get_state(CONFIG).values["messages"]
    assert restored[3].text == REDIS_ANSWER
    assert restored[-1].text == "Keep the TTL at 120 seconds." and len(restored) == len(before) + 2
    with pytest.raises(HistoryError):
        undo_thread(agent, CONFIG)


def test_malformed_edit_output_leaves_the_thread_unchanged() -> None:
    model = scripted(redis_script())
    agent = redis_agent(model)
    run_redis_thread(agent)
    snapshot = agent.get_state(CONFIG)
    bad = ScriptedModel(["{not json", '{"operations": [{"op": "replace", "id": "42", "content": "?"}]}'])
    with pytest.raises(EditError):
        edit_thread(agent, CONFIG, "the TTL is 120 seconds", model=bad)
    after = agent.get_state(CONFIG)
    assert after.config["configurable"]["checkpoint_id"] == snapshot.config["configurable"]["checkpoint_id"]
    assert after.values["messages"] == snapshot.values["messages"]


def test_default_model_without_a_key_raises_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    model = scripted([AIMessage(IRELAND_ANSWER)])
    agent = ireland_agent(None, model)
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    with no_network(monkeypatch), pytest.raises(ModelUnavailableError, match="GOOGLE_API_KEY"):
        edit_thread(agent, CONFIG, "Iceland, not Ireland")  # refused before any connection is tried
    out = agent.invoke({"messages": [HumanMessage("/edit Iceland, not Ireland")]}, CONFIG)
    assert "GOOGLE_API_KEY" in out["messages"][-1].text and "nothing was changed" in out["messages"][-1].text


def test_options_are_checked_up_front() -> None:
    with pytest.raises(TypeError):
        GatekeeperMiddleware(no_such_option=1)
    with pytest.raises(TypeError):
        GatekeeperMiddleware(model=ScriptedModel(), llm=ScriptedModel())
    with pytest.raises(ValueError):
        GatekeeperMiddleware(edit_prefix=" ")


def test_a_token_counter_that_cannot_count_one_text_is_refused_at_construction() -> None:
    """A trim_messages-style counter (a list of messages in) fails on a text: refused when the
    middleware is built, with the forms to pass, not with an AttributeError at the first model
    call.  A counter that counts the sample is used as given: its later errors are its own."""

    def trim_style(messages: list[BaseMessage]) -> int:
        return sum(len(m.content) // 4 + 3 for m in messages)  # type: ignore[attr-defined]

    with pytest.raises(InvalidInputError, match=r"'trim_style' failed on a sample text \(AttributeError.*ONE text.*"
                                                 r"count_tokens_approximately"):
        GatekeeperMiddleware(token_counter=trim_style)

    def short_texts_only(text: str) -> int:
        if len(text) > 200:
            raise ValueError("text too long for this counter")
        return len(text.split())

    middleware = GatekeeperMiddleware(token_counter=short_texts_only)
    with pytest.raises(ValueError, match="too long for this counter"):
        middleware.views.view([HumanMessage("x " * 150), AIMessage("ok"), HumanMessage("and now?")], thread="t")


# -- async --------------------------------------------------------------------------------------
def test_async_paths() -> None:
    async def scenario() -> None:
        model = scripted(redis_script() + [AIMessage("Keep it at 120 seconds.")])
        editor = ScriptedModel([swap_editor("90 seconds", "120 seconds"), swap_editor("Redis", "Valkey")])
        agent = create_agent(model, [lookup_job_duration], middleware=[GatekeeperMiddleware(model=editor)],
                             checkpointer=InMemorySaver())
        for text in (REDIS, COFFEE, FOLLOW_UP):
            await agent.ainvoke({"messages": [HumanMessage(text)]}, CONFIG)
        seen = texts(model.received[-1])
        assert REDIS in seen and COFFEE not in seen
        entry = await aedit_thread(agent, CONFIG, "the TTL is 120 seconds", llm=editor)
        assert entry.changed
        await agent.ainvoke({"messages": [HumanMessage("Should the Redis lock TTL change?")]}, CONFIG)
        assert "90 seconds" not in texts(model.received[-1])
        out = await agent.ainvoke({"messages": [HumanMessage("/edit it is Valkey, not Redis")]}, CONFIG)
        assert "Edited the conversation" in out["messages"][-1].text
        assert len(model.received) == 6
        state = (await agent.aget_state(CONFIG)).values["messages"]
        assert "Redis" not in texts([m for m in state if not m.additional_kwargs.get("lc_source")])
        undone = await aundo_thread(agent, CONFIG)
        assert undone.target == 2  # the routed edit, the second in the log
        state = (await agent.aget_state(CONFIG)).values["messages"]
        assert state[0].text == REDIS

    asyncio.run(scenario())


def two_turn_agent() -> tuple[Any, ToolCallingFake]:
    model = scripted([AIMessage(IRELAND_ANSWER), AIMessage(COFFEE_ANSWER), AIMessage("ok")])
    agent = ireland_agent(ScriptedModel([]), model)
    agent.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    agent.invoke({"messages": [HumanMessage(COFFEE)]}, CONFIG)
    return agent, model


def test_deleting_a_turn_uses_remove_messages_and_undo_puts_it_back_in_place() -> None:
    agent, _ = two_turn_agent()
    before = agent.get_state(CONFIG).values["messages"]
    delete = ScriptedModel(['{"operations": [{"op": "delete", "id": "1"}, {"op": "delete", "id": "2"}]}'])
    entry = edit_thread(agent, CONFIG, "drop the GDP question", delete, allow_large_deletion=True)
    assert [d.status for d in entry.diff.messages] == ["removed", "removed"]
    assert [m.id for m in agent.get_state(CONFIG).values["messages"]] == [m.id for m in before[2:]]
    agent.invoke({"messages": [HumanMessage("Thanks!")]}, CONFIG)
    undo_thread(agent, CONFIG)
    after = agent.get_state(CONFIG).values["messages"]
    assert [m.id for m in after[:4]] == [m.id for m in before]  # back where they stood
    assert after[-2].text == "Thanks!" and len(after) == 6


def test_inserting_in_the_middle_rewrites_the_list_in_one_update_and_undo_removes_it() -> None:
    agent, _ = two_turn_agent()
    before = agent.get_state(CONFIG).values["messages"]
    rewrite = ScriptedModel([json.dumps([
        {"id": "1", "role": "user", "content": IRELAND},
        {"id": "2", "role": "assistant", "content": IRELAND_ANSWER},
        {"id": None, "role": "user", "content": "And Norway?"},
        {"id": None, "role": "assistant", "content": "Norway's was about 490 billion USD."},
        {"id": "3", "role": "user", "content": COFFEE},
        {"id": "4", "role": "assistant", "content": COFFEE_ANSWER},
    ])])
    checkpoints = len(list(agent.get_state_history(CONFIG)))
    edit_thread(agent, CONFIG, "add Norway after the GDP answer", rewrite, strategy="rewrite")
    assert len(list(agent.get_state_history(CONFIG))) == checkpoints + 1  # one state update
    after = agent.get_state(CONFIG).values["messages"]
    assert [m.text for m in after[2:4]] == ["And Norway?", "Norway's was about 490 billion USD."]
    assert [m.id for m in after[:2] + after[4:]] == [m.id for m in before]
    undo_thread(agent, CONFIG)
    assert [m.id for m in agent.get_state(CONFIG).values["messages"]] == [m.id for m in before]


def test_undo_info_lives_in_the_checkpoint_not_in_the_middleware() -> None:
    saver = InMemorySaver()
    first = create_agent(scripted([AIMessage(IRELAND_ANSWER)]), [], middleware=[GatekeeperMiddleware()], checkpointer=saver)
    first.invoke({"messages": [HumanMessage(IRELAND)]}, CONFIG)
    edit_thread(first, CONFIG, "Iceland, not Ireland", ScriptedModel([swap_editor("Ireland", "Iceland")]))
    # a new agent object (a restarted process) over the same checkpointer can undo it
    second = create_agent(scripted([]), [], middleware=[GatekeeperMiddleware()], checkpointer=saver)
    assert "Iceland" in second.get_state(CONFIG).values["messages"][0].text
    undo_thread(second, CONFIG)
    assert second.get_state(CONFIG).values["messages"][0].text == IRELAND


# -- concurrent agents over one shared index ------------------------------------------------
def test_concurrent_agents_without_a_checkpointer_never_mix() -> None:
    from test_lc_trim import A, B, YieldingEmbedder, gather

    def texts(messages: list[BaseMessage]) -> list[str]:
        return [m.text for m in messages]

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


# -- options: keywords or one GateOptions ---------------------------------------------------
def test_middleware_takes_one_gate_options_checked_once_before_anything_is_built() -> None:
    from context_gatekeeper import BudgetError, GateOptions, InvalidTypeError

    options = GateOptions.of(token_budget=70, message_overhead=0, top_m=5)
    middleware = GatekeeperMiddleware(options=options)
    assert middleware.options.token_budget == 70 and middleware.options.params.top_m == 5
    assert middleware.options.on_overflow == "keep_pinned"  # None means the adapters' default
    assert GatekeeperMiddleware(options=options.with_(on_overflow="raise")).options.on_overflow == "raise"
    by_keywords = GatekeeperMiddleware(token_budget=70, message_overhead=0, top_m=5).options
    assert by_keywords.with_(token_counter=None) == middleware.options.with_(token_counter=None)
    with pytest.raises(InvalidTypeError, match="not both"):
        GatekeeperMiddleware(options=options, token_budget=100)
    with pytest.raises(BudgetError, match="int >= 0"):
        GatekeeperMiddleware(token_budget=-1, model=object())  # the budget first: no model resolved
    with pytest.raises(TypeError, match="unexpected keyword"):
        GatekeeperMiddleware(no_such_option=1)
