"""GatedView and the LangChain list paths do per call only what the call changed.

Token counts are computed once per text and counter (across calls, threads, gates and
middlewares); a list that grew is read and indexed by its new messages only; anything
else (an edit in place, a dropped oldest turn, an answer joining the last turn) gives
exactly what a fresh view gives.  Counting wrappers around real gatekeepers show the
work done; nothing is timed.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from context_gatekeeper import InvalidInputError
from langchain_gatekeeper import GatekeeperMiddleware, gate_messages
from langchain_gatekeeper.agent_view import GatedView, _Prints

from gatekeeper_support import CountingCounter, CountingGatekeeper

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
    model = GenericFakeChatModel(messages=itertools.repeat(AIMessage("Noted.")))
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
    assert sum(counter.seen.values()) == counted + 3  # one new turn text per invoke
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
    assert calls["Best decaf grind?\nFine."] == 2


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
