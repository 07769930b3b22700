"""gate_messages and agate_messages: topic gating of plain message lists, shaped like
trim_messages: their options (keywords or one GateOptions), the views they keep across
calls (keyed by the options' values, the caller's own embedder object), and concurrent
async calls over one shared index, which never mix conversations, deadlock a sync call
meanwhile, or break on a cancelled waiter.

The embedder is the deterministic hashing fake, with async twins that yield to the event
loop (no sleeps, no timing)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from context_gatekeeper import BudgetError, GateOptions, InvalidInputError, InvalidTypeError, SelectionParams
from context_gatekeeper.selection.semantic.runner import wait_idle
from langchain_gatekeeper import agate_messages, gate_messages
from langchain_gatekeeper.trim import approximate_tokens
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


# -- concurrent async gating over a shared index -------------------------------------------
def test_concurrent_agate_messages_over_different_lists_never_mix() -> None:
    emb = YieldingEmbedder()
    options = {"token_budget": 4000, "embedder": emb}
    alone = {id(x): texts(asyncio.run(agate_messages(x, **options))) for x in (A, B)}
    assert alone[id(A)] != alone[id(B)] and len(alone[id(A)]) == len(A)
    results = asyncio.run(gather(*(agate_messages(x, **options) for x in (A, B, A, B))))
    assert [texts(r) for r in results] == [alone[id(x)] for x in (A, B, A, B)]


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


# -- views kept across calls ---------------------------------------------------------------
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
    mine = mine.with_(kind_weights={**mine.kind_weights, "word": 0.5})  # other values: another view, its own vectors
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




# -- options: keywords or one GateOptions ---------------------------------------------------
def test_gate_messages_takes_one_gate_options_or_its_keywords() -> None:
    messages = [*A[:-1], *B[:-1], HumanMessage("redis setup?")]
    options = GateOptions(token_budget=60, token_counter=approximate_tokens, message_overhead=0)
    by_record = gate_messages(messages, options=options)
    by_keywords = gate_messages(messages, token_budget=60, token_counter="approximate", message_overhead=0)
    assert texts(by_record) == texts(by_keywords) and len(by_record) < len(messages)
    assert texts(gate_messages(options=options).invoke(messages)) == texts(by_record)  # the Runnable form
    assert texts(asyncio.run(agate_messages(messages, options=options))) == texts(by_record)
    with pytest.raises(InvalidTypeError, match="not both"):
        gate_messages(messages, options=options, token_budget=100)
    with pytest.raises(InvalidTypeError, match="not both"):
        gate_messages(options=options, top_m=3)


def test_gate_messages_budget_follows_the_one_rule() -> None:
    messages = [*A[:-1], HumanMessage("redis setup?")]
    for bad in (-1, 1.5, True):
        with pytest.raises(BudgetError, match="int >= 0"):
            gate_messages(messages, token_budget=bad)
        with pytest.raises(BudgetError, match="int >= 0"):
            gate_messages(token_budget=bad)  # checked when the Runnable is built
    # 0, as trim_messages(max_tokens=0): nothing but the current turn
    assert texts(gate_messages(messages, max_tokens=0)) == ["redis setup?"]


@pytest.mark.parametrize("bad", ["hello", b"hi", 5, HumanMessage("alone"), {"role": "user", "content": "x"}, [None], [object()]])
def test_gate_messages_and_its_async_twin_refuse_what_is_not_a_list_of_messages_alike(bad) -> None:
    from context_gatekeeper import GatekeeperError

    with pytest.raises(GatekeeperError) as sync_error:
        gate_messages(bad, token_budget=100)
    with pytest.raises(GatekeeperError) as async_error:
        asyncio.run(agate_messages(bad, token_budget=100))
    assert (type(sync_error.value), str(sync_error.value)) == (type(async_error.value), str(async_error.value))
    assert "list of messages" in str(sync_error.value) or "each item must be" in str(sync_error.value)


def test_gate_messages_reads_a_generator_and_the_forms_convert_to_messages_takes() -> None:
    forms = [("human", "How long should a Redis lock TTL be?"), {"role": "assistant", "content": "Above the job."},
             "And the Redis lock watchdog?"]
    assert [m.text for m in gate_messages(iter(forms), token_budget=100)] == [
        "How long should a Redis lock TTL be?", "Above the job.", "And the Redis lock watchdog?"]
    assert [m.text for m in asyncio.run(agate_messages(iter(forms), token_budget=100))] == [
        "How long should a Redis lock TTL be?", "Above the job.", "And the Redis lock watchdog?"]


def test_count_tokens_approximately_counts_as_the_approximate_counter() -> None:
    """trim_messages's counter takes a list of messages: given one text it would count each
    character as a message.  gate_messages reads it as "approximate", by keyword or in options."""
    messages = [*A[:-1], *B[:-1], HumanMessage("redis setup?")]
    approximate = texts(gate_messages(messages, max_tokens=60, token_counter="approximate"))
    assert 2 < len(approximate) < len(messages)
    assert texts(gate_messages(messages, max_tokens=60, token_counter=count_tokens_approximately)) == approximate
    options = GateOptions(token_budget=60, token_counter=count_tokens_approximately)
    assert texts(gate_messages(messages, options=options)) == approximate
    assert texts(asyncio.run(agate_messages(messages, options=options))) == approximate


def test_a_trim_messages_counter_is_refused_before_the_list_is_read() -> None:
    """A counter written for trim_messages (a list of messages in) cannot count one text: every
    entry point refuses it with the library's error naming the forms to pass, before the list
    is read (a list it cannot read is not the error reported); nothing is kept, so the same
    call with a counter of one text then works."""

    def trim_style(messages: list[BaseMessage]) -> int:
        return sum(len(m.content) // 4 + 3 for m in messages)  # type: ignore[attr-defined]

    messages = [*A[:-1], HumanMessage("redis setup?")]
    refused = r"'trim_style' failed on a sample text \(AttributeError.*ONE text.*count_tokens_approximately.*'approximate'"
    for call in (lambda: gate_messages(messages, token_counter=trim_style),
                 lambda: gate_messages(object(), token_counter=trim_style),  # type: ignore[arg-type]
                 lambda: gate_messages(token_counter=trim_style),
                 lambda: gate_messages(messages, options=GateOptions(token_counter=trim_style)),
                 lambda: asyncio.run(agate_messages(messages, token_counter=trim_style))):
        with pytest.raises(InvalidInputError, match=refused):
            call()
    assert gate_messages(messages, token_counter=approximate_tokens)[-1] is messages[-1]


class _NoTokenizerModel(GenericFakeChatModel):
    """A chat model whose own counter needs a package that is not installed (many fall back to
    the GPT-2 tokenizer, which needs ``transformers``)."""

    def get_num_tokens(self, text: str) -> int:
        raise ImportError("Could not import transformers python package.")


def test_a_models_own_counter_that_fails_later_fails_with_the_librarys_error() -> None:
    """A model's own counter is not tried on a sample (it could load a tokenizer or call the
    provider), so one that cannot count fails at its first count: with the library's error
    naming the counter and what to pass instead, not the tokenizer's ImportError."""
    model = _NoTokenizerModel(messages=iter([]))
    messages = [*A[:-1], HumanMessage("redis setup?")]
    for counter in (model, model.get_num_tokens):
        with pytest.raises(InvalidInputError, match=r"get_num_tokens.*ImportError.*transformers.*'cl100k_base'") as raised:
            gate_messages(messages, token_counter=counter)
        assert isinstance(raised.value.__cause__, ImportError)
    assert gate_messages(messages, token_counter="cl100k_base")[-1] is messages[-1]


def test_a_last_human_message_with_no_text_is_gated_within_the_budget() -> None:
    """An image alone (or whitespace) as the query: the active topic within the budget, as for
    "ok?", by gate_messages, agate_messages and the Runnable alike, never the whole list."""
    messages = [*B[:-1], *A[:-1]]
    image = HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}])
    options = {"token_budget": 40, "token_counter": lambda t: len(t.split()), "message_overhead": 0}
    wanted = gate_messages([*messages, HumanMessage("ok?")], **options)[:-1]
    assert 0 < len(wanted) < len(messages) and sum(len(m.text.split()) for m in wanted) <= 40
    for query in (image, HumanMessage(" \n")):
        assert gate_messages([*messages, query], **options) == [*wanted, query]
        assert asyncio.run(agate_messages([*messages, query], **options)) == [*wanted, query]
        assert gate_messages(**options).invoke([*messages, query]) == [*wanted, query]


def test_an_unhashable_thread_is_refused_with_the_librarys_error() -> None:
    """Sync, async and the Runnable (its thread=, or its config's thread_id) alike."""
    with pytest.raises(InvalidTypeError, match="string id"):
        gate_messages(A, thread=["a"])
    with pytest.raises(InvalidTypeError, match="string id"):
        asyncio.run(agate_messages(A, thread=["a"]))
    with pytest.raises(InvalidTypeError, match="string id"):
        gate_messages(thread={"a": 1})
    runnable = gate_messages(token_budget=100)
    for call in (lambda: runnable.invoke(A, {"configurable": {"thread_id": ["a"]}}),
                 lambda: asyncio.run(runnable.ainvoke(A, {"configurable": {"thread_id": ["a"]}}))):
        with pytest.raises(InvalidTypeError, match="string id"):
            call()


def test_gate_messages_keeps_a_tool_step_whole_when_a_tool_delivered_a_message_between_its_results() -> None:
    """An earlier turn of parallel tool calls whose results an image a tool delivered stands
    between: kept or dropped whole at every budget (the image started a turn: the second result
    was sent without its call), and what is sent before the question stays within the budget,
    each message its tokens and its message_overhead (the image was priced joined with the
    question: one overhead short)."""
    from langchain_core.messages import ToolMessage

    from langchain_gatekeeper.agent_view import _indexed_text

    step = [
        HumanMessage("Show me the photo of the Redis cluster dashboard and the lock TTL config", id="u1"),
        AIMessage("", id="a1", tool_calls=[{"name": "get_photo", "args": {"q": "dashboard"}, "id": "c1"},
                                          {"name": "get_config", "args": {"q": "redis lock ttl"}, "id": "c2"}]),
        ToolMessage("photo attached", tool_call_id="c1", id="t1"),
        HumanMessage([{"type": "image", "url": "https://x.test/dash.png"}], id="img1"),
        ToolMessage("redis lock ttl = 30s", tool_call_id="c2", id="t2"),
        AIMessage("The dashboard shows the Redis lock TTL is 30s.", id="a2"),
    ]
    chat = [*step, HumanMessage("Best espresso grind for a moka pot?", id="u2"), AIMessage("Medium-fine.", id="a3")]
    overhead = 20  # the default is 3: large enough here that one overhead short shows at some budget
    kept_step = False
    for query in ("ok?", "What was the redis lock ttl config value?"):
        for budget in range(0, 240, 2):
            out = gate_messages([*chat, HumanMessage(query, id="u3")], token_budget=budget, token_counter="approximate",
                                message_overhead=overhead)
            ids = [m.id for m in out]
            assert ids[:6] == [m.id for m in step] or not set(ids) & {m.id for m in step}, (query, budget, ids)
            assert ids[-1] == "u3"
            spent = sum(approximate_tokens(_indexed_text(m)) + overhead for m in out[:-1])
            assert spent <= budget, (query, budget, ids, spent)
            kept_step |= "img1" in ids
    assert kept_step
