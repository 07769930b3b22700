"""The thread indexes a GatedView keeps (the agent middleware's, gate_messages'): bounded by
count and by the characters they hold, weighed again as a thread grows, never evicted while
a call uses them, and dropped on request.  Bounds are read from the caches' own accounting
(entries, weight) and weak references; nothing is timed."""

from __future__ import annotations

import gc
import itertools
import threading
import weakref
from collections.abc import Callable

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from context_gatekeeper import ContextGatekeeper, InvalidInputError
from langchain_gatekeeper import GatekeeperMiddleware, agent_view, gate_messages, trim
from langchain_gatekeeper.agent_view import THREAD_INDEX_CHARS, GatedView

from langgraph.checkpoint.memory import InMemorySaver


def pasted(seed: int, chars: int) -> str:
    """A pasted text of about ``chars`` characters, its words distinct (a log, a dump)."""
    words = (f"w{seed}x{i}" for i in itertools.count())
    out, size = [], 0
    while size < chars:
        out.append(next(words))
        size += len(out[-1]) + 1
    return " ".join(out)[:chars]


def with_paste(seed: int, chars: int) -> list[BaseMessage]:
    return [HumanMessage("Here is my log:\n" + pasted(seed, chars)), AIMessage("It shows a timeout."),
            HumanMessage("How do I fix the timeout?")]


def gatekeeper(counter: Callable[[str], int] = len) -> Callable[[], ContextGatekeeper]:
    return lambda: ContextGatekeeper(token_budget=500, token_counter=counter, on_overflow="keep_pinned")


def test_thread_indexes_are_bounded_by_the_characters_they_hold() -> None:
    view = GatedView(gatekeeper(), max_threads=100, max_thread_chars=50_000)
    for seed in range(10):
        view.view(with_paste(seed, 20_000), thread=f"t{seed}")
        assert view._threads.weight <= 50_000
    assert 2 <= len(view._threads) <= 3 and view.weight == view._threads.weight
    assert "t9" in view._threads and "t0" not in view._threads  # the least recently used went first


def test_a_threads_weight_follows_what_its_index_holds_as_it_grows_and_shrinks() -> None:
    view = GatedView(gatekeeper(), keyed_by="content")
    history: list[BaseMessage] = []
    weights = []
    for i in range(6):
        history += [HumanMessage(f"question {i} " + "x" * 1000), AIMessage(f"answer {i} " + "y" * 1000)]
        view.view([*history, HumanMessage("and then?")], thread="t")
        weights.append(view.weight)
    assert all(b - a >= 2000 for a, b in zip(weights, weights[1:])), weights  # each turn weighed in
    view.view([*history[6:], HumanMessage("and then?")], thread="t")  # the three oldest turns dropped
    assert weights[-1] - view.weight >= 6000, (weights[-1], view.weight)
    assert view._threads._weights["t"] == view.weight


def test_the_index_a_call_is_using_is_never_evicted_nor_brought_back_once_forgotten() -> None:
    entered, go = threading.Event(), threading.Event()

    def counter(text: str) -> int:
        if "HOLD" in text:  # the call on thread "a" waits here, holding its index's lock
            entered.set()
            assert go.wait(30)
        return len(text)

    view = GatedView(gatekeeper(counter), max_threads=100, max_thread_chars=30_000)
    worker = threading.Thread(target=view.view, args=([HumanMessage("HOLD " + pasted(0, 10_000)), AIMessage("ok"),
                                                        HumanMessage("so?")],), kwargs={"thread": "a"})
    worker.start()
    try:
        assert entered.wait(30)
        held = view._threads.get("a")
        for seed in range(1, 6):  # other threads fill the cache past its weight: "a" is the least recent
            view.view(with_paste(seed, 12_000), thread=f"t{seed}")
        assert view._threads.get("a") is held and view._threads.weight <= 30_000  # "a" weighs 0 until its call ends
    finally:
        go.set()
        worker.join(30)
    assert view._threads.get("a") is held and view._threads._weights["a"] >= 10_000  # weighed at its call's end

    # forgotten while a call uses it: the call ends with it, and it is not put back
    entered.clear()
    go.clear()
    worker = threading.Thread(target=view.view, args=([HumanMessage("HOLD again " + pasted(7, 100)), AIMessage("ok"),
                                                        HumanMessage("so?")],), kwargs={"thread": "b"})
    worker.start()
    try:
        assert entered.wait(30)
        index = weakref.ref(view._threads.get("b"))
        view.forget("b")
        assert "b" not in view._threads
    finally:
        go.set()
        worker.join(30)
    gc.collect()
    assert "b" not in view._threads and index() is None


def test_forget_drops_a_threads_index_and_its_weight() -> None:
    view = GatedView(gatekeeper())
    view.view(with_paste(1, 5_000), thread="a")
    view.view(with_paste(2, 5_000), thread="b")
    before = view.weight
    kept = weakref.ref(view.gatekeeper("a"))
    view.forget("a")
    view.forget("never seen")  # nothing to drop: no error
    gc.collect()
    assert kept() is None and "a" not in view._threads and view.weight < before - 5_000 and len(view._threads) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_a_bad_max_thread_chars_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="max_thread_chars"):
        GatedView(gatekeeper(), max_thread_chars=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="max_thread_chars"):
        GatekeeperMiddleware(max_thread_chars=bad)  # type: ignore[arg-type]


def test_the_middleware_bounds_its_threads_by_weight_and_forgets_a_thread() -> None:
    model = GenericFakeChatModel(messages=iter(AIMessage(f"answer {i}") for i in itertools.count()))
    middleware = GatekeeperMiddleware(token_budget=2000, max_thread_chars=40_000)
    assert middleware.views._threads.max_weight == 40_000
    assert GatekeeperMiddleware().views._threads.max_weight == THREAD_INDEX_CHARS
    saver = InMemorySaver()
    agent = create_agent(model, [], middleware=[middleware], checkpointer=saver)
    for seed in range(5):
        config = {"configurable": {"thread_id": f"t{seed}"}}
        agent.invoke({"messages": [HumanMessage("Why do orders fail? Log:\n" + pasted(seed, 15_000))]}, config)
        agent.invoke({"messages": [HumanMessage("which worker fails most?")]}, config)
        assert middleware.views.weight <= 40_000
    assert "t4" in middleware.views._threads and len(middleware.views._threads) <= 2
    kept = weakref.ref(middleware.views.gatekeeper("t4"))
    saver.delete_thread("t4")
    middleware.forget_thread("t4")
    gc.collect()
    assert kept() is None and "t4" not in middleware.views._threads


def test_gate_messages_bounds_the_threads_of_all_its_views_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trim, "_views", trim._view_cache(60_000))
    monkeypatch.setattr(trim, "THREAD_INDEX_CHARS", 60_000)
    for budget in range(1000, 1008):  # eight sets of options: eight views
        for seed in range(3):
            gate_messages(with_paste(budget * 10 + seed, 12_000), token_budget=budget, thread=f"t{seed}")
            views = list(trim._views._data.values())
            assert sum(view.weight for view in views) <= 60_000 and trim._views.weight <= 60_000
    assert len(trim._views) < 8


class _Model(FakeMessagesListChatModel):
    """A chat model built per request, as a server that makes its client per request does."""

    def get_num_tokens(self, text: str) -> int:
        return len(text) // 4 + 1


def test_a_model_built_per_request_is_not_kept_alive_by_the_token_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trim, "_views", trim._view_cache(trim.THREAD_INDEX_CHARS))
    alive = []
    for request in range(trim._CACHE_SIZE + 8):
        model = _Model(responses=[AIMessage("ok")])
        gate_messages([HumanMessage(f"question {request}"), AIMessage("answer"), HumanMessage("and?")],
                      token_budget=500, token_counter=model, thread=f"u{request % 5}")
        alive.append(weakref.ref(model))
        del model
    gc.collect()
    assert len(agent_view.TOKEN_COUNTS) > 0
    assert sum(ref() is not None for ref in alive) <= trim._CACHE_SIZE  # only the views kept hold theirs
    trim._views.clear()
    gc.collect()
    assert sum(ref() is not None for ref in alive) == 0  # the token counts hold none


def test_token_counts_of_a_collected_counter_are_never_read_as_another_counters() -> None:
    counts = []
    for tokens in (1, 2, 3, 4):
        counter = agent_view.counted_once(lambda text, tokens=tokens: tokens)  # maybe at a dead one's address
        counts.append(counter("the same text"))
        del counter
        gc.collect()
    assert counts == [1, 2, 3, 4]


def test_the_async_twins_forget_too() -> None:
    import asyncio

    middleware = GatekeeperMiddleware(token_budget=2000)
    middleware.views.view(with_paste(3, 1_000), thread="a")
    middleware.views.view(with_paste(4, 1_000), thread="b")
    asyncio.run(middleware.aforget_thread("a"))
    asyncio.run(middleware.views.aforget("b"))
    assert len(middleware.views._threads) == 0 and middleware.views.weight == 0
