"""How the semantic channel runs embedding calls: turns embedded in the background, one
query call per select, backoff and one warning per outage, no leaked threads, no lock
or store I/O on the event loop.  A "hung" embedder waits on a threading.Event the test
sets at the end; no timing is asserted beyond generous bounds."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from context_gatekeeper import ContextGatekeeper, Transcript, TranscriptGate
from context_gatekeeper.selection.semantic.runner import BACKOFF_SECONDS, forget_outages, state_of, wait_idle
from context_gatekeeper.stores import SQLiteStore
from test_semantic import CHAT, HashEmbedder, gatekeeper


@pytest.fixture(autouse=True)
def _no_outage_carries_over():
    forget_outages()
    yield
    forget_outages()


def lane_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("gatekeeper-embed")]


class Hung(HashEmbedder):
    """Every call waits until ``release`` is set (a hung HTTP call with no client timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed_documents(self, texts):
        self.release.wait()
        return super().embed_documents(texts)

    def embed_query(self, text):
        self.query_calls.append(text)
        self.release.wait()
        return self.vector(text)


# -- a hung sync-only embedder and asyncio ----------------------------------------
def test_a_hung_sync_only_embedder_never_starves_asyncio_to_thread() -> None:
    hung = Hung()
    gk = ContextGatekeeper(embedder=hung, embed_timeout=0.05)
    gk.add_turn("redis lock ttl", "longer than the job")
    calls = min(32, (os.cpu_count() or 1) + 4) + 2  # more than asyncio's default executor has workers

    async def main() -> None:
        for i in range(calls):
            selection = await gk.aexplain(f"redis lock question {i}")
            assert selection.semantic_fallback and selection.turn_ids == (1,)
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 1), 30) == 1  # the default executor is free

    threads = len(lane_threads())
    try:
        asyncio.run(main())
        assert len(hung.query_calls) == 1  # then the embedder is left alone (backoff)
        assert len(lane_threads()) <= threads + 2  # one per lane at most
    finally:
        hung.release.set()


def test_the_process_exits_while_an_embedder_hangs_forever() -> None:
    script = textwrap.dedent("""
        import asyncio, threading
        from context_gatekeeper import ContextGatekeeper
        never = threading.Event()
        def embed(texts):
            never.wait()
            return [[1.0, 0.0]] * len(texts)
        async def main():
            gk = ContextGatekeeper(embedder=embed, embed_timeout=0.05)
            gk.add_turn("redis lock ttl", "longer than the job")
            for i in range(8):
                await gk.aexplain(f"redis lock question {i}")
            print("done")
        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr


# -- the async path and the event loop ----------------------------------------------
class ThreadLoggingStore(SQLiteStore):
    """Records the thread of every vector load and save."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.io_threads: list[int] = []

    def load_vectors(self, *args, **kw):
        self.io_threads.append(threading.get_ident())
        return super().load_vectors(*args, **kw)

    def save_vectors(self, *args, **kw):
        self.io_threads.append(threading.get_ident())
        return super().save_vectors(*args, **kw)


def test_async_gate_never_does_vector_store_io_on_the_event_loop(tmp_path) -> None:
    store = ThreadLoggingStore(tmp_path / "s.db")
    transcript = Transcript("s", store=store)
    for user, assistant in CHAT:
        transcript.append(user=user, assistant=assistant)
    gate = TranscriptGate(transcript, token_counter=len, message_overhead=0, embedder=HashEmbedder())

    async def main() -> int:
        await gate.aexplain("Where did we go hiking?")
        await gate.aembed_pending()
        await gate.aselect_messages("Where did we go hiking?")
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert wait_idle(30)
    assert store.io_threads and loop_thread not in store.io_threads
    assert len(store.load_vectors("s", gate.gatekeeper.embedder.name)) == len(CHAT)
    transcript.close()


def test_no_embedding_call_runs_under_the_lock_and_async_never_waits_for_it() -> None:
    hold, entered = threading.Event(), threading.Event()

    class HoldsSyncCaller(HashEmbedder):
        def embed_query(self, text):
            if text == "sync caller":
                entered.set()
                hold.wait()
            return super().embed_query(text)

    gk = gatekeeper(HoldsSyncCaller())
    worker = threading.Thread(target=gk.select, args=("sync caller",))
    worker.start()
    safety = threading.Timer(60, hold.set)  # only if the async call waits on the lock (the fault this guards against)
    safety.start()
    try:
        assert entered.wait(30)
        assert gk._lock.acquire(blocking=False)  # the sync select's embedding call holds no lock
        gk._lock.release()
        selection = asyncio.run(gk.aexplain("Where did we go hiking?"))
        assert not hold.is_set() and not selection.semantic_fallback  # done while the sync call still hangs
    finally:
        hold.set()
        safety.cancel()
        worker.join(30)


def test_abuild_prompt_builds_build_prompts_text_while_the_loop_runs_on() -> None:
    """The prompt's query embedding is awaited: the event loop runs other work meanwhile."""
    hold, entered = threading.Event(), threading.Event()

    class SlowQuery(HashEmbedder):
        def embed_query(self, text):
            if text.startswith("slow"):
                entered.set()
                hold.wait()
            return super().embed_query(text)

    gk = gatekeeper(SlowQuery())
    assert asyncio.run(gk.abuild_prompt("Where did we go hiking?")) == gk.build_prompt("Where did we go hiking?")
    released_by_loop = []

    async def main() -> str:
        task = asyncio.create_task(gk.abuild_prompt("slow: where did we go hiking?"))
        while not entered.is_set():  # the loop runs this while the task waits on the embedder
            await asyncio.sleep(0.01)
        released_by_loop.append(not hold.is_set())  # set here, not by the safety timer
        hold.set()
        return await task

    safety = threading.Timer(60, hold.set)  # only if abuild_prompt blocks the loop (the fault this guards against)
    safety.start()
    try:
        prompt = asyncio.run(main())
    finally:
        hold.set()
        safety.cancel()
        safety.join()  # no thread left running
    assert released_by_loop == [True] and prompt == gk.build_prompt("slow: where did we go hiking?")


# -- one embedding call per select -------------------------------------------------------------
def test_a_select_after_a_bulk_load_makes_one_embedding_call() -> None:
    class HungDocuments(Hung):
        def embed_query(self, text):
            self.query_calls.append(text)
            return self.vector(text)

    hung = HungDocuments()
    gk = ContextGatekeeper(embedder=hung, embed_timeout=30)
    for i in range(1000):
        gk.add_turn(f"turn {i} text", "answer")
    try:
        selection = gk.explain("turn 5?")
        assert hung.query_calls == ["turn 5?"] and not selection.semantic_fallback  # the query, nothing else
        assert all(s.similarity is None for s in selection.scores)  # turns not embedded yet: lexical
        assert hung.document_calls == []  # the background pass is still waiting on the embedder
    finally:
        hung.release.set()
    assert gk.embed_pending() >= 0 and len(gk._semantic.vectors) == 1000


def test_while_the_embedder_hangs_selects_back_off_instead_of_waiting() -> None:
    threads = len(lane_threads())
    hung = Hung()
    gk = ContextGatekeeper(embedder=hung, embed_timeout=0.2)
    gk.add_turn("redis lock ttl", "longer than the job")
    try:
        for i in range(5):
            gk.add_turn(f"turn {i}", "x")
            assert gk.explain("redis lock?").semantic_fallback
        assert len(hung.query_calls) == 1  # one timed-out call; the rest backed off without calling
        assert state_of(gk.embedder).blocked() and state_of(gk.embedder).delay == BACKOFF_SECONDS
        assert len(lane_threads()) <= threads + 2  # one thread per lane, however many selects
    finally:
        hung.release.set()


# -- a text the embedder refuses ----------------------------------------------------
def test_a_refused_text_is_found_and_left_lexical_while_the_rest_is_embedded(caplog) -> None:
    class Picky(HashEmbedder):
        def embed_documents(self, texts):
            self.document_calls.append(list(texts))
            if any(len(t) > 2000 for t in texts):
                raise ValueError("input too long (400)")
            return [self.vector(t) for t in texts]

    picky = Picky()
    gk = ContextGatekeeper(embedder=picky)
    for i in range(10):
        gk.add_turn(f"question {i}", f"answer {i}")
    dump = gk.add_turn("paste the log", "x " * 2000)
    for i in range(10):
        gk.add_turn(f"later question {i}", f"later answer {i}")
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        gk.embed_pending()
        calls = len(picky.document_calls)
        for q in range(5):
            assert not gk.explain(f"query {q}").semantic_fallback
        gk.embed_pending()
    assert len(gk._semantic.vectors) == len(gk) - 1 and set(gk._semantic.refused) == {dump}
    assert len(picky.document_calls) == calls  # never sent again
    assert not [r for r in caplog.records if "selecting lexically" in r.getMessage()]  # not an outage
    gk.replace_turn(dump, "paste the log", "a short summary instead")
    gk.embed_pending()
    assert len(gk._semantic.vectors) == len(gk) and not gk._semantic.refused


# -- concurrent callers ------------------------------------------------------------
def test_concurrent_callers_embed_each_turn_once_and_fallback_is_per_call() -> None:
    class Twins(HashEmbedder):
        async def aembed_query(self, text):
            if text.startswith("bad"):
                raise RuntimeError("query failed")
            await asyncio.sleep(0.05)
            return self.vector(text)

    fake = Twins()
    gk = ContextGatekeeper(embedder=fake)
    for i in range(50):
        gk.add_turn(f"q{i}", f"a{i}")
    threads = [threading.Thread(target=gk.embed_pending) for _ in range(3)]
    for t in threads:
        t.start()

    async def main():
        await asyncio.gather(gk.aembed_pending(), gk.aexplain("first"), gk.aexplain("second"))
        for i in range(3):
            gk.add_turn(f"new {i}", "x")
        return await asyncio.gather(gk.aexplain("good query"), gk.aexplain("bad query"))

    good, bad = asyncio.run(main())
    for t in threads:
        t.join(30)
    gk.embed_pending()
    texts = [t for call in fake.document_calls for t in call]
    assert len(texts) == len(set(texts)) == len(gk)  # each turn embedded once
    assert not good.semantic_fallback and bad.semantic_fallback


# -- one warning per outage, shared by every history of one embedder -----------------
TURN_TEXT = "How long should a Redis lock TTL be?\nLonger than the job."


def test_one_warning_per_outage_for_every_history_built_per_request(tmp_path, caplog) -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_gatekeeper import GatekeeperChatMessageHistory

    calls = []

    def down(texts):
        calls.append(list(texts))
        raise ConnectionError("embedding service down")

    path = tmp_path / "chats.db"
    first = GatekeeperChatMessageHistory("s", store=path, embedder=down)
    first.add_messages([HumanMessage("How long should a Redis lock TTL be?"), AIMessage("Longer than the job.")])
    first.close()
    with caplog.at_level(logging.WARNING, logger="context_gatekeeper"):
        history = GatekeeperChatMessageHistory("s", store=path, embedder=down)
        assert history.explain("redis question 0?").semantic_fallback
        history.close()
        assert wait_idle(30)
        # the first request finds the outage: its query, and maybe (the lanes race, and each
        # history queues its own pass over the turn) the turn's batch and the probe that tells a
        # bad text from a service that is down; how many of those run first is thread timing
        first_request = len(calls)
        assert first_request >= 1 and all(c in (["redis question 0?"], [TURN_TEXT], ["ok"]) for c in calls)
        for i in range(1, 5):
            history = GatekeeperChatMessageHistory("s", store=path, embedder=down)
            assert history.explain(f"redis question {i}?").semantic_fallback
            history.close()
        assert wait_idle(30)
        warned = [r for r in caplog.records if "selecting lexically" in r.getMessage()]
        assert len(warned) == 1 and len(calls) == first_request  # then backoff: no call at all
        state = state_of(as_state_key(down))
        state.retry_at = 0.0  # the backoff is over: the next request tries again, fails, waits twice as long
        history = GatekeeperChatMessageHistory("s", store=path, embedder=down)
        assert history.explain("redis again?").semantic_fallback
        history.close()
        assert state.delay == 2 * BACKOFF_SECONDS
        assert len([r for r in caplog.records if "selecting lexically" in r.getMessage()]) == 1


def as_state_key(fn):
    from context_gatekeeper import as_embedder

    return as_embedder(fn)  # the name it gets in a history: the state is the object's under that name


# -- another dimension ---------------------------------------------------------------
def test_a_new_dimension_embeds_the_dropped_turns_again() -> None:
    state = {"dim": 2}

    def emb(texts):
        return [[1.0] + [float(len(t) % 3 + 1)] * (state["dim"] - 1) for t in texts]

    gk = ContextGatekeeper(embedder=emb)
    for i in range(6):
        gk.add_turn(f"turn {i}", "x")
    gk.embed_pending()
    assert len(gk._semantic.vectors) == 6 and gk._semantic.vectors.dim == 2
    state["dim"] = 3  # the deployment behind the same name changed model
    gk.add_turn("new turn", "y")
    gk.embed_pending()
    assert len(gk._semantic.vectors) == 7 and gk._semantic.vectors.dim == 3 and not gk._semantic.pending
    assert not gk.explain("turn 2?").semantic_fallback


# -- framework base classes whose async methods only wrap the sync ones ----------------
def test_a_langchain_embeddings_without_its_own_async_methods_runs_on_the_lanes_not_asyncios_pool() -> None:
    from langchain_core.embeddings import Embeddings

    class SyncOnly(Embeddings):  # LangChain's aembed_* run these on asyncio's default thread pool
        def __init__(self) -> None:
            self.release = threading.Event()

        def embed_documents(self, texts):
            return [HashEmbedder().vector(t) for t in texts]

        def embed_query(self, text):
            self.threads.append(threading.current_thread().name)
            self.release.wait()
            return HashEmbedder().vector(text)

        threads: list[str] = []

    class Native(SyncOnly):
        async def aembed_query(self, text):
            await asyncio.sleep(0)  # truly async: it gives the event loop back
            return HashEmbedder().vector(text)

    from context_gatekeeper import as_embedder

    assert (as_embedder(SyncOnly())._aquery, as_embedder(SyncOnly())._adocuments) == (None, None)
    assert as_embedder(Native())._aquery is not None
    hung = SyncOnly()
    gk = ContextGatekeeper(embedder=hung, embed_timeout=0.05)
    gk.add_turn("redis lock ttl", "longer than the job")
    hung.threads = []
    try:
        assert asyncio.run(gk.aexplain("redis lock?")).semantic_fallback
        assert len(hung.threads) == 1 and hung.threads[0].startswith("gatekeeper-embed-query")  # a lane, not asyncio's pool
    finally:
        hung.release.set()


def _llamaindex_embeddings():
    """LlamaIndex embeddings whose async methods call the sync ones (as HuggingFaceEmbedding
    and most local models do: every subclass must define ``_aget_query_embedding``), and one
    whose async methods truly await.  The sync query waits for ``release`` (at most 10 s)."""
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class SyncInside(BaseEmbedding):
        def _get_query_embedding(self, query):
            RECORDED.append(threading.current_thread().name)
            RELEASE.wait(10)
            return [1.0, 0.0, 0.5]

        def _get_text_embedding(self, text):
            return [0.0, 1.0, 0.5]

        async def _aget_query_embedding(self, query):  # never awaits: holds the loop for the call
            return self._get_query_embedding(query)

        async def _aget_text_embedding(self, text):
            return self._get_text_embedding(text)

    class TrulyAsync(SyncInside):
        async def _aget_query_embedding(self, query):
            await asyncio.sleep(0)
            return [1.0, 0.0, 0.5]

        async def _aget_text_embeddings(self, texts):
            await asyncio.sleep(0)
            return [[0.0, 1.0, 0.5] for _ in texts]

    return SyncInside, TrulyAsync


RECORDED: list[str] = []
RELEASE = threading.Event()


def test_a_llamaindex_embedding_is_awaited_only_when_its_async_methods_truly_await() -> None:
    from llama_index.core.embeddings import MockEmbedding

    from context_gatekeeper import as_embedder

    sync_inside, truly_async = _llamaindex_embeddings()
    for model in (sync_inside(model_name="sync-inside"), MockEmbedding(embed_dim=4)):  # MockEmbedding's never await
        embedder = as_embedder(model)
        assert (embedder._adocuments, embedder._aquery) == (None, None)
    embedder = as_embedder(truly_async(model_name="truly-async"))
    assert embedder._adocuments is not None and embedder._aquery is not None


def test_a_llamaindex_query_whose_async_method_calls_the_sync_one_runs_on_the_lane_within_the_timeout() -> None:
    """aexplain runs such an embedding's sync query on the query lane: the event loop runs on
    while it hangs, and embed_timeout gives the lexical fallback instead of waiting for it."""
    sync_inside, _ = _llamaindex_embeddings()
    gk = ContextGatekeeper(embedder=sync_inside(model_name="sync-inside-hung"), embed_timeout=0.05)
    gk.add_turn("redis lock ttl", "longer than the job")
    gk.embed_pending()
    RECORDED.clear()
    RELEASE.clear()

    async def main() -> tuple[bool, int]:
        ticks = 0

        async def count() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        counter = asyncio.create_task(count())
        selection = await gk.aexplain("redis lock?")
        counter.cancel()
        return selection.semantic_fallback, ticks

    try:
        fallback, ticks = asyncio.run(main())
        assert fallback and ticks > 0  # the loop ran on while the query hung
        assert len(RECORDED) == 1 and RECORDED[0].startswith("gatekeeper-embed-query")  # the lane, not the loop
    finally:
        RELEASE.set()


# -- outages that look like something else ----------------------------------------------
def test_a_query_queued_behind_a_hung_one_counts_as_a_failure_and_the_backoff_doubles() -> None:
    hung = Hung()
    gk = ContextGatekeeper(embedder=hung, embed_timeout=0.1)
    gk.add_turn("redis lock ttl", "longer than the job")
    state = state_of(gk.embedder)
    try:
        assert gk.explain("redis lock?").semantic_fallback  # no answer in time: the backoff starts
        assert state.delay == BACKOFF_SECONDS
        state.retry_at = 0.0  # the backoff is over (no waiting); the first call still hangs on the query lane
        assert gk.explain("redis lock again?").semantic_fallback  # queued behind it: a failure too
        assert state.delay == 2 * BACKOFF_SECONDS and len(hung.query_calls) == 1
    finally:
        hung.release.set()


def test_an_embedder_that_stops_answering_while_a_batch_is_split_refuses_no_text() -> None:
    class FailsThenDown(HashEmbedder):
        def embed_documents(self, texts):
            self.document_calls.append(list(texts))
            if len(self.document_calls) == 2:  # the check after the failed batch: it still answers
                return [self.vector(t) for t in texts]
            raise RuntimeError("429 Too Many Requests")

    gk = ContextGatekeeper(embedder=FailsThenDown())
    for i in range(6):
        gk.add_turn(f"question {i} about redis locks", f"answer {i}")
    from context_gatekeeper import GatekeeperError

    with pytest.raises(GatekeeperError, match="429"):
        gk.embed_pending()
    assert not gk._semantic.refused and len(gk._semantic.pending) == 6  # all still to embed, none given up


def test_an_embedder_whose_dimension_keeps_changing_stops_the_pass_instead_of_embedding_forever() -> None:
    class TwoModels(HashEmbedder):
        def embed_documents(self, texts):
            self.document_calls.append(list(texts))
            size = 8 if len(self.document_calls) % 2 else 4
            return [[1.0, *self.vector(t)[: size - 1]] for t in texts]  # never all zero (refused)

    from context_gatekeeper import GatekeeperError

    flipping = TwoModels(name="two-models")
    gk = ContextGatekeeper(embedder=flipping)
    raised = None
    for i in range(6):  # the second turn's vectors change the dimension, and the pass that re-embeds changes it back
        gk.add_turn(f"question {i}", f"answer {i}")
        try:
            gk.embed_pending()  # (a background pass may meet it first: then the explicit one does again)
        except GatekeeperError as error:
            raised = error
            break
    assert raised is not None and "changing dimensions" in str(raised)
    calls = len(flipping.document_calls)
    assert calls < 20 and state_of(gk.embedder).blocked()
    wait_idle(5)
    assert len(flipping.document_calls) == calls  # no pass keeps going in the background


def test_a_dropped_gatekeeper_with_an_embedder_is_freed_at_once_with_its_channel() -> None:
    # no reference cycle between the history and its channel, nor inside a batch's failure handling
    import gc
    import weakref

    class RefusesLongTexts(HashEmbedder):
        def embed_documents(self, texts):
            if any(len(t) > 40 for t in texts):
                raise ValueError("input too long")
            return super().embed_documents(texts)

    gk = ContextGatekeeper(embedder=RefusesLongTexts())
    gk.add_turn("redis lock ttl", "longer than the job")
    gk.add_turn("paste the log", "x " * 40)  # split out of its batch and refused alone
    gk.embed_pending()
    assert gk._semantic.refused
    gk.embed_pending()  # again: the passes queued meanwhile have run (a queued pass holds its channel)
    refs = [weakref.ref(gk), weakref.ref(gk._history), weakref.ref(gk._semantic)]
    enabled = gc.isenabled()
    gc.disable()
    try:
        del gk
        assert [ref() for ref in refs] == [None, None, None]
    finally:
        if enabled:
            gc.enable()


def test_the_lanes_of_an_embedder_that_is_gone_end_without_waiting_out_the_idle_time() -> None:
    import gc

    from context_gatekeeper.selection.semantic import runner

    gk = ContextGatekeeper(embedder=lambda texts: [[1.0, float(len(t))] for t in texts])
    gk.add_turn("redis lock ttl", "longer than the job")
    gk.embed_pending()
    gk.explain("redis lock?")
    name = gk.embedder.name
    lanes = [t for t in threading.enumerate() if name in t.name]
    assert lanes
    gk.embed_pending()  # nothing queued behind: the lanes are idle
    del gk
    gc.collect()
    runner._all_states()  # what the next embedder's state_of does: the dead states are purged
    for thread in lanes:
        thread.join(5)  # well under the 30 s a lane waits for work
    assert not [t for t in lanes if t.is_alive()]


# -- many callers on one lane: waiting one's turn is no outage ---------------------------
class Gated(HashEmbedder):
    """Query calls for a text :meth:`hold` names wait until the test releases them."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}

    def hold(self, text: str) -> threading.Event:
        self.held[text], self.entered[text] = threading.Event(), threading.Event()
        return self.held[text]

    def embed_query(self, text):
        if text in self.held:
            self.entered[text].set()
            self.held[text].wait(30)
        return super().embed_query(text)


def until(condition, limit: float = 30.0) -> bool:
    """Poll ``condition`` until it holds (``False`` after ``limit`` seconds)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.005)
    return True


def pause_until(moment: float) -> None:
    """Let the clock reach ``moment`` (``time.monotonic``): timeouts are wall-clock by nature."""
    threading.Event().wait(max(0.0, moment - time.monotonic()))


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_query_that_waited_its_turn_then_ran_in_time_is_answered_not_an_outage(how: str) -> None:
    """Many chats share one sync-only embedder: a query queued behind another chat's call
    starts late, yet runs well within embed_timeout; it is answered, and no outage starts."""
    timeout = 2.0  # wall-clock by nature: the margins (half of it) outlast a loaded machine's stalls
    fake = Gated()
    release = fake.hold("late query")
    gk = gatekeeper(fake, embed_timeout=timeout)
    state = state_of(gk.embedder)
    ahead = threading.Event()
    state.queries.submit(ahead.wait, 30)  # another chat's query call, running
    result = {}

    def select() -> None:
        result["selection"] = gk.explain("late query") if how == "sync" else asyncio.run(gk.aexplain("late query"))

    worker = threading.Thread(target=select)
    worker.start()
    try:
        assert until(lambda: state.queries.queued == 1)  # it waits its turn
        queued = time.monotonic()
        pause_until(queued + timeout / 2)
        ahead.set()  # the call ahead ends in time: this query starts half its timeout late
        assert fake.entered["late query"].wait(30)
        pause_until(queued + timeout + 0.05)  # a timeout counted from the queueing has run out
        release.set()  # ... but the call has run about half its timeout: in time
        worker.join(30)
    finally:
        ahead.set()
        release.set()
        worker.join(30)
    assert not result["selection"].semantic_fallback and not state.failing


def test_two_models_behind_one_object_have_their_own_outage_state() -> None:
    def embed(texts, model):
        if model == "retired":
            raise RuntimeError("404 model not found")
        return [[1.0, float(len(t))] for t in texts]

    class Service:  # one client object, one method per model
        def retired(self, texts):
            return embed(texts, "retired")

        def current(self, texts):
            return embed(texts, "current")

    service = Service()
    pairs = [(functools.partial(embed, model="retired"), functools.partial(embed, model="current")),
             (service.retired, service.current)]
    for down, up in pairs:
        retired, current = gatekeeper(down, embed=False), gatekeeper(up)
        assert retired.explain("hiking?").semantic_fallback and state_of(retired.embedder).blocked()
        assert not state_of(current.embedder).blocked()  # one model's outage says nothing of the other
        assert not current.explain("hiking?").semantic_fallback
        forget_outages()


@pytest.mark.parametrize("how", ["sync", "async"])
def test_embed_pending_after_a_bulk_load_waits_while_batches_keep_landing(how: str) -> None:
    """Each batch takes three times the query timeout (healthy: a batch is many texts);
    however many batches there are, embed_pending waits for them all, and no outage starts."""

    class Batches(HashEmbedder):
        def embed_documents(self, texts):
            threading.Event().wait(0.06)
            return super().embed_documents(texts)

    gk = ContextGatekeeper(embedder=Batches(), embed_timeout=0.02)
    gk._semantic.batch_size = 32
    for i in range(480):
        gk.add_turn(f"question {i} about topic {i % 50}", f"answer {i}")
    gk.embed_pending() if how == "sync" else asyncio.run(gk.aembed_pending())
    assert len(gk._semantic.vectors) == 480 and not gk._semantic.state.failing


@pytest.mark.parametrize("how", ["sync", "async"])
def test_embed_pending_that_sees_no_answer_gives_up_without_starting_an_outage(how: str) -> None:
    """Only a query decides that the embedder is down: a caller's wait for the turns that
    runs out says nothing of it (the pass goes on, the query lane answers)."""
    from context_gatekeeper import GatekeeperError

    class StuckDocuments(Hung):
        def embed_query(self, text):
            return self.vector(text)

    stuck = StuckDocuments()
    gk = ContextGatekeeper(embedder=stuck, embed_timeout=0.01)
    gk._semantic.batch_size = 1
    gk.add_turn("redis lock ttl", "longer than the job")
    try:
        with pytest.raises(GatekeeperError, match="answered no call"):
            gk.embed_pending() if how == "sync" else asyncio.run(gk.aembed_pending())
        assert not gk._semantic.state.blocked()
        # the query lane answers at once; a bound far above that keeps a loaded machine from
        # reading a slow answer as none (0.01 s was what made the pass give up, above)
        gk._semantic.timeout = 30.0
        assert not gk.explain("redis lock?").semantic_fallback
    finally:
        stuck.release.set()
    gk.embed_pending()
    assert len(gk._semantic.vectors) == 1


def test_a_text_that_failed_once_by_chance_is_tried_again_not_refused() -> None:
    """A 503 that meets a text alone once does not make it a text the embedder refuses."""

    class FailsOnce(HashEmbedder):
        def embed_documents(self, texts):
            self.document_calls.append(list(texts))
            if len(self.document_calls) == 1:
                raise ConnectionError("503 Service Unavailable")
            return [self.vector(t) for t in texts]

    flaky = FailsOnce()
    gk = ContextGatekeeper(embedder=flaky)
    gk.add_turn("redis lock ttl", "longer than the job")
    gk.embed_pending()
    assert not gk._semantic.refused and len(gk._semantic.vectors) == 1


def test_a_call_queued_behind_a_long_pass_is_timed_by_the_passs_current_call(monkeypatch) -> None:
    """A background pass makes many healthy calls in one lane job: a query queued behind it
    and dropped is NotStarted (no outage) unless the pass's *current* call has run past the
    timeout (a hung embedder): the lane times each call a job says it starts."""
    from types import SimpleNamespace

    from context_gatekeeper.selection.semantic import runner
    from context_gatekeeper.selection.semantic.embedding import EmbeddingError

    clock = [0.0]
    monkeypatch.setattr(runner, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    lane = runner.Lane("test-lane")
    started, next_call, second_started, finish = (threading.Event() for _ in range(4))

    def long_pass() -> None:
        started.set()
        next_call.wait(5)
        lane.call_started()  # the pass's next batch
        second_started.set()
        finish.wait(5)

    job = lane.submit(long_pass)
    try:
        assert started.wait(5)
        clock[0] = 10.0  # the first call has run 10 s: hung
        with pytest.raises(EmbeddingError, match="has run 10.0 s"):
            runner._time_left(lane, lane.submit(lambda: None), timeout=5.0)
        next_call.set()
        assert second_started.wait(5)
        clock[0] = 12.0  # the pass has run 12 s, its current call 2 s: healthy
        with pytest.raises(runner.NotStarted):
            runner._time_left(lane, lane.submit(lambda: None), timeout=5.0)
    finally:
        next_call.set()
        finish.set()
        job.result(5)
        thread = lane._thread
        lane.close()  # no call can come: its thread ends now, not after the idle wait
        if thread is not None:
            thread.join(5)
