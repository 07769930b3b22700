"""GatedView and the LangChain list paths do per call only what the call changed.

Token counts are computed once per text and counter (across calls, threads, gates and
middlewares); a list that grew is read and indexed by its new messages only; anything
else (an edit in place, a dropped oldest turn, an answer joining the last turn) gives
exactly what a fresh view gives.  Counting wrappers around real gatekeepers show the
work done; nothing is timed.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import itertools
import logging
import random
from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage, AIMessageChunk, BaseMessage, ChatMessage, FunctionMessage, HumanMessage, SystemMessage, ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver

from context_gatekeeper import BudgetError, InvalidInputError, InvalidTypeError
from context_gatekeeper.selection.semantic.runner import wait_idle
from langchain_gatekeeper import GatekeeperMiddleware, gate_messages
from langchain_gatekeeper.agent_view import GatedView, _Prints, current_turn_start

from gatekeeper_support import CountingCounter, CountingGatekeeper
from lc_support import check_steps
from test_semantic import HashEmbedder

TOPICS = [
    ("redis lock ttl watchdog export job", "Set the Redis lock TTL above the export job and renew it with a watchdog."),
    ("espresso grind size beans", "Grind the espresso beans fine, like table salt."),
    ("postgres vacuum autovacuum bloat", "Tune autovacuum so Postgres tables do not bloat."),
    ("iceland ring road trip", "Drive the Iceland ring road in about ten days."),
]


def conversation(n: int, seed: int = 7) -> list[BaseMessage]:
    rng = random.Random(seed)
    out: list[BaseMessage] = []
    for i in range(n):
        words, answer = TOPICS[rng.randrange(len(TOPICS))]
        out += [HumanMessage(f"Question {i} about {words}?"), AIMessage(f"{answer} (answer {i})")]
    return out


def make() -> CountingGatekeeper:
    return CountingGatekeeper(token_budget=120, token_counter=lambda t: len(t.split()), message_overhead=0,
                              on_overflow="keep_pinned")


def fresh(messages: list[BaseMessage], keyed_by: str) -> list[BaseMessage]:
    return GatedView(make, keyed_by=keyed_by).view(messages)


def test_each_turn_text_is_counted_once_across_calls_and_threads() -> None:
    counter = CountingCounter()
    history = conversation(30)
    for k in range(20, 31):
        gate_messages([SystemMessage("Be brief."), *history[:2 * k], HumanMessage("And the redis watchdog?")],
                      token_budget=200, token_counter=counter, thread="a")
    gate_messages([*history, HumanMessage("espresso grind?")], token_budget=200, token_counter=counter, thread="b")
    assert counter.seen, "the counter was never called"
    assert max(counter.seen.values()) == 1, [t for t, n in counter.seen.items() if n > 1][:3]
    # a middleware with the same counter finds the counts kept by gate_messages
    before = sum(counter.seen.values())
    middleware = GatekeeperMiddleware(token_budget=200, token_counter=counter)
    middleware.views.view([*history, HumanMessage("postgres bloat?")], thread="c")
    assert sum(counter.seen.values()) == before


def test_a_grown_list_indexes_only_the_new_turn_and_is_never_rebuilt() -> None:
    for keyed_by in ("content", "id"):
        view = GatedView(make, keyed_by=keyed_by)
        history = conversation(40)
        for i, m in enumerate(history):
            m.id = f"m{i}"
        view.view([*history[:60], HumanMessage("redis lock?")], thread="t")
        gk = view.gatekeeper("t")
        assert isinstance(gk, CountingGatekeeper) and gk.calls["insert"] == 30
        for k in range(31, 41):
            gk.calls.clear()
            got = view.view([*history[:2 * k], HumanMessage("and the watchdog?")], thread="t")
            assert dict(gk.calls) == {"insert": 1}, (keyed_by, k, gk.calls)
            assert got == fresh([*history[:2 * k], HumanMessage("and the watchdog?")], keyed_by)
        assert view.index("t").builds == 1


def test_any_other_change_gives_what_a_fresh_view_gives() -> None:
    """Random growth, in-place edits, dropped turns, answers (streamed chunks too) joining the
    last turn and tool pairs: every call's view is a fresh view's, and the index holds exactly the list's turns."""
    rng = random.Random(3)
    for keyed_by in ("content", "id"):
        view = GatedView(make, keyed_by=keyed_by)
        messages: list[BaseMessage] = [SystemMessage("Be brief."), *conversation(12, seed=5)]
        ids = itertools.count()
        for m in messages:
            m.id = f"x{next(ids)}"
        for step in range(60):
            action = rng.choice(["grow", "grow", "answer", "streamed", "edit", "drop", "tool", "unanswered"])
            words, answer = TOPICS[rng.randrange(len(TOPICS))]
            if action == "grow":
                messages += [HumanMessage(f"step {step} {words}?", id=f"x{next(ids)}"), AIMessage(answer, id=f"x{next(ids)}")]
            elif action == "unanswered":
                messages.append(HumanMessage(f"step {step} {words}?", id=f"x{next(ids)}"))
            elif action == "answer":
                messages.append(AIMessage(f"late answer {step}: {answer}", id=f"x{next(ids)}"))
            elif action == "streamed":  # what .stream() leaves in a list: an answer all the same
                messages.append(AIMessageChunk(f"streamed answer {step}: {answer}", id=f"x{next(ids)}"))
            elif action == "edit":
                target = rng.randrange(1, len(messages))
                messages[target].content = f"edited {step}: {words}"  # in place, same object
            elif action == "drop" and len(messages) > 8:
                del messages[1:3]
            elif action == "tool":
                call_id = f"c{step}"
                messages += [AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": words}, "id": call_id}], id=f"x{next(ids)}"),
                             ToolMessage(f"tool says {answer}", tool_call_id=call_id, id=f"x{next(ids)}")]
            query = HumanMessage(f"now about {rng.choice(TOPICS)[0]}?")
            got = view.view([*messages, query], thread="t")
            assert got == fresh([*messages, query], keyed_by), (keyed_by, step, action)
            assert len(view.gatekeeper("t")) == len(view._index("t").memo.turns), (keyed_by, step, action)


def test_the_middleware_keeps_its_thread_index_across_invokes() -> None:
    counter = CountingCounter()
    middleware = GatekeeperMiddleware(token_budget=200, token_counter=counter)
    # a new answer each call: one AIMessage object repeated has one id, so the checkpoint would keep only the last
    model = GenericFakeChatModel(messages=(AIMessage("Noted.") for _ in itertools.count()))
    agent = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    history = conversation(40)
    for i, m in enumerate(history):
        m.id = f"h{i}"
    agent.update_state(config, {"messages": history})
    agent.invoke({"messages": [HumanMessage("and the redis watchdog?")]}, config)
    index = middleware.views.index("t1")
    gk = middleware.views.gatekeeper("t1")
    assert len(gk) == 40 and index.builds == 1
    counted = sum(counter.seen.values())
    for question in ("espresso grind?", "postgres bloat?", "iceland road?"):
        before = len(gk)
        agent.invoke({"messages": [HumanMessage(question)]}, config)
        assert len(gk) == before + 1  # the previous invoke's turn, nothing re-indexed
    assert index.builds == 1
    assert sum(counter.seen.values()) == counted + 4  # each new text once: three questions and the one answer text
    assert max(counter.seen.values()) == 1


def test_a_change_in_place_inside_a_message_is_seen() -> None:
    """Tool-call arguments and list content mutated in place (same objects, same list) are re-read."""
    for keyed_by in ("content", "id"):
        view = GatedView(make, keyed_by=keyed_by)
        call = AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "espresso grind"}, "id": "c1"}], id="a1")
        parts = HumanMessage(content=[{"type": "text", "text": "espresso grind size?"}], id="h0")
        messages: list[BaseMessage] = [parts, AIMessage("Fine.", id="a0"), HumanMessage("lock?", id="h1"), call,
                                       ToolMessage("42 seconds", tool_call_id="c1", id="t1"), *conversation(6)]
        query = HumanMessage("and the redis watchdog ttl?")
        view.view([*messages, query], thread="t")
        call.tool_calls[0]["args"]["q"] = "redis lock ttl watchdog"
        parts.content[0]["text"] = "redis watchdog ttl question"
        assert view.view([*messages, query], thread="t") == fresh([*messages, query], keyed_by), keyed_by
        texts = {text for turn in view._index("t").memo.turns for text in turn.texts[:2]}
        assert any("redis lock ttl watchdog" in t for t in texts) and "redis watchdog ttl question" in texts, keyed_by


def test_list_prints_see_every_field_change_of_a_message_read() -> None:
    """_Prints (the memo's columns): a list extending the printed one passes; a change in place
    to any field of a message printed fails, the lc_source mark both ways (set, and removed:
    the shortcut that skips reading marks when none is set must not hide it)."""
    for keyed_by in ("content", "id"):
        messages: list[BaseMessage] = [
            SystemMessage("be brief", id="s0"), HumanMessage("redis lock ttl?", id="h0"),
            AIMessage("", tool_calls=[{"name": "look", "args": {"q": "ttl"}, "id": "c1"}], id="a0"),
            ToolMessage("30 s", tool_call_id="c1", id="t0"), AIMessage("About 30 seconds.", id="a1"),
        ]
        prints = _Prints()
        prints.add(messages[:3], keyed_by)
        prints.add(messages[3:], keyed_by)
        assert len(prints) == 5 and prints.calls_at == [2, 4] and prints.marked == 0
        assert prints.begin(messages, keyed_by) and prints.begin([*messages, HumanMessage("more")], keyed_by)
        assert not prints.begin(messages[:4], keyed_by)  # shorter
        changes = [
            lambda m: setattr(m[1], "content", "redis lock ttl, again?"),
            lambda m: m[2].tool_calls[0]["args"].update(q="watchdog"),
            lambda m: m[4].additional_kwargs.update(lc_source="summarization"),
            lambda m: m.__setitem__(4, HumanMessage("About 30 seconds.", id="a1")),  # another class
        ] + ([lambda m: setattr(m[0], "id", "s1")] if keyed_by == "id" else [])
        for change in changes:
            copies = [m.model_copy(deep=True) for m in messages]
            assert prints.begin(copies, keyed_by), keyed_by
            change(copies)
            assert not prints.begin(copies, keyed_by), keyed_by
        copies = [m.model_copy(deep=True) for m in messages]
        copies[1].additional_kwargs["other"] = 1  # extra kwargs without a mark: still the same list
        assert prints.begin(copies, keyed_by)
        marked = _Prints()
        copies[4].additional_kwargs["lc_source"] = "summarization"
        marked.add(copies, keyed_by)
        assert marked.marked == 1 and marked.begin(copies, keyed_by)
        del copies[4].additional_kwargs["lc_source"]  # the mark removed in place: no kwargs left anywhere else
        copies[1].additional_kwargs.clear()
        assert not marked.begin(copies, keyed_by)


def test_a_summary_mark_set_in_place_is_seen() -> None:
    """A message of a list already read, marked as a summary in place (its own
    additional_kwargs dict changed): the next call pins it, as a fresh view does."""
    for keyed_by in ("content", "id"):
        view = GatedView(make, keyed_by=keyed_by)
        messages = conversation(8)
        for i, m in enumerate(messages):
            m.id = f"s{i}"
        query = HumanMessage("and the redis watchdog ttl?")
        view.view([*messages, query], thread="t")
        messages[2].additional_kwargs["lc_source"] = "summarization"
        got = view.view([*messages, query], thread="t")
        assert got == fresh([*messages, query], keyed_by), keyed_by
        assert got[0] is messages[2], keyed_by  # pinned first


def test_a_bad_count_is_refused_every_time_and_never_kept() -> None:
    calls: Counter[str] = Counter()

    def counter(text: str) -> int:
        calls[text] += 1
        return -1 if "decaf" in text else len(text.split())

    messages = [*conversation(3, seed=1), HumanMessage("Best decaf grind?"), AIMessage("Fine."), HumanMessage("and the lock?")]
    for _ in range(2):
        with pytest.raises(InvalidInputError, match="token counter"):
            gate_messages(messages, token_budget=200, token_counter=counter, thread="bad")
    assert calls["Best decaf grind?"] == 2


def test_topic_gate_counts_each_text_once_across_calls_and_gates() -> None:
    from langchain_gatekeeper import topic_gate

    counter = CountingCounter()
    gate = topic_gate(token_budget=200, token_counter=counter)
    history = conversation(20)
    for k in range(15, 21):
        gate.invoke([*history[:2 * k], HumanMessage("and the redis watchdog?")])
    assert counter.seen and max(counter.seen.values()) == 1
    counted = sum(counter.seen.values())
    topic_gate(token_budget=300, token_counter=counter).invoke([*history, HumanMessage("espresso?")])  # a new index
    assert sum(counter.seen.values()) == counted


def test_thread_indexes_are_kept_least_recently_used_first_out() -> None:
    view = GatedView(make, max_threads=2)
    history = [*conversation(4), HumanMessage("redis?")]
    view.view(history, thread="a")
    a, b = view.gatekeeper("a"), view.gatekeeper("b")
    assert view.gatekeeper("a") is a  # "a" is now the most recent
    view.gatekeeper("c")  # evicts "b"
    assert view.gatekeeper("a") is a and len(a) == 4
    assert view.gatekeeper("b") is not b


def test_the_memo_maps_every_turn_by_its_index_id_as_the_list_grows() -> None:
    """The list memo grows in place with the list; its turns by gatekeeper turn id always
    match the index exactly, answers joining the last turn included."""
    for keyed_by in ("content", "id"):
        view = GatedView(make, keyed_by=keyed_by)
        history = conversation(30, seed=11)
        for i, m in enumerate(history):
            m.id = f"g{i}"
        messages: list[BaseMessage] = list(history[:20])
        for step in range(20):
            if step % 3 == 2:
                messages.append(AIMessage(f"and more on step {step}", id=f"late{step}"))  # joins the last turn
            else:
                messages += history[20 + step:21 + step] or [HumanMessage(f"extra {step} espresso?", id=f"e{step}")]
            query = HumanMessage(f"now the {TOPICS[step % len(TOPICS)][0]}?")
            assert view.view([*messages, query], thread="t") == fresh([*messages, query], keyed_by), (keyed_by, step)
            memo = view._index("t").memo
            ids = view.index("t").ids
            assert memo.by_id == {ids[turn.key]: turn for turn in memo.turns}, (keyed_by, step)


def test_a_call_that_fails_on_a_grown_list_leaves_the_next_call_right() -> None:
    """A count that raises halfway through a grown list's call: the memo the call was growing
    is dropped, so the next call (a list without that turn) is a fresh view's."""
    def counter(text: str) -> int:
        if "BOOM" in text:
            raise ValueError("no count for this text")
        return len(text.split())

    def build() -> CountingGatekeeper:
        return CountingGatekeeper(token_budget=120, token_counter=counter, message_overhead=0, on_overflow="keep_pinned")

    for keyed_by in ("content", "id"):
        view = GatedView(build, keyed_by=keyed_by)
        history = conversation(20, seed=2)
        for i, m in enumerate(history):
            m.id = f"f{i}"
        query = HumanMessage("and the redis watchdog?")
        view.view([*history[:30], query], thread="t")
        bad = [*history[:30], HumanMessage("BOOM espresso?", id="boom"), AIMessage("fine", id="boom-a")]
        with pytest.raises(Exception):
            view.view([*bad, query], thread="t")
        good = [*history[:34], query]
        assert view.view(good, thread="t") == GatedView(build, keyed_by=keyed_by).view(good), keyed_by
        memo = view._index("t").memo
        assert memo.by_id == {view.index("t").ids[turn.key]: turn for turn in memo.turns}, keyed_by


def _chat(user: str, tag: str) -> list[BaseMessage]:
    return [SystemMessage("You are a helpful assistant.", id=f"{tag}-sys"),
            HumanMessage("How long should a Redis lock TTL be?", name=user, id=f"{tag}-1"),
            AIMessage("Longer than the longest job.", id=f"{tag}-2"),
            HumanMessage("Best espresso grind?", name=user, id=f"{tag}-3"),
            AIMessage("Fine, like table salt.", id=f"{tag}-4"),
            HumanMessage("And the Redis lock watchdog?", name=user, id=f"{tag}-5")]


def test_a_call_returns_the_callers_own_messages_never_those_an_earlier_call_read() -> None:
    # the same texts under another user's names and ids, on the shared default thread: the index
    # is reused (the texts are equal), the messages returned are this caller's
    gate_messages(_chat("alice", "A"), token_budget=1000)
    bob = _chat("bob", "B")
    out = gate_messages(bob, token_budget=1000)
    assert [m.id for m in out] == ["B-sys", "B-1", "B-2", "B-5"]
    assert all(any(m is mine for mine in bob) for m in out)
    grown = [*bob[:-1], AIMessage("Renew it before it expires.", id="B-6", name="x"), HumanMessage("Anything else?", id="B-7")]
    grown[4] = grown[4].model_copy(update={"response_metadata": {"model": "other"}})  # a field the index never reads
    out = gate_messages(grown, token_budget=1000)
    assert all(any(m is mine for mine in grown) for m in out)


# -- what a call reads of its messages ------------------------------------------------------
def words(text: str) -> int:
    return len(text.split())


def two_topics() -> list[BaseMessage]:
    """Espresso turns, then the active topic: the redis lock."""
    out: list[BaseMessage] = []
    for i in range(6):
        out += [HumanMessage(f"How do I tune espresso grind size {i}?"), AIMessage(f"Grind the espresso beans finer {i}.")]
    for i in range(3):
        out += [HumanMessage(f"How long should the redis lock ttl be {i}?"), AIMessage(f"Keep the redis lock ttl above the job {i}.")]
    return out


IMAGE = HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}])


def test_a_query_with_no_text_continues_the_active_topic_within_the_budget() -> None:
    """An image alone, or a blank message, as the last human message: gated as a query of no
    content words ("ok?" is one), by view, aview and gated alike, the budget held."""
    history = two_topics()
    for embedder in (None, HashEmbedder()):
        middleware = GatekeeperMiddleware(token_budget=60, token_counter=words, message_overhead=0, embedder=embedder)
        views = middleware.views
        wanted = views.view([*history, HumanMessage("ok?")], thread="ok")[:-1]
        assert 0 < len(wanted) < len(history) and all("redis" in m.text for m in wanted)
        for query in (IMAGE, HumanMessage("   ")):
            assert views.view([*history, query], thread="t") == [*wanted, query]
            assert asyncio.run(views.aview([*history, query], thread="a")) == [*wanted, query]
            assert views.gated(history, query.text, thread="g") == wanted
            assert asyncio.run(views.agated(history, "", thread="g")) == wanted
        assert sum(words(m.text) for m in wanted) <= 60
        assert wait_idle(30)  # turns are embedded in the background


def test_unanswered_human_messages_before_the_last_are_the_current_turn() -> None:
    """A pasted text (or an image), then the question, both unanswered: one current turn, sent
    whole, its texts the query (the paste shares no word with the question, so gating it as an
    earlier turn dropped it)."""
    history = two_topics()
    paste = HumanMessage("maxmemory 2gb\nappendfsync always")
    question = HumanMessage("Why is the redis lock so slow with this config?")
    view = GatedView(make)
    for messages in ([*history, paste, question], [*history, IMAGE, paste, question]):
        start = len(history)
        gated = view.view(messages, thread="t")
        assert gated[-(len(messages) - start):] == messages[start:]  # the whole run, the caller's own objects
        assert asyncio.run(view.aview(messages, thread="a")) == gated
        assert gated[:-(len(messages) - start)] == view.gated(history, f"{paste.text}\n{question.text}", thread="g")
    assert current_turn_start([*history, paste, question]) == len(history)
    assert current_turn_start([*history, paste, AIMessage("noted"), question]) == len(history) + 2


def test_blank_pinned_messages_are_priced_as_sent_and_never_raise() -> None:
    """A system message or summary of whitespace alone (a template that rendered empty) is sent,
    so the gatekeeper holds it, one text a message, costing its overhead; a blank system prompt is
    not sent and not held.  Never an error."""
    body = [HumanMessage("redis ttl?"), AIMessage("30 s"), HumanMessage("redis watchdog?")]
    summary = {"lc_source": "summarization"}
    view = GatedView(make)
    for pinned, prompt in [([SystemMessage("\n")], None), ([], "  "), ([SystemMessage(" "), SystemMessage("")], "\t"),
                           ([HumanMessage(" ", additional_kwargs=summary), HumanMessage("\n", additional_kwargs=summary)], None)]:
        assert view.view([*pinned, *body], thread="t", system_prompt=prompt) == [*pinned, *body]
        gk = view.gatekeeper("t")
        assert (gk.system_prompt or ()) + (gk.summary or ()) == tuple(m.text for m in pinned)
        assert gk.pinned_cost() == sum(gk.options.count(m.text) + gk.message_overhead for m in pinned)
    view.view([SystemMessage(" "), SystemMessage("Be brief."), *body], thread="t", system_prompt="Use metric units.")
    assert view.gatekeeper("t").system_prompt == ("Use metric units.", " ", "Be brief.")


def test_a_system_message_inside_an_earlier_turn_counts_against_the_budget() -> None:
    """It is sent with its turn, so its tokens are the turn's: a turn it makes too big is not sent."""
    for keyed_by in ("content", "id"):
        reminder = SystemMessage("reminder " * 500, id="s")
        chat = [HumanMessage("How long should a Redis lock TTL be?", id="h"), reminder,
                AIMessage("Longer than the longest job.", id="a"), HumanMessage("And the Redis lock watchdog?", id="q")]
        view = GatedView(lambda: CountingGatekeeper(token_budget=50, token_counter=words, message_overhead=0,
                                                    on_overflow="keep_pinned"), keyed_by=keyed_by)
        assert view.view(chat, thread="t") == chat[-1:]  # 515 tokens: over the budget
        small = SystemMessage("Mind the lock.", id="s")
        chat[1] = small
        assert view.view(chat, thread="t") == chat, keyed_by  # sent with its turn, counted in it
        assert view.gatekeeper("t").turn_cost(view.gatekeeper("t").turns[0].id) == 16, keyed_by


def test_an_agent_turn_is_priced_one_message_at_a_time() -> None:
    """A turn of several answers (tool calls, their results, the final answer) costs each
    message its overhead: what the view hands out stays within the budget counted message by
    message (priced as one answer, 30 agent turns went over a budget of 1,000 by 56 tokens)."""
    import json

    from context_gatekeeper.tokens import tiktoken_counter

    count = tiktoken_counter("cl100k_base")
    chat: list = []
    for i in range(30):
        chat.append(HumanMessage(f"What is the Redis lock TTL for job {i}?", id=f"h{i}"))
        for k in range(3):
            chat.append(AIMessage("", tool_calls=[{"name": "lookup", "args": {"job": i, "k": k}, "id": f"c{i}.{k}"}],
                                  id=f"a{i}.{k}"))
            chat.append(ToolMessage(f"ttl {i * 10 + k}", tool_call_id=f"c{i}.{k}", id=f"t{i}.{k}"))
        chat.append(AIMessage(f"The Redis lock TTL for job {i} is {i * 10} seconds.", id=f"f{i}"))
    chat.append(HumanMessage("And the Redis lock TTL for job 7 again?", id="q"))

    def text(m):
        calls = " ".join(f"{c['name']} {json.dumps(c['args'])}" for c in getattr(m, "tool_calls", None) or [])
        return "\n".join(t for t in (m.text, calls) if t)

    for budget in (300, 1000):
        earlier = gate_messages(chat, token_budget=budget, token_counter=count)[:-1]
        assert len(earlier) > 20
        assert sum(count(text(m)) + 3 for m in earlier) <= budget


def test_function_and_chat_messages_take_the_role_they_play() -> None:
    """A FunctionMessage is its call's result (never a turn of its own); a ChatMessage has the
    role it names (user or human, assistant or ai, system, tool or function); other roles are users."""
    call = AIMessage("", additional_kwargs={"function_call": {"name": "lookup", "arguments": "{}"}})
    chat = [
        ChatMessage(role="system", content="Be brief."),
        HumanMessage("Tell me about espresso grind size"), call, FunctionMessage(name="lookup", content="redis lock watchdog"),
        AIMessage("The watchdog renews the redis lock."), ChatMessage(role="Assistant", content="more on the redis watchdog"),
        ChatMessage(role="human", content="espresso beans?"), ChatMessage(role="ai", content="Arabica."),
        ChatMessage(role="tool", content="tool says arabica"), ChatMessage(role="function", content="fn says arabica"),
        ChatMessage(role="system", content="Stay on topic."),
        ChatMessage(role="critic", content="that was short"), AIMessage("Sorry."),
        HumanMessage("And the redis lock watchdog ttl?"),
    ]
    view = GatedView(make)
    out = view.view(chat, thread="t")
    gk = view.gatekeeper("t")
    assert gk.system_prompt == ("Be brief.",)
    assert [(t.user, t.assistant, t.tool_texts) for t in gk.turns] == [
        ("Tell me about espresso grind size", "more on the redis watchdog",
         ("", "The watchdog renews the redis lock.", "redis lock watchdog")),  # one text a message: each priced
        ("espresso beans?", "Arabica.", ("tool says arabica", "fn says arabica", "Stay on topic.")),
        ("that was short", "Sorry.", ()),
    ]
    assert out[:6] == chat[:6]  # the call and its result, kept together
    # a ChatMessage's role changed in place is read again, as a fresh view reads it
    chat[5].role = "user"
    assert view.view(chat, thread="t") == GatedView(make).view(chat)
    assert len(view.gatekeeper("t")) == 4


def test_repeated_first_message_ids_are_distinct_turns_grown_or_fresh() -> None:
    """Two turns opened by messages of one id are two turns, whether the thread grew into the
    second or reads the list whole."""
    first = [HumanMessage("redis lock ttl?", id="m1"), AIMessage("30 s", id="a1")]
    second = [HumanMessage("espresso grind?", id="m1"), AIMessage("fine", id="a2")]
    third = [HumanMessage("redis lock watchdog ttl?", id="m1"), AIMessage("renew it", id="a3")]
    query = HumanMessage("redis lock watchdog?", id="q")
    view = GatedView(make)
    view.view([*first, query], thread="grown")
    gk = view.gatekeeper("grown")
    for messages in ([*first, *second, query], [*first, *second, AIMessage("or finer", id="a4"), *third, query]):
        gk.calls.clear()
        grown = view.view(messages, thread="grown")
        assert grown == GatedView(make).view(messages)
        assert set(gk.calls) <= {"insert", "replace"}  # only what grew: the second turn regrouped keeps its key
        assert [t.user for t in view.gatekeeper("grown").turns] == [m.text for m in messages if isinstance(m, HumanMessage)][:-1]
    assert [m.text for m in grown] == ["redis lock ttl?", "30 s", "redis lock watchdog ttl?", "renew it", "redis lock watchdog?"]


def test_tool_call_arguments_json_cannot_hold_are_read_as_their_text() -> None:
    call = AIMessage("", tool_calls=[{"name": "book", "id": "c1",
                                      "args": {"when": datetime.date(2025, 1, 2), "price": decimal.Decimal("9.5")}}])
    chat = [HumanMessage("book the meeting"), call, ToolMessage("booked", tool_call_id="c1"), AIMessage("Done."),
            HumanMessage("and cancel it?")]
    view = GatedView(make)
    assert view.view(chat, thread="t") == chat
    assert '"when": "2025-01-02", "price": "9.5"' in view.gatekeeper("t").turns[0].tool_texts[0]


def test_an_unhashable_thread_is_refused_with_the_librarys_error() -> None:
    view = GatedView(make)
    chat = [*conversation(2), HumanMessage("redis?")]
    with pytest.raises(InvalidTypeError, match="string id"):
        view.view(chat, thread=["t"])
    with pytest.raises(InvalidTypeError, match="string id"):
        asyncio.run(view.aview(chat, thread={"id": "t"}))
    assert len(view._threads) == 0  # nothing kept


def test_a_chat_message_of_role_user_is_the_current_turn() -> None:
    """The last message a ChatMessage of role user: it is the query (the view gated on the
    human message before it), and a list of ChatMessages alone is gated within the budget."""
    from langchain_core.messages import ChatMessage

    history = two_topics()
    question = ChatMessage("How long should the redis lock ttl be now?", role="user")
    view = GatedView(make)
    assert current_turn_start([*history, question]) == len(history)
    gated = view.view([*history, question], thread="t")
    assert gated[-1] is question and all("redis" in m.text for m in gated[:-1])
    chat = [ChatMessage(m.text, role="user" if isinstance(m, HumanMessage) else "assistant") for m in history]
    middleware = GatekeeperMiddleware(token_budget=40, token_counter=words, message_overhead=0)
    kept = middleware.views.view([*chat, question], thread="c")
    assert kept[-1] is question and sum(words(m.text) for m in kept[:-1]) <= 40


def test_a_long_run_of_unanswered_human_messages_is_not_sent_whole() -> None:
    """Unanswered human messages before the last join the current turn only while they fit the
    budget; older ones are earlier turns, gated (a thread of retried questions is not sent whole)."""
    history = two_topics()
    run = [HumanMessage(f"Is the redis lock ttl still wrong, attempt {i}?") for i in range(30)]
    middleware = GatekeeperMiddleware(token_budget=40, token_counter=words, message_overhead=0)
    views = middleware.views
    gated = views.view([*history, *run], thread="t")
    start = views.turn_start([*history, *run], thread="t")
    assert start is not None and len(history) < start < len(history) + len(run) - 1
    assert sum(words(m.text) for m in run[start - len(history):-1]) <= 40  # the part of the run kept whole fits
    assert gated[-(len(history) + len(run) - start):] == [*history, *run][start:]
    # the earlier turns get what the run's messages before the last leave of the budget
    assert sum(words(m.text) for m in gated[:-1]) <= 40


@pytest.mark.parametrize("how", ["system message", "system_prompt"])
def test_unanswered_messages_join_the_current_turn_within_the_budget_less_the_pinned_content(how: str) -> None:
    """A system prompt is paid for first: a paste that fits the budget only without it stays an
    earlier turn, gated as any other; nothing goes over the budget or raises."""
    paste, question = HumanMessage("P" * 170), HumanMessage("Why does this stack trace mention Redis?")
    body = [HumanMessage("How long should a Redis lock TTL be?"), AIMessage("Longer than the longest job."),
            paste, question]
    system = "S" * 50
    view = GatedView(lambda: CountingGatekeeper(token_budget=200, token_counter=len, message_overhead=0,
                                                on_overflow="raise"))
    if how == "system message":
        out = view.view([SystemMessage(system), *body], thread="t")
        sent = sum(len(m.text) for m in out[1:-1]) + len(system)
    else:
        out = view.view(body, thread="t", system_prompt=system)
        sent = sum(len(m.text) for m in out[:-1]) + len(system)
    assert out[-1] is question and paste not in out and sent <= 200
    roomy = GatedView(lambda: CountingGatekeeper(token_budget=240, token_counter=len, message_overhead=0,
                                                 on_overflow="raise"))
    assert roomy.view(body, thread="t", system_prompt=system)[-2:] == [paste, question]


# -- the current turn of an agent's run -----------------------------------------------------------
def tool_loop(call_id: str, delivered: list[BaseMessage]) -> list[BaseMessage]:
    """A tool call, its result, and what the tool delivered with it through a ``Command``."""
    return [AIMessage("", tool_calls=[{"name": "screenshot", "args": {"url": "https://acme.test"}, "id": call_id}]),
            ToolMessage("screenshot attached below", tool_call_id=call_id), *delivered]


def test_a_human_message_a_tool_delivers_belongs_to_the_run() -> None:
    """An image a tool hands the model as a HumanMessage (in its Command, after its result) is
    not the user's question: the current turn still starts at the user's own message, so the
    run's question, tool calls and results are sent whole, whatever the budget.  Read from the
    list's shape that holds for messages without text; where the run's input is known (the
    middleware records it) for any message a tool delivers."""
    history = two_topics()
    question = HumanMessage("Why can't customers find the checkout button on the redis status page? " * 4, id="q")
    first, second = tool_loop("c1", [IMAGE]), tool_loop("c2", [IMAGE])
    messages = [*history, question, *first, *second]
    assert current_turn_start(messages) == len(history)
    view = GatedView(lambda: CountingGatekeeper(token_budget=20, token_counter=words, message_overhead=0))
    for gated in (view.view(messages, thread="t"), asyncio.run(view.aview(messages, thread="a"))):
        assert gated[-(len(messages) - len(history)):] == messages[len(history):]
        assert sum(words(m.text) for m in gated[:len(gated) - (len(messages) - len(history))]) <= 20
    assert gate_messages(messages, token_budget=20)[-(len(messages) - len(history)):] == messages[len(history):]
    # a delivery with text: by shape it is the last question; with the run's input known it is the tool's
    as_text = [*history, question, *tool_loop("c3", [HumanMessage("the page's HTML, as text")])]
    assert current_turn_start(as_text) == len(as_text) - 1
    assert current_turn_start(as_text, run_input="q") == len(history)
    assert view.view(as_text, thread="t", run_input="q")[-4:] == as_text[-4:]
    # the user's own unanswered messages before the question still join it only within the budget
    paste = HumanMessage("redis " * 30)
    assert current_turn_start([*history, paste, question, *first]) == len(history)
    assert view.turn_start([*history, paste, question, *first], thread="t") == len(history) + 1


def test_a_run_that_ends_on_a_tool_result_is_an_earlier_turn_for_the_next_question() -> None:
    """A return_direct tool or structured output through a tool ends a run on its result: the
    next question (with text) is the user's own, and the runs before are earlier turns, gated
    within the budget (taking them for the new run's sent every run whole)."""
    history = two_topics()
    runs: list[BaseMessage] = []
    for n, topic in enumerate(["redis lock ttl", "espresso grind", "redis watchdog"]):
        runs += [HumanMessage(f"Look up the {topic} for me", id=f"r{n}"), *tool_loop(f"d{n}", [])]
    messages = [*history, *runs, HumanMessage("And the espresso grind for a moka pot?", id="now")]
    assert current_turn_start(messages) == len(messages) - 1
    assert current_turn_start(messages, run_input="now") == len(messages) - 1
    view = GatedView(lambda: CountingGatekeeper(token_budget=20, token_counter=words, message_overhead=0))
    gated = view.view(messages, thread="t")
    assert gated[-1] is messages[-1] and sum(words(m.text) for m in gated[:-1]) <= 20


def test_the_runs_recorded_input_starts_the_current_turn_and_nothing_older() -> None:
    """With the run's input known (the id the middleware keeps in the thread's state), the
    current turn starts there: a human message a middleware adds after the model answered
    ("cite a source") joins the run; a ChatMessage of role user is a run input as well."""
    from langchain_core.messages import ChatMessage

    history = two_topics()
    question = HumanMessage("Which postgres isolation level prevents write skew?", id="q")
    guard = HumanMessage("Your answer has no citation. Cite a source and answer again.")
    messages = [*history, question, AIMessage("Use repeatable read."), guard]
    assert current_turn_start(messages, run_input="q") == len(history)
    assert current_turn_start(messages) == len(messages) - 1  # by shape alone: the last question
    assert current_turn_start(messages, run_input="gone") == len(messages) - 1  # an id not in the list
    chat_input = ChatMessage(role="user", content="What hydration for sourdough bread?", id="chat")
    assert current_turn_start([*history, chat_input], run_input="chat") == len(history)


def test_system_messages_the_runs_recorded_input_opens_with_are_the_current_turn() -> None:
    """A run's input may open with a system message (an instruction sent with the question in one
    invoke): when the recorded input starts there, so does the current turn, sent whole and never
    charged to the budget, by view and aview alike; the question is the query.  Without that record
    (a plain list, or a later run) it is a mid-conversation reminder of the turn before it, grouped,
    sent and priced with that turn as the guide says."""
    history = two_topics()
    french = SystemMessage("Reply in French only.", id="fr")
    question = HumanMessage("Which espresso grind suits a moka pot?", id="q")
    messages = [*history, french, question]
    assert current_turn_start(messages, run_input="fr") == len(history)
    assert current_turn_start(messages, run_input="q") == current_turn_start(messages) == len(history) + 1
    view = GatedView(lambda: CountingGatekeeper(token_budget=0, token_counter=words, message_overhead=0,
                                                on_overflow="keep_pinned"))
    assert view.view(messages, thread="t", run_input="fr") == [french, question]  # whatever the budget
    assert asyncio.run(view.aview(messages, thread="a", run_input="fr")) == [french, question]
    assert view.view(messages, thread="t", run_input="q") == [question]  # a reminder of the redis turn before
    assert view.view(messages, thread="t") == [question]
    # the next run: the instruction is an older reminder, grouped with the turn before it
    grown = [*messages, AIMessage("Moyen-fin, un peu plus gros que pour un espresso.", id="a"),
             HumanMessage("And the redis lock ttl again?", id="q2")]
    roomy = GatedView(lambda: CountingGatekeeper(token_budget=1000, token_counter=words, message_overhead=0))
    for run_input in ("q2", None):
        gated = roomy.view(grown, thread=run_input, run_input=run_input)
        assert gated[-1] is grown[-1] and gated[gated.index(french) - 1] is history[-1]  # with its turn
        turns = roomy.gatekeeper(run_input).turns
        assert [t.tool_texts for t in turns[-2:]] == [("Reply in French only.",), ()]
        assert turns[-2].user == history[-2].text and turns[-1].user == question.text


def test_after_a_run_the_next_human_message_is_the_users_own() -> None:
    """A result patched in for a call the model garbled (``invalid_tool_calls``: no tool ran, the
    run ended), or a run that failed inside its tool loop: the user's next message is the
    current turn, and the run an earlier turn."""
    history = two_topics()
    question, follow_up = HumanMessage("How long should the redis lock ttl be now?"), HumanMessage("And espresso?")
    garbled = [AIMessage("", invalid_tool_calls=[{"name": "lookup", "args": "{job: nightly", "id": "bad",
                                                   "error": "invalid JSON", "type": "invalid_tool_call"}]),
               ToolMessage("could not be executed", tool_call_id="bad", status="error")]
    assert current_turn_start([*history, question, *garbled, follow_up]) == len(history) + 3
    failed = tool_loop("c1", [])
    assert current_turn_start([*history, question, *failed, follow_up]) == len(history) + 3
    # ordinary lists read as before: the last human message after an answer, or alone
    assert current_turn_start([*history, question]) == len(history)
    assert current_turn_start([*failed, IMAGE]) == 2  # no user's message before: the tool's is the start


# -- pinned content ------------------------------------------------------------------------------
SUMMARY = {"lc_source": "summarization"}


def test_each_pinned_message_is_priced_as_the_message_it_is_sent_as() -> None:
    """Leading system messages, summaries and the system prompt are sent one message each, so
    each costs its message_overhead: at every budget what is sent before the current turn fits
    it (or is the pinned content alone, over it, with a warning); with on_overflow="raise" pinned
    content over the budget raises, naming the budget given."""
    pinned = [SystemMessage("You are the support bot."), SystemMessage("Answer in English."),
              HumanMessage("Summary: router firmware.", additional_kwargs=SUMMARY),
              HumanMessage("Summary: firmware rollback.", additional_kwargs=SUMMARY)]
    body = [HumanMessage("My router firmware update fails."), AIMessage("Retry the router firmware update over a cable."),
            HumanMessage("What about the router firmware rollback?")]
    prompt, overhead = "Be brief.", 20

    def sent(messages: list[BaseMessage]) -> int:
        return sum(words(m.text) + overhead for m in messages) + words(prompt) + overhead

    need = sent(pinned)
    for budget in range(need - 80, need + 80, 5):
        view = GatedView(lambda: CountingGatekeeper(token_budget=budget, token_counter=words, message_overhead=overhead,
                                                    on_overflow="keep_pinned"))
        out = view.view([*pinned, *body], thread="t", system_prompt=prompt)
        assert asyncio.run(view.aview([*pinned, *body], thread="a", system_prompt=prompt)) == out
        assert out[-1] is body[-1] and out[:len(pinned)] == pinned
        assert sent(out[:-1]) <= budget or out[:-1] == pinned, budget
        assert (body[0] in out) == (budget >= sent([*pinned, *body[:2]])), budget
    strict = GatedView(lambda: CountingGatekeeper(token_budget=need - 1, token_counter=words, message_overhead=overhead,
                                                  on_overflow="raise"))
    with pytest.raises(BudgetError, match=f"needs {need} tokens .* token_budget is {need - 1}; .*keep_pinned"):
        strict.view([*pinned, *body], thread="t", system_prompt=prompt)
    with pytest.raises(BudgetError, match=f"token_budget is {need - 1}"):
        asyncio.run(strict.aview([*pinned, *body], thread="t", system_prompt=prompt))
    assert gate_messages([*pinned, *body], token_budget=need, message_overhead=overhead, token_counter=words,
                         on_overflow="raise")[-1] is body[-1]  # pinned content that fits does not raise


def test_a_system_message_after_a_summary_is_pinned_when_the_run_is_sized(caplog: pytest.LogCaptureFixture) -> None:
    """What is pinned follows one rule: a system message after a summary is pinned, and paid for
    before the user's unanswered messages join the current turn, whatever the order; when the
    pinned content alone is over the budget, the warning names the budget the user gave."""
    summary = HumanMessage("Summary: we discussed Redis locks.", additional_kwargs=SUMMARY)
    system = SystemMessage("Company policy: " + "always cite the runbook. " * 20)
    paste, question = HumanMessage("Log: " + "redis timeout at node seven. " * 6), HumanMessage("Why this redis timeout?")
    budget = words(summary.text) + words(system.text) + words(paste.text) - 5
    for order in ([summary, system], [system, summary]):
        view = GatedView(lambda: CountingGatekeeper(token_budget=budget, token_counter=words, message_overhead=0,
                                                    on_overflow="raise"))
        assert view.view([*order, paste, question], thread="t") == [*order, question]
        assert view.turn_start([*order, paste, question], thread="t") == 3
    tight = words(summary.text) + words(paste.text) + 5  # room for the paste if the system message were not counted
    view = GatedView(lambda: CountingGatekeeper(token_budget=tight, token_counter=words, message_overhead=0,
                                                on_overflow="keep_pinned"))
    with caplog.at_level(logging.WARNING, logger="langchain_gatekeeper.agent_view"):
        assert view.view([summary, system, paste, question], thread="t") == [summary, system, question]
        view.view([summary, system, paste, question], thread="t")
    assert [r.getMessage().count(f"token_budget is {tight};") for r in caplog.records] == [1]  # once per thread


# -- parallel tool calls with a message a tool delivered between their results --------------------
def delivered_step(n: int, delivered: BaseMessage | None = None) -> list[BaseMessage]:
    """One agent turn as LangGraph stores parallel calls when the first tool hands the model a
    message in its Command: call, first result, the delivered message, second result, answer."""
    shot, cfg = f"shot{n}", f"cfg{n}"
    return [
        HumanMessage(f"Why is the checkout button {n} hidden? check the page and the redis zindex config", id=f"u{n}"),
        AIMessage("", id=f"a{n}", tool_calls=[{"name": "screenshot", "args": {"url": "https://acme.test"}, "id": shot},
                                             {"name": "read_config", "args": {"name": "redis zindex"}, "id": cfg}]),
        ToolMessage("screenshot attached below", tool_call_id=shot, id=f"t{n}"),
        delivered if delivered is not None else HumanMessage([{"type": "image", "url": f"https://x.test/{n}.png"}],
                                                             id=f"img{n}"),
        ToolMessage(f"checkout.banner.zindex = 9999 ; redis config {n}", tool_call_id=cfg, id=f"r{n}"),
        AIMessage(f"The cookie banner (z-index 9999) covers the checkout button {n}.", id=f"ans{n}"),
    ]


def test_a_message_delivered_between_parallel_results_stays_in_the_calls_turn() -> None:
    """An earlier turn whose parallel results a delivered message (an image, or a text) stands
    between is one turn: gated whole by gate_messages and the view at every budget (the
    message started a turn, so a result could go without its call); ordinary turns group as
    before, and a call never answered does not hold the next question."""
    for delivered in (None, HumanMessage("The page's text: Accept cookies. Checkout.", id="text0")):
        history = [*two_topics(), *delivered_step(0, delivered)]
        history += [HumanMessage("Best espresso grind for a moka pot?", id="e1"), AIMessage("Medium-fine.", id="e2")]
        for query in ("ok?", "What was the redis zindex config value?"):
            messages = [*history, HumanMessage(query, id="now")]
            for budget in range(0, 200, 8):
                for keyed_by in ("content", "id"):
                    view = GatedView(lambda: CountingGatekeeper(token_budget=budget, token_counter=words,
                                                                message_overhead=0), keyed_by=keyed_by)
                    out = view.view(messages, thread="t")
                    check_steps(out)
                    assert out[-1].id == "now"
                check_steps(gate_messages(messages, token_budget=budget, token_counter=words, message_overhead=0))
        roomy = gate_messages([*history, HumanMessage("What was the redis zindex config value?")], token_budget=400,
                              token_counter=words)
        assert [m.id for m in roomy if m.id in {"u0", "a0", "t0", "r0", "ans0"}] == ["u0", "a0", "t0", "r0", "ans0"]
    # a call never answered, then the next question: a turn of its own, as always
    dangling = [HumanMessage("redis lock ttl?", id="q1"), AIMessage("", id="c", tool_calls=[
        {"name": "lookup", "args": {"q": "ttl"}, "id": "never"}]), HumanMessage("espresso grind?", id="q2"),
        AIMessage("Fine.", id="a2"), HumanMessage("espresso beans?", id="q3")]
    view = GatedView(lambda: CountingGatekeeper(token_budget=100, token_counter=words, message_overhead=0))
    view.view(dangling, thread="t")
    assert [turn.positions for turn in view._index("t").memo.turns] == [[0, 1], [2, 3]]


def test_a_text_delivered_between_parallel_results_of_the_current_run_is_not_the_question() -> None:
    """In the current run, a text a tool delivered between two parallel results is the tool's
    (by shape alone, without the run's input): the current turn starts at the question, so the
    second result is sent with its call."""
    history = two_topics()
    run = delivered_step(1, HumanMessage("The page's text: Accept cookies. Checkout.", id="text1"))[:-1]
    messages = [*history, *run]
    assert current_turn_start(messages) == len(history)
    out = gate_messages(messages, token_budget=10, token_counter=words)
    assert out[-len(run):] == run
    check_steps(out)
    # every human message inside a tool step, none of the user's: nothing is gated
    assert current_turn_start(run[1:]) is None
    assert gate_messages(run[1:], token_budget=0) == run[1:]


def test_a_list_growing_one_message_at_a_time_through_parallel_steps_reads_as_a_fresh_view() -> None:
    """A list read mid-step (call, first result, delivered image) and grown by the second result:
    the image read as a turn of its own joins the call's turn, as a fresh view reads it, and the
    index holds exactly the list's turns."""
    for keyed_by in ("content", "id"):
        view = GatedView(make, keyed_by=keyed_by)
        messages: list[BaseMessage] = [*conversation(6, seed=2)]
        for n in range(4):
            for message in delivered_step(n):
                messages.append(message)
                query = f"now about {TOPICS[n][0]}?"
                got = view.view([*messages, HumanMessage(query)], thread="t")
                assert got == fresh([*messages, HumanMessage(query)], keyed_by), (keyed_by, n, message.id)
                # the whole list as earlier turns (the delivered image read as a turn while it is last)
                got = view.gated(messages, query, thread="g")
                assert got == GatedView(make, keyed_by=keyed_by).gated(messages, query), (keyed_by, n, message.id)
                for thread in ("t", "g"):
                    assert len(view.gatekeeper(thread)) == len(view._index(thread).memo.turns), (keyed_by, n, message.id)
        memo = view._index("g").memo
        assert [turn.positions for turn in memo.turns[-4:]] == [list(range(12 + 6 * n, 18 + 6 * n)) for n in range(4)]


def test_list_prints_see_a_change_of_what_pairs_results_with_calls() -> None:
    """Grouping reads which call a result answers and the invalid calls: a change in place to
    either is a change of the list."""
    for keyed_by in ("content", "id"):
        messages: list[BaseMessage] = [
            HumanMessage("redis lock ttl?", id="h0"),
            AIMessage("", tool_calls=[{"name": "look", "args": {"q": "ttl"}, "id": "c1"}], id="a0"),
            ToolMessage("30 s", tool_call_id="c1", id="t0"), AIMessage("About 30 seconds.", id="a1"),
        ]
        prints = _Prints()
        prints.add(messages, keyed_by)
        for change in (lambda m: setattr(m[2], "tool_call_id", "c2"),
                       lambda m: m[1].invalid_tool_calls.append({"name": "x", "args": "{", "id": "c9", "error": None,
                                                                 "type": "invalid_tool_call"})):
            copies = [m.model_copy(deep=True) for m in messages]
            assert prints.begin(copies, keyed_by)
            change(copies)
            assert not prints.begin(copies, keyed_by)


def _lookup(message_id: str, *call_ids: str) -> AIMessage:
    return AIMessage("", id=message_id, tool_calls=[{"name": "lookup", "args": {"q": "redis ttl"}, "id": c}
                                                    for c in call_ids])


def _groups(view: GatedView, thread: str, messages: list[BaseMessage]) -> list[list[str | None]]:
    return [[messages[i].id for i in turn.positions] for turn in view._index(thread).memo.turns]


def test_a_call_id_made_again_after_a_result_does_not_hide_which_call_it_answers() -> None:
    """Call ids that repeat across steps (``call_0`` each step, as some providers and local servers
    number them): a list read while a delivered image was last, grown by the result of the call
    before it and a new call of the same id.  The result answers the older call, so the grown list
    groups as a fresh view groups it (the later call_0 hid that: the image and the result became a
    turn of their own, the result sent without its call)."""
    for keyed_by in ("content", "id"):
        messages: list[BaseMessage] = [HumanMessage("redis ttl?", id="u0"), _lookup("a1", "call_0"),
                                       HumanMessage([{"type": "image", "url": "https://x.test/y.png"}], id="d2")]
        view = GatedView(make, keyed_by=keyed_by)
        view.gated(messages, "redis ttl?", thread="t")
        messages += [ToolMessage("ttl 30s", tool_call_id="call_0", id="t3"), _lookup("a4", "call_0")]
        got = view.gated(messages, "redis ttl?", thread="t")
        fresh_view = GatedView(make, keyed_by=keyed_by)
        assert got == fresh_view.gated(messages, "redis ttl?", thread="t")
        assert _groups(view, "t", messages) == _groups(fresh_view, "t", messages) == [["u0", "a1", "d2", "t3", "a4"]]
        assert len(view.gatekeeper("t")) == 1


def test_a_list_grown_a_few_messages_at_a_time_reads_as_a_fresh_view_with_repeated_call_ids() -> None:
    """Property: agent lists whose tool steps number their calls call_0, call_1 ... each step, with
    delivered human messages (images, texts) between results and some results missing, grown a few
    messages at a time: after each call the view's turns, its index and what it keeps are a fresh
    view's."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    vocabulary = ["redis", "ttl", "espresso", "grind", "kafka", "lag"]

    @st.composite
    def grown(draw: Any) -> tuple[list[BaseMessage], list[int]]:
        n = itertools.count()
        messages: list[BaseMessage] = []

        def text() -> str:
            return " ".join(draw(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=3)))

        for _ in range(draw(st.integers(1, 4))):
            messages.append(HumanMessage(text(), id=f"u{next(n)}"))
            for _ in range(draw(st.integers(0, 2))):
                calls = [f"call_{j}" for j in range(draw(st.integers(1, 3)))]
                messages.append(_lookup(f"a{next(n)}", *calls))
                for call in draw(st.lists(st.sampled_from(calls), unique=True)):
                    if draw(st.booleans()):
                        delivered = draw(st.sampled_from([[{"type": "image", "url": "u"}], "delivered " + text()]))
                        messages.append(HumanMessage(delivered, id=f"d{next(n)}"))
                    messages.append(ToolMessage(text(), tool_call_id=call, id=f"t{next(n)}"))
            if draw(st.booleans()):
                messages.append(AIMessage(text(), id=f"f{next(n)}"))
        cuts = sorted(set(draw(st.lists(st.integers(1, len(messages)), max_size=len(messages)))) | {len(messages)})
        return messages, cuts

    @settings(max_examples=100, suppress_health_check=list(HealthCheck))
    @given(grown(), st.sampled_from(["content", "id"]))
    def check(case: tuple[list[BaseMessage], list[int]], keyed_by: str) -> None:
        messages, cuts = case
        view = GatedView(make, keyed_by=keyed_by)
        for cut in cuts:
            part = messages[:cut]
            got = view.gated(part, "redis ttl watchdog?", thread="t")
            fresh_view = GatedView(make, keyed_by=keyed_by)
            assert got == fresh_view.gated(part, "redis ttl watchdog?", thread="t")
            assert _groups(view, "t", part) == _groups(fresh_view, "t", part), [m.id for m in part]
            assert len(view.gatekeeper("t")) == len(view._index("t").memo.turns)

    check()


# -- what a thread's index keeps ---------------------------------------------------------------------
class Photo(HumanMessage):
    """A HumanMessage subclass (weakly referenced by the test)."""


def test_the_view_keeps_no_message_and_no_image_of_a_list_it_gated() -> None:
    """A thread's memo keeps what it compares and regroups (classes, ids, texts, where each
    message stood), not the messages: once the caller drops its list, no message and no image
    of it is left in memory (each thread kept its images: 123 MB for 40 threads of three)."""
    import gc
    import sys
    import weakref

    image = "iVBORw0KGgo" + "A" * 200_000  # a base64 image, one string object
    baseline = sys.getrefcount(image)
    for keyed_by in ("content", "id"):
        view = GatedView(make, keyed_by=keyed_by)

        def gate(messages: list[BaseMessage]) -> list[weakref.ref[BaseMessage]]:
            view.view(messages, thread="t")
            return [weakref.ref(m) for m in messages]

        photos = [Photo([{"type": "text", "text": f"redis dashboard photo {i}"},
                         {"type": "image", "base64": image, "mime_type": "image/png"}], id=f"p{i}") for i in range(3)]
        refs = gate([*[m for i, p in enumerate(photos) for m in (p, AIMessage(f"Nice photo {i}.", id=f"n{i}"))],
                     HumanMessage("which redis photo was best?", id="q")])
        longer = [*photos, AIMessage("All fine.", id="f"), HumanMessage("and the redis ttl?", id="q2")]
        refs += gate(longer)  # a list that is no extension: read whole
        del photos, longer
        gc.collect()
        assert all(ref() is None for ref in refs), keyed_by
        assert sys.getrefcount(image) == baseline, keyed_by
        # the texts beside the images are still read, and a change to one is seen
        photo = Photo([{"type": "text", "text": "espresso grind photo"}, {"type": "image", "base64": image}], id="x")
        messages = [photo, AIMessage("Fine grind.", id="y"), *conversation(4), HumanMessage("espresso grind?", id="z")]
        view.view(messages, thread="u")
        photo.content[0]["text"] = "redis watchdog photo"
        assert view.view(messages, thread="u") == fresh(messages, keyed_by)
        assert "redis watchdog photo" in view._index("u").memo.turns[0].texts[0]
        del photo, messages


def test_the_core_and_the_view_group_a_step_with_an_invalid_call_alike() -> None:
    """A call whose arguments did not parse (``invalid_tool_calls``) is answered by a tool
    message too: the stored history (the core's grouping) keeps a delivered message inside
    its step exactly as the agent view does, so neither sends a result without its call."""
    from context_gatekeeper.transcripts.transcript_gate import group_turns
    from langchain_gatekeeper.agent_view import _turns
    from langchain_gatekeeper.convert import from_core_messages, to_core_messages

    ai = AIMessage("", id="a1", tool_calls=[{"name": "t", "args": {}, "id": "c1"}],
                   invalid_tool_calls=[{"name": "t2", "args": "{bad", "id": "c2", "error": "bad json"}])
    messages = [HumanMessage("q1", id="q1"), ai, ToolMessage("ok", tool_call_id="c1", id="t1"),
                HumanMessage([{"type": "image", "url": "https://example.com/u.png"}], id="img"),
                ToolMessage("error: bad args", tool_call_id="c2", id="t2"), AIMessage("done", id="a2")]
    view = [[messages[p].id for p in t.positions] for t in _turns(messages, "id")]
    core = to_core_messages(messages)
    _, grouped = group_turns(core)
    assert [[m.id for m in t.messages] for t in grouped] == view == [["q1", "a1", "t1", "img", "t2", "a2"]]
    assert from_core_messages(core) == messages  # the invalid call reads back where it was


# -- how the view starts -------------------------------------------------------------------------
CUT_SUMMARY = HumanMessage("Here is a summary of the conversation to date:\n\nWe sized a Redis lock TTL.", id="s",
                           additional_kwargs={"lc_source": "summarization"})
GIN = "Use a GIN index on the Postgres jsonb column; btree cannot index containment."


def gin_step(call_id: str = "c1") -> list[BaseMessage]:
    """The rest of a turn SummarizationMiddleware cut after its question: a call, its result, the answer."""
    return [AIMessage("", tool_calls=[{"name": "index_advice", "args": {"column": "jsonb"}, "id": call_id,
                                       "type": "tool_call"}], id=f"a-{call_id}"),
            ToolMessage("GIN supports @> containment on jsonb; btree does not.", tool_call_id=call_id, id=f"t-{call_id}"),
            AIMessage(GIN, id=f"b-{call_id}")]


@pytest.mark.parametrize("question", ["Why?", "Why GIN and not btree for the Postgres jsonb column?"])
def test_the_rest_of_a_turn_a_summary_cut_is_sent_after_the_summary(question: str) -> None:
    """A pinned summary is a user's message, so the view already starts on one: the rest of the
    turn the summary cut (the answer "Why?" asks about) follows it, by every path, whatever the
    budget (it was dropped for not opening on a user's message); one opening on a tool result
    (its call was not sent) is still left out, and so is a tool step with no summary before it."""
    messages = [SystemMessage("Be concise."), CUT_SUMMARY, *gin_step(), HumanMessage(question, id="q")]
    middleware = GatekeeperMiddleware(token_budget=100_000)
    assert middleware.views.view(messages, thread="t") == messages
    assert asyncio.run(middleware.views.aview(messages, thread="a")) == messages
    assert gate_messages(messages, token_budget=100_000) == messages
    orphan = [SystemMessage("Be concise."), CUT_SUMMARY, *gin_step()[1:], HumanMessage(question, id="q")]
    assert gate_messages(orphan, token_budget=100_000) == [orphan[0], CUT_SUMMARY, orphan[-1]]
    unsummarised = [SystemMessage("Be concise."), *gin_step(), HumanMessage(question, id="q")]
    assert gate_messages(unsummarised, token_budget=100_000) == [unsummarised[0], unsummarised[-1]]


@pytest.mark.parametrize("use_async", [False, True])
def test_after_summarization_middleware_cuts_a_turn_why_gets_the_answer_it_asks_about(use_async: bool) -> None:
    """SummarizationMiddleware keeps the last tool step and answer of a turn whose question it
    summarised: the gated call sends what the ungated one sends (the summary, the rest of that
    turn, "Why?"), not the summary and "Why?" alone."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from lc_support import Recorder

    @tool
    def index_advice(column: str) -> str:
        """Which index suits a column."""
        return "GIN supports @> containment on jsonb; btree does not."

    class Rules(BaseChatModel):
        """Calls index_advice for a Postgres question, answers its result, echoes anything else."""

        @property
        def _llm_type(self) -> str:
            return "rules"

        def bind_tools(self, tools: Any, **kwargs: Any) -> "Rules":
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            last = messages[-1]
            reply = (AIMessage("", tool_calls=[{"name": "index_advice", "args": {"column": "jsonb"}, "id": "c1",
                                                "type": "tool_call"}])
                     if last.type == "human" and "Postgres" in last.text
                     else AIMessage(GIN) if last.type == "tool" else AIMessage(f"Answer about: {last.text}"))
            return ChatResult(generations=[ChatGeneration(message=reply)])

    def last_call(gated: bool) -> list[BaseMessage]:
        recorder = Recorder()
        summarise = SummarizationMiddleware(FakeMessagesListChatModel(responses=[AIMessage("SUMMARY: redis, espresso")]),
                                            trigger=("messages", 6), keep=("messages", 3))
        middleware = [GatekeeperMiddleware(), summarise] if gated else [summarise]
        agent = create_agent(Rules(callbacks=[recorder]), [index_advice], system_prompt="Be concise.",
                             middleware=middleware, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        for question in ("How long should a Redis lock TTL be?", "What espresso grind for a moka pot?",
                         "Which Postgres index fits a jsonb column for containment?", "Why?"):
            request = {"messages": [HumanMessage(question)]}
            asyncio.run(agent.ainvoke(request, config)) if use_async else agent.invoke(request, config)
        return recorder.last

    plain = last_call(gated=False)
    assert [m.type for m in plain] == ["system", "human", "ai", "tool", "ai", "human"] and plain[-2].text == GIN
    assert [(m.type, m.text) for m in last_call(gated=True)] == [(m.type, m.text) for m in plain]


def test_the_assistants_greeting_that_opens_the_chat_is_kept_as_the_history_keeps_it() -> None:
    """A chat seeded with the assistant's greeting: when selection keeps it, the middleware and
    gate_messages send it, as GatekeeperChatMessageHistory.select does (they dropped it for not
    opening on a user's message, whatever the budget)."""
    from langchain_gatekeeper import GatekeeperChatMessageHistory

    from lc_support import Recorder

    greeting = AIMessage("Hi! I'm the Postgres helper. Ask me about jsonb GIN indexes.", id="g")
    question = HumanMessage("Which jsonb GIN index operator class should I use?", id="q")
    history = GatekeeperChatMessageHistory("greeting")
    history.add_messages([greeting])
    assert history.select(question.text) == [greeting]
    assert gate_messages([greeting, question], token_budget=10_000) == [greeting, question]
    recorder = Recorder()
    model = GenericFakeChatModel(messages=iter([AIMessage("Use jsonb_path_ops."), AIMessage("Smaller and faster.")]),
                                 callbacks=[recorder])
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=10_000)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "g"}}
    agent.invoke({"messages": [greeting, question]}, config)  # the greeting seeded with the first input
    assert [m.id for m in recorder.last] == ["g", "q"]
    agent.invoke({"messages": [HumanMessage("And why jsonb_path_ops for the GIN index?", id="q2")]}, config)
    assert [m.id for m in recorder.last][:2] == ["g", "q"] and recorder.last[-1].id == "q2"


# -- the event loop -------------------------------------------------------------------------------
def test_an_async_agent_builds_a_cold_threads_index_off_the_event_loop() -> None:
    """Without an embedder the first call on a long thread (a restart, an eviction) builds its
    index in a worker thread, so the event loop is never stalled by it; a call on a list that grew
    by a turn since (the steady state, cheap) is gated on the loop.  The token counter tells
    which thread did the work: it counts each turn's texts as the index takes them."""
    import threading

    counted: list[tuple[int, str]] = []

    def counter(text: str) -> int:
        counted.append((threading.get_ident(), text))
        return len(text.split())

    history = conversation(200)
    model = GenericFakeChatModel(messages=iter([AIMessage("Grind finer."), AIMessage("Renew it every 30 seconds.")]))
    agent = create_agent(model, [], middleware=[GatekeeperMiddleware(token_budget=300, token_counter=counter)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "long"}}
    counted.clear()  # the counter's probe at construction

    async def scenario() -> tuple[int, list[tuple[int, str]], list[tuple[int, str]]]:
        loop_thread = threading.get_ident()
        await agent.ainvoke({"messages": [*history, HumanMessage("espresso grind size for beans?")]}, config)
        cold = list(counted)
        counted.clear()
        await agent.ainvoke({"messages": [HumanMessage("And the redis lock watchdog?")]}, config)
        return loop_thread, cold, list(counted)

    loop_thread, cold, grown = asyncio.run(scenario())
    assert {text for _, text in cold} >= {m.text for m in history[:4]}  # the index was built in this call
    assert loop_thread not in {thread for thread, _ in cold}  # off the loop
    assert {text for _, text in grown} == {"espresso grind size for beans?", "Grind finer."}  # only the new turn
    assert {thread for thread, _ in grown} == {loop_thread}  # cheap: on the loop


def test_with_an_embedder_an_async_call_builds_a_cold_threads_index_off_the_event_loop() -> None:
    """With an embedder too, the first async call on a long thread the view has not indexed (a
    restart, an eviction) reads the list and builds the index in a worker thread, the thread's lock
    held, and then awaits the query's embedding (it ran on the event loop, stalling it for the whole
    build); a call on a list that grew by a turn since (cheap) is gated on the loop.  The token
    counter tells which thread did the work: it counts each turn's texts as the index takes them."""
    import threading

    counted: list[tuple[int, str]] = []

    def counter(text: str) -> int:
        counted.append((threading.get_ident(), text))
        return len(text.split())

    history = conversation(200)
    embedder = HashEmbedder()
    views = GatekeeperMiddleware(token_budget=300, token_counter=counter, embedder=embedder).views
    question = HumanMessage("espresso grind size for beans?", id="q1")
    grown = [*history, question, AIMessage("Grind finer.", id="a1"), HumanMessage("And the redis lock watchdog?", id="q2")]
    counted.clear()  # the counter's probe at construction

    async def scenario() -> tuple[int, list[tuple[int, str]], list[tuple[int, str]]]:
        loop_thread = threading.get_ident()
        await views.aview([*history, question], thread="long")
        cold = list(counted)
        counted.clear()
        await views.aview(grown, thread="long")
        return loop_thread, cold, list(counted)

    loop_thread, cold, later = asyncio.run(scenario())
    wait_idle()
    assert {text for _, text in cold} >= {m.text for m in history[:4]}  # the index was built in this call
    assert loop_thread not in {thread for thread, _ in cold}  # off the loop
    assert {text for _, text in later} == {question.text, "Grind finer."}  # only the new turn
    assert {thread for thread, _ in later} == {loop_thread}  # cheap: on the loop
    assert embedder.query_calls == [question.text, grown[-1].text]  # each call awaited its query's embedding


def test_a_call_cancelled_while_a_worker_builds_its_index_keeps_the_lock_until_the_worker_is_done() -> None:
    """The cold build runs in a worker thread under the thread's lock, which the async call holds:
    cancelled meanwhile, the call waits for the worker (a thread cannot be stopped) before the lock
    goes and the cancellation is raised, so no other call meets a half-built index; the next call
    gets what a fresh view gives.  Events, not timing, say where the worker is."""
    import threading

    armed, started, go = threading.Event(), threading.Event(), threading.Event()

    def counter(text: str) -> int:
        if armed.is_set() and not started.is_set():
            started.set()
            go.wait(10)
        return len(text.split())

    history = conversation(60)
    views = GatekeeperMiddleware(token_budget=300, token_counter=counter, embedder=HashEmbedder()).views
    armed.set()  # past the counter's probe at construction
    question = HumanMessage("espresso grind size for beans?")

    async def scenario() -> bool:
        call = asyncio.ensure_future(views.aview([*history, question], thread="long"))
        await asyncio.to_thread(started.wait, 10)  # the worker is inside the build
        call.cancel()
        for _ in range(5):
            await asyncio.sleep(0)
        lock = views._index("long").lock
        held = not lock.acquire(blocking=False)
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert lock.acquire(blocking=False)  # released once the worker was done
        lock.release()
        return held

    assert asyncio.run(scenario())
    wait_idle()
    fresh_view = GatekeeperMiddleware(token_budget=300, token_counter=counter, embedder=HashEmbedder()).views
    assert views.view([*history, question], thread="long") == fresh_view.view([*history, question], thread="long")


def test_a_cancelled_call_whose_worker_then_fails_leaves_no_unretrieved_exception(
        caplog: pytest.LogCaptureFixture) -> None:
    """Cancelled while its worker builds the index, a call waits for the worker and raises the
    cancellation; a worker that then fails (a tokenizer crash) has its error taken, not left for
    asyncio to report later as "Task exception was never retrieved" with a traceback."""
    import gc
    import threading

    armed, started, go = threading.Event(), threading.Event(), threading.Event()

    def counter(text: str) -> int:
        if armed.is_set() and not started.is_set():
            started.set()
            go.wait(10)
            raise RuntimeError("tokenizer crashed")
        return len(text.split())

    views = GatekeeperMiddleware(token_budget=300, token_counter=counter, embedder=HashEmbedder()).views
    armed.set()  # past the counter's probe at construction

    async def scenario() -> None:
        call = asyncio.ensure_future(views.aview([*conversation(60), HumanMessage("espresso grind?")], thread="long"))
        await asyncio.to_thread(started.wait, 10)  # the worker is inside the build
        call.cancel()
        for _ in range(5):
            await asyncio.sleep(0)
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        gc.collect()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(scenario())
        gc.collect()
    wait_idle()
    assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]
