"""GatekeeperMemory: the BaseMemory contract, conversion, selection, versions, serialisation.

Real LlamaIndex message and block classes; a core ScriptedModel edits; no network.
"""

from __future__ import annotations

import asyncio
import copy
import doctest
import importlib
import json
import pickle
import tempfile
import threading
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.llms import MockLLM
from llama_index.core.memory.types import BaseMemory

from context_gatekeeper import BudgetError, HistoryError, InMemoryStore, Proposal, SQLiteStore
from context_gatekeeper.testing import ScriptedModel
from li_support import ESPRESSO, REDIS_1, REDIS_2, REDIS_QUERY, patch
from llamaindex_gatekeeper import GatekeeperMemory, StoreDetachedWarning, from_core, to_core
from llamaindex_gatekeeper.convert import from_core_messages, match_ids



def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def turns(memory: GatekeeperMemory, *pairs: tuple[str, str]) -> None:
    for question, answer in pairs:
        memory.put(user(question))
        memory.put(assistant(answer))


def contents(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def words(text: str) -> int:
    """A transparent token counter for budget tests."""
    return len(text.split())


def rich_conversation() -> list[ChatMessage]:
    """Every kind of block, role and field the memory must keep."""
    return [
        ChatMessage(role="system", content="You are a travel assistant."),
        ChatMessage(
            role="user",
            blocks=[TextBlock(text="Plan a trip to Ireland."), ImageBlock(url="https://example.com/map.png")],
            additional_kwargs={"name": "ana"},
        ),
        ChatMessage(
            role="assistant",
            blocks=[
                ThinkingBlock(content="Check the weather first."),
                ToolCallBlock(tool_call_id="call-1", tool_name="weather", tool_kwargs={"city": "Dublin"}),
            ],
            additional_kwargs={"thought_signature": "sig", "custom": {"k": [1, 2]}},
        ),
        ChatMessage(role="tool", content="12 C, rain", additional_kwargs={"tool_call_id": "call-1", "name": "weather"}),
        ChatMessage(role="assistant", content="Dublin is rainy: pack a coat."),
        ChatMessage(role="developer", content="Answer briefly."),
        ChatMessage(role="chatbot", content="Noted."),
        ChatMessage(role="user", blocks=[]),
    ]


# -- conversion ------------------------------------------------------------------------------
def test_messages_round_trip_with_blocks_roles_and_additional_kwargs():
    original = rich_conversation()
    assert [from_core(to_core(m)) for m in original] == original
    memory = GatekeeperMemory.from_defaults()
    memory.put_messages(original)
    assert memory.get_all() == original
    assert memory.record() == original


def test_blocks_round_trip_through_sqlite_and_serialisation(tmp_path: Path):
    path = tmp_path / "chat.db"
    GatekeeperMemory.from_defaults(store=str(path), session_id="s").put_messages(rich_conversation())
    reopened = GatekeeperMemory.from_defaults(store=SQLiteStore(path), session_id="s")
    assert reopened.get_all() == rich_conversation()
    data = {k: v for k, v in json.loads(json.dumps(reopened.to_dict())).items() if k != "live_token"}
    with pytest.warns(StoreDetachedWarning):  # data from elsewhere, no store= passed: restored in memory
        restored = GatekeeperMemory.from_dict(data)
    assert restored.get_all() == rich_conversation()
    reopened.close()


def test_core_messages_hold_text_and_tool_pairing_fields():
    core = [to_core(m) for m in rich_conversation()]
    assert [m.role for m in core] == ["system", "user", "assistant", "tool", "assistant", "system", "assistant", "user"]
    assert core[1].content == "Plan a trip to Ireland." and core[1].parts is not None
    assert core[2].metadata["tool_calls"] == [{"id": "call-1", "name": "weather", "args": {"city": "Dublin"}}]
    assert core[3].metadata["tool_call_id"] == "call-1"
    assert core[4].parts is None  # one text block is stored as plain content
    assert core[5].metadata["role"] == "developer"
    assert len({m.id for m in core}) == len(core)


def test_an_edit_rewrites_text_and_keeps_other_blocks():
    memory = GatekeeperMemory.from_defaults()
    memory.put_messages(
        [
            ChatMessage(role="user", blocks=[TextBlock(text="Trip to Ireland?"), ImageBlock(url="https://example.com/a.png")]),
            ChatMessage(
                role="assistant",
                blocks=[ThinkingBlock(content="Ireland..."), TextBlock(text="Ireland is green.")],
                additional_kwargs={"thought_signature": "sig", "keep": 1},
            ),
        ]
    )
    memory.edit(
        "Iceland, not Ireland",
        model=patch(
            {"op": "replace", "id": "1", "content": "Trip to Iceland?"},
            {"op": "replace", "id": "2", "content": "Iceland is volcanic."},
        ),
    )
    question, answer = memory.get_all()
    assert question.content == "Trip to Iceland?"
    assert isinstance(question.blocks[1], ImageBlock)
    assert [type(b) for b in answer.blocks] == [TextBlock]  # the stale reasoning is dropped
    assert answer.additional_kwargs == {"keep": 1}
    memory.undo()
    assert memory.get_all()[1].blocks[0] == ThinkingBlock(content="Ireland...")


def test_an_edit_writes_each_text_block_back_in_its_place_between_images():
    before, after = ImageBlock(url="https://example.com/before.png"), ImageBlock(url="https://example.com/after.png")
    blocks = [TextBlock(text="Before the repair:"), before, TextBlock(text="After the repair:\nsee the corner"), after,
              TextBlock(text="Is the crack in the left wall fixed?")]
    memory = GatekeeperMemory.from_defaults()
    memory.put_messages([ChatMessage(role="user", blocks=blocks), assistant("Yes, the left wall looks fixed.")])
    text = memory.get_all()[0].content
    memory.edit("the right wall", model=patch({"op": "replace", "id": "1", "content": text.replace("left", "right")}))
    edited = memory.get_all()[0]
    assert [getattr(b, "text", getattr(b, "url", None)) for b in edited.blocks] == [
        "Before the repair:", before.url, "After the repair:\nsee the corner", after.url,
        "Is the crack in the right wall fixed?",
    ]
    # a line dropped before the first image and one added after the second paragraph: each stays on its side
    memory.edit("no intro, one more line", model=patch({"op": "replace", "id": "1", "content": (
        "After the repair:\nsee the corner\nand the ceiling\nIs the crack in the right wall fixed?")}),
        allow_large_deletion=True)
    assert [getattr(b, "text", getattr(b, "url", None)) for b in memory.get_all()[0].blocks] == [
        before.url, "After the repair:\nsee the corner\nand the ceiling", after.url,
        "Is the crack in the right wall fixed?",
    ]
    # shortened to the question alone: it stays where the question was, after both images
    memory.edit("shorten", model=patch({"op": "replace", "id": "1", "content": "Is the right wall fixed?"}),
                allow_large_deletion=True)
    assert [getattr(b, "text", getattr(b, "url", None)) for b in memory.get_all()[0].blocks] == [
        before.url, after.url, "Is the right wall fixed?",
    ]
    # rewritten beyond recognition: the lines are spread over the old ones in order, the images keep theirs
    memory.edit("rewrite", model=patch({"op": "replace", "id": "1", "content": "Totally new.\nNothing alike."}),
                allow_large_deletion=True)
    assert [getattr(b, "text", getattr(b, "url", None)) for b in memory.get_all()[0].blocks] == [
        "Totally new.", before.url, "Nothing alike.", after.url,
    ]


def test_match_ids_keeps_ids_of_unchanged_and_changed_in_place_messages():
    current = [to_core(user("a")), to_core(assistant("b")), to_core(user("c"))]
    matched = match_ids(current, [user("a"), assistant("B!"), user("c"), user("new")])
    assert matched[0] is current[0]
    assert matched[1].id == current[1].id and matched[1].content == "B!"
    assert matched[2] is current[2]
    assert matched[3].id not in {m.id for m in current}
    replaced = match_ids(current, [user("x")])  # not one for one: all new
    assert replaced[0].id not in {m.id for m in current}


# -- get ---------------------------------------------------------------------------------
def test_get_gates_on_the_open_user_message_and_always_returns_it():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, REDIS_1, ESPRESSO, REDIS_2)
    memory.put(user(REDIS_QUERY))
    got = contents(memory.get())
    assert got == [*REDIS_1, *REDIS_2, REDIS_QUERY]
    assert contents(memory.get(input="Which espresso grind for a moka pot?")) == [*ESPRESSO, REDIS_QUERY]
    assert len(memory.get_all()) == 7


def test_get_with_input_and_no_open_turn_gates_every_earlier_turn():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, REDIS_1, ESPRESSO, REDIS_2)
    assert contents(memory.get(input=REDIS_QUERY)) == [*REDIS_1, *REDIS_2]
    assert contents(memory.get(input=user("Which espresso grind for a moka pot?"))) == list(ESPRESSO)
    assert contents(memory.get(REDIS_QUERY, some_engine_kwarg=True)) == [*REDIS_1, *REDIS_2]


def test_get_without_input_or_open_turn_treats_the_last_turn_as_current():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, REDIS_1, ESPRESSO, REDIS_2)
    assert contents(memory.get()) == [*REDIS_1, *REDIS_2]


def test_tool_call_pairs_stay_whole():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, ESPRESSO)
    memory.put(user("How should the Redis lock watchdog renew the TTL?"))
    memory.put_messages(
        [
            ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_call_id="c1", tool_name="notes", tool_kwargs={})]),
            ChatMessage(role="tool", content="Renew every TTL/3.", additional_kwargs={"tool_call_id": "c1"}),
            assistant("Renew from a watchdog every third of the TTL."),
        ]
    )
    memory.put(user(REDIS_QUERY))
    roles = [m.role.value for m in memory.get()]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


def test_initial_token_count_is_taken_off_the_budget():
    memory = GatekeeperMemory.from_defaults(token_limit=60, token_counter=words, message_overhead=0)
    turns(memory, REDIS_1, REDIS_2)
    memory.put(user(REDIS_QUERY))
    assert len(memory.get()) == 5
    shrunk = memory.get(initial_token_count=35)
    assert 1 < len(shrunk) < 5 and shrunk[-1].content == REDIS_QUERY
    assert contents(memory.get(initial_token_count=59)) == [REDIS_QUERY]  # the open turn is never dropped
    with pytest.raises(ValueError):
        memory.get(initial_token_count=-1)


def test_tokenizer_fn_and_token_counter_count_alike():
    memory = GatekeeperMemory.from_defaults(token_counter=words)
    assert len(memory.tokenizer_fn("three little words")) == 3  # engines count prefixes with it
    custom = GatekeeperMemory.from_defaults(tokenizer_fn=list, message_overhead=0)
    by_length = GatekeeperMemory.from_defaults(token_counter=len, message_overhead=0)  # a character a token
    for made in (custom, by_length):
        turns(made, ("ab", "cd"))
        made.get(input="ab?")
    assert custom.gate.gatekeeper.turn_cost(1) == by_length.gate.gatekeeper.turn_cost(1) >= 4  # the budget too


def test_tokenizer_fn_and_token_counter_together_are_refused_before_the_store_is_opened(tmp_path: Path) -> None:
    # accepted, they counted apart: the budget by token_counter (characters here), while
    # SimpleChatEngine counted its system prompt with memory.tokenizer_fn (words): 11 for 73
    from context_gatekeeper import InvalidTypeError

    path = tmp_path / "chats.db"
    with pytest.raises(InvalidTypeError, match="tokenizer_fn= or token_counter=, not both"):
        GatekeeperMemory.from_defaults(store=str(path), token_limit=100, tokenizer_fn=str.split, token_counter=len)
    with pytest.raises(InvalidTypeError, match="not both"):
        GatekeeperMemory(tokenizer_fn=str.split, token_counter="cl100k_base")
    first = GatekeeperMemory.from_defaults(token_counter=len)  # another memory's pair is no way round it
    with pytest.raises(InvalidTypeError, match="not both"):
        GatekeeperMemory.from_defaults(tokenizer_fn=first.tokenizer_fn, token_counter=words)
    assert not path.exists()


PROMPT = "You are a terse assistant that answers questions about distributed locks."


@pytest.mark.parametrize("built", ["tokenizer_fn", "token_counter", "another memory's tokenizer_fn"])
@pytest.mark.parametrize("copied", ["none", "copy.deepcopy", "model_copy(deep=True)", "copy of a copy"])
def test_a_chat_engine_counts_its_system_prompt_as_the_budget_does(built: str, copied: str) -> None:
    """SimpleChatEngine counts its prefix with ``memory.tokenizer_fn`` and passes it as
    ``initial_token_count``: a memory (and each copy of it, which passes its own pair back to the
    constructor) refuses a prompt exactly when the budget's counter says it does not fit."""
    from llama_index.core.chat_engine import SimpleChatEngine

    def make(limit: int) -> GatekeeperMemory:
        keywords: dict[str, object] = {
            "tokenizer_fn": {"tokenizer_fn": str.split},
            "token_counter": {"token_counter": words},
            "another memory's tokenizer_fn": {"tokenizer_fn": GatekeeperMemory.from_defaults(
                tokenizer_fn=str.split).tokenizer_fn},
        }[built]
        memory = GatekeeperMemory.from_defaults(token_limit=limit, message_overhead=0, **keywords)
        if copied == "copy.deepcopy":
            return copy.deepcopy(memory)
        if copied == "model_copy(deep=True)":
            return memory.model_copy(deep=True)
        if copied == "copy of a copy":
            return copy.deepcopy(copy.deepcopy(memory))
        return memory

    size = len(PROMPT.split())
    fits = make(size + len("Redis lock TTL?".split()))
    assert len(fits.tokenizer_fn(PROMPT)) == fits._count(PROMPT) == size
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=fits, system_prompt=PROMPT)
    engine.chat("Redis lock TTL?")
    assert contents(fits.get_all())[0] == "Redis lock TTL?"
    short = make(size - 1)
    with pytest.raises(BudgetError, match="Initial token count exceeds token limit"):
        SimpleChatEngine.from_defaults(llm=MockLLM(), memory=short, system_prompt=PROMPT).chat("Redis lock TTL?")


def test_a_keyword_of_another_llamaindex_memory_is_named_for_what_it_is_here(tmp_path: Path) -> None:
    # ChatMemoryBuffer's chat_store_key= got GateOptions' list of fields, recommending
    # token_budget (which the memory then refused) and never naming session_id= or store=
    from llama_index.core.storage.chat_store import SimpleChatStore

    from context_gatekeeper import InvalidTypeError

    path = tmp_path / "chats.db"
    cases = {"chat_store_key": ("user-1", "session_id="), "chat_store": (SimpleChatStore(), "store="),
             "token_flush_size": (100, "no memory blocks"), "async_database_uri": ("sqlite+aiosqlite://", "store=")}
    for name, (value, advice) in cases.items():
        for build in (GatekeeperMemory.from_defaults, GatekeeperMemory):
            with pytest.raises(InvalidTypeError) as refused:
                build(store=str(path), **{name: value})
            message = str(refused.value)
            assert f"['{name}']" in message and f"{name}= is " in message and advice in message, message
            listed = message.split("takes ", 1)[1]
            assert "session_id" in listed and "store" in listed and "token_limit" in listed
            assert "token_budget" not in listed  # a name the memory refuses is never offered
    with pytest.raises(InvalidTypeError, match="token_limt= may be token_limit= misspelt"):
        GatekeeperMemory.from_defaults(token_limt=100)
    with pytest.raises(InvalidTypeError, match="chat_history"):
        GatekeeperMemory(chat_history=[user("hi")])  # from_defaults' own
    with pytest.raises(InvalidTypeError, match="token_limit"):  # token_budget keeps its own error
        GatekeeperMemory.from_defaults(token_budget=500)
    assert not path.exists()
    tuned = GatekeeperMemory.from_defaults(top_m=5, preset="recall", message_overhead=0, strategy="rewrite")
    assert tuned.gate.gatekeeper.options.params.top_m == 5  # every keyword it lists is taken


def test_direct_construction_works_like_from_defaults():
    memory = GatekeeperMemory(token_limit=100, session_id="direct")
    turns(memory, REDIS_1)
    assert contents(memory.get(input=REDIS_QUERY)) == list(REDIS_1)
    for bad in (-1, True, 1.5, "100"):  # the library's one budget rule: an int >= 0, and its own error
        with pytest.raises(BudgetError, match="token_limit"):
            GatekeeperMemory(token_limit=bad)
    assert GatekeeperMemory(token_limit=0).token_limit == 0


def test_the_gate_settings_can_come_as_one_options_record():
    from context_gatekeeper import GateOptions, InvalidTypeError

    options = GateOptions(token_budget=100, message_overhead=0, preset="recall")
    memory = GatekeeperMemory.from_defaults(options=options, session_id="opts")
    assert memory.token_limit == 100
    gate = memory.gate.gatekeeper.options
    assert (gate.token_budget, gate.message_overhead, gate.on_overflow) == (100, 0, "keep_pinned")
    assert gate.params == options.params
    turns(memory, REDIS_1)
    assert contents(memory.get(input=REDIS_QUERY)) == list(REDIS_1)
    for copied in (copy.deepcopy(memory), pickle.loads(pickle.dumps(memory)),
                   GatekeeperMemory.from_dict(memory.to_dict())):
        kept = copied.gate.gatekeeper.options
        assert (kept.token_budget, kept.message_overhead, kept.on_overflow) == (100, 0, "keep_pinned")
        assert kept.params == options.params  # the preset's values travel, as scalars in to_dict
    with pytest.raises(InvalidTypeError):  # a record beside keywords: which one wins would be a guess
        GatekeeperMemory.from_defaults(options=options, message_overhead=3)
    with pytest.raises(InvalidTypeError, match="token counter"):  # one counter for the budget and the edits
        GatekeeperMemory.from_defaults(options=options, token_counter=len)
    with pytest.raises(InvalidTypeError, match="disagree"):
        GatekeeperMemory(options=options, token_limit=200)
    with pytest.raises(InvalidTypeError, match="token_limit"):
        GatekeeperMemory(token_budget=200)


def test_an_options_record_without_a_budget_of_its_own_keeps_the_memory_sizing():
    """GateOptions(preset=...) sets no budget: its default 4000 is not the caller's choice, so
    llm= sizing, token_limit= and the memory's default 3000 apply; a budget it does set stays
    the token_limit, and one different from token_limit= is still refused."""
    from context_gatekeeper import GateOptions, InvalidTypeError

    recall = GateOptions(preset="recall")
    window = MockLLM().metadata.context_window
    assert GatekeeperMemory.from_defaults(llm=MockLLM(), options=recall).token_limit == int(window * 0.75)
    assert GatekeeperMemory.from_defaults(options=recall).token_limit == 3000
    assert GatekeeperMemory(options=recall).token_limit == 3000
    memory = GatekeeperMemory.from_defaults(token_limit=1200, options=recall)
    assert memory.token_limit == 1200 and memory.gate.gatekeeper.options.token_budget == 1200
    assert memory.gate.gatekeeper.options.params == recall.params
    assert GatekeeperMemory(token_limit=1200, options=recall).token_limit == 1200
    assert GatekeeperMemory.from_defaults(llm=MockLLM(), options=recall.with_(token_budget=500)).token_limit == 500
    assert GatekeeperMemory.from_defaults(token_limit=500, options=recall.with_(token_budget=500)).token_limit == 500
    with pytest.raises(InvalidTypeError, match="disagree"):
        GatekeeperMemory.from_defaults(token_limit=1200, options=recall.with_(token_budget=500))
    # a budget passed as the default's number is still the caller's choice
    chosen = GateOptions(preset="recall", token_budget=4000)
    assert GatekeeperMemory.from_defaults(llm=MockLLM(), options=chosen).token_limit == 4000
    assert GatekeeperMemory(options=recall.with_(token_budget=4000)).token_limit == 4000
    with pytest.raises(InvalidTypeError, match="disagree"):
        GatekeeperMemory.from_defaults(token_limit=1200, options=chosen)


def test_over_budget_pinned_content_keeps_the_system_message_and_the_open_turn():
    memory = GatekeeperMemory.from_defaults(token_limit=10, token_counter=words, message_overhead=0)
    memory.put(ChatMessage(role="system", content="You are a very careful assistant who always cites sources."))
    turns(memory, REDIS_1)
    memory.put(user(REDIS_QUERY))
    got = memory.get()
    assert [m.role.value for m in got] == ["system", "user"] and got[-1].content == REDIS_QUERY


def test_returned_messages_are_copies():
    memory = GatekeeperMemory.from_defaults()
    memory.put_messages([user("Trip to Ireland?"), ChatMessage(role="assistant", content="Yes.", additional_kwargs={"x": {"y": 1}})])
    for batch in (memory.get(), memory.get_all(), memory.record()):
        batch[0].blocks[0].text = "MUTATED"
        batch[1].additional_kwargs["x"]["y"] = 2
        batch.append(user("extra"))
    assert contents(memory.get_all()) == ["Trip to Ireland?", "Yes."]
    assert memory.get_all()[1].additional_kwargs == {"x": {"y": 1}}


def test_put_does_not_keep_a_reference_to_the_callers_message():
    memory = GatekeeperMemory.from_defaults()
    message = user("Trip to Ireland?")
    memory.put(message)
    message.blocks[0].text = "changed later"
    assert contents(memory.get_all()) == ["Trip to Ireland?"]


@pytest.mark.parametrize("call", ["get", "aget"])
def test_an_answer_written_while_get_selects_never_comes_before_its_question(call, monkeypatch) -> None:
    from llama_index.core.embeddings import MockEmbedding

    memory = GatekeeperMemory.from_defaults(token_limit=2000, embedder=MockEmbedding(embed_dim=8))
    turns(memory, REDIS_1)
    question = "And how does the Redis lock watchdog renew the TTL?"
    memory.put(user(question))
    gate = memory.gate
    synced = gate._plan

    def answer_lands_now(*args, **kwargs):  # after get read the state, before the gate reads the store
        monkeypatch.setattr(gate, "_plan", synced)
        memory.put(assistant("It renews the Redis lock TTL every third of it."))
        return synced(*args, **kwargs)

    monkeypatch.setattr(gate, "_plan", answer_lands_now)
    got = memory.get() if call == "get" else asyncio.run(memory.aget())
    assert contents(got) == [*REDIS_1, question]  # the turn as read, once, at the end


@pytest.mark.parametrize("how", ["assign", "model_copy", "deep model_copy"])
def test_session_id_cannot_be_changed_in_place(tmp_path: Path, how: str) -> None:
    from context_gatekeeper import InvalidTypeError

    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chat.db"), session_id="alice")
    turns(memory, REDIS_1)
    with pytest.raises(InvalidTypeError, match="cannot be changed .*session_id='bob'"):
        if how == "assign":
            memory.session_id = "bob"
        else:
            memory.model_copy(update={"session_id": "bob"}, deep=how.startswith("deep"))
    memory.session_id = "alice"  # the same id changes nothing
    assert memory.session_id == memory.to_dict()["session_id"] == "alice"
    twin = pickle.loads(pickle.dumps(memory))
    assert twin.get_all() == memory.get_all()
    twin.close()
    memory.close()


def guide_block(containing: str) -> str:
    """The python code block of docs/guide/llamaindex.md that holds ``containing``."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "llamaindex.md").read_text(encoding="utf-8")
    blocks = [block.split("```", 1)[0] for block in guide.split("```python\n")[1:]]
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"the guide has {len(found)} python blocks holding {containing!r}"
    return found[0]


def test_the_documented_way_to_open_another_session_survives_closing_the_first_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the guide and the session_id error recommended from_defaults(store=memory.store, ...): a
    # memory built from a path owns its store, so closing it closed bob's (StoreClosedError)
    from context_gatekeeper import InvalidTypeError

    monkeypatch.chdir(tmp_path)
    recipe = guide_block('session_id="bob"')
    assert "store=memory.store" not in recipe and "store.close()" in recipe
    checked = "bob.put(user(REDIS_1[0])); bob.put(assistant(REDIS_1[1])); assert len(bob.get_all()) == 2\n"
    names: dict[str, object] = {"GatekeeperMemory": GatekeeperMemory, "user": user, "assistant": assistant,
                                "REDIS_1": REDIS_1}
    exec(recipe.replace("...\n", checked), names)  # runs after alice.close(), before store.close()
    reopened = SQLiteStore(str(tmp_path / "chats.db"))
    try:
        assert reopened.head("bob") == 2 and reopened.head("alice") == 0
    finally:
        reopened.close()
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "other.db"), session_id="alice")
    with pytest.raises(InvalidTypeError) as refused:
        memory.session_id = "bob"
    message = str(refused.value)  # what the error recommends is the guide's recipe
    assert "store=memory.store" not in message and "SQLiteStore(path)" in message
    assert "store=store, session_id='bob'" in message and "store.close()" in message
    memory.close()


def test_token_limit_can_be_changed_to_a_valid_budget_and_explain_follows_it() -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    turns(memory, REDIS_1)
    assert memory.explain(REDIS_QUERY).turn_ids == (1,)
    for bad in (-1, "big", True):
        with pytest.raises(BudgetError):
            memory.token_limit = bad
        with pytest.raises(BudgetError):
            memory.model_copy(update={"token_limit": bad})
    smaller = memory.model_copy(update={"token_limit": 5})
    assert (smaller.token_limit, memory.token_limit) == (5, 2000)
    assert smaller.explain(REDIS_QUERY).turn_ids == () and memory.explain(REDIS_QUERY).turn_ids == (1,)
    memory.token_limit = 5
    assert memory.explain(REDIS_QUERY).turn_ids == () and memory.get(REDIS_QUERY) == []


# -- writing ------------------------------------------------------------------------------
def test_set_is_one_recorded_revision_with_stable_ids_and_undo():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, REDIS_1, ESPRESSO)
    ids = [m.id for m in memory.transcript.messages]
    memory.set(memory.get_all())
    assert [r.kind for r in memory.history()] == ["append"] * 4  # nothing changed, nothing recorded
    memory.set(memory.get_all()[:2])
    assert memory.history()[-1].kind == "set"
    assert [m.id for m in memory.transcript.messages] == ids[:2]
    memory.undo()
    assert contents(memory.get_all()) == [*REDIS_1, *ESPRESSO]
    assert [m.id for m in memory.transcript.messages] == ids


def test_reset_is_recorded_and_undoable():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, REDIS_1)
    memory.reset()
    memory.reset()  # nothing left: no second revision
    assert memory.get_all() == [] and memory.get() == []
    assert [r.kind for r in memory.history()] == ["append", "append", "clear"]
    assert contents(memory.record()) == list(REDIS_1)
    memory.undo()
    assert contents(memory.get_all()) == list(REDIS_1)


def test_concurrent_puts_from_two_threads_lose_nothing():
    memory = GatekeeperMemory.from_defaults()
    start = threading.Barrier(3)

    def writer(name: str) -> None:
        start.wait()
        for i in range(100):
            memory.put(user(f"{name} question {i}"))
            memory.put(assistant(f"{name} answer {i}"))

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("left", "right")]
    for t in threads:
        t.start()
    start.wait()
    for _ in range(20):
        memory.get()  # reads interleave with the writes
    for t in threads:
        t.join()
    everything = contents(memory.get_all())
    assert len(everything) == 400
    for name in ("left", "right"):
        mine = [c for c in everything if c.startswith(name)]
        assert mine == [f"{name} {kind} {i}" for i in range(100) for kind in ("question", "answer")]


# -- versions -----------------------------------------------------------------------------
def test_edit_preview_commit_undo_redo_revert_diff():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, ("We went to Ireland in 2021.", "Ireland in 2021, noted."))
    proposal = memory.edit("Iceland", model=patch({"op": "replace", "id": "1", "content": "We went to Iceland in 2021."}), preview=True)
    assert isinstance(proposal, Proposal) and contents(memory.get_all())[0] == "We went to Ireland in 2021."
    revision = memory.commit(proposal)
    assert revision.kind == "edit" and contents(memory.get_all())[0] == "We went to Iceland in 2021."
    assert "Iceland" in str(memory.diff(2))
    memory.undo()
    assert contents(memory.get_all())[0] == "We went to Ireland in 2021."
    memory.redo()
    assert contents(memory.get_all())[0] == "We went to Iceland in 2021."
    memory.revert(2)
    assert contents(memory.get_all())[0] == "We went to Ireland in 2021."
    assert [r.kind for r in memory.history()] == ["append", "append", "edit", "undo", "redo", "revert"]
    with pytest.raises(HistoryError):
        memory.revert(99)


def test_default_model_and_llm_alias():
    memory = GatekeeperMemory.from_defaults(model=patch({"op": "replace", "id": "1", "content": "B"}))
    turns(memory, ("A", "ok"))
    memory.edit("A -> B")
    assert contents(memory.get_all())[0] == "B"
    memory.edit("B -> C", llm=patch({"op": "replace", "id": "1", "content": "C"}))
    assert contents(memory.get_all())[0] == "C"
    with pytest.raises(TypeError):
        memory.edit("x", model=ScriptedModel([]), llm=ScriptedModel([]))
    with pytest.raises(TypeError):
        GatekeeperMemory.from_defaults(model=ScriptedModel([]), llm=ScriptedModel([]))


def test_from_defaults_llm_sets_the_token_limit_like_chat_memory_buffer():
    llm = MockLLM()
    assert GatekeeperMemory.from_defaults(llm=llm).token_limit == int(llm.metadata.context_window * 0.75)
    assert GatekeeperMemory.from_defaults(llm=llm, token_limit=500).token_limit == 500
    assert GatekeeperMemory.from_defaults().token_limit == 3000


def test_from_defaults_chat_history_is_set():
    memory = GatekeeperMemory.from_defaults(chat_history=[user(REDIS_1[0]), assistant(REDIS_1[1])])
    assert contents(memory.get_all()) == list(REDIS_1)
    assert [r.kind for r in memory.history()] == ["set"]


def test_edit_without_model_or_key_raises_model_unavailable(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("llamaindex_gatekeeper.models")
    from context_gatekeeper import ModelUnavailableError

    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    memory = GatekeeperMemory.from_defaults()
    turns(memory, REDIS_1)
    with pytest.raises(ModelUnavailableError):
        memory.edit("anything")
    assert contents(memory.get_all()) == list(REDIS_1)


def test_async_twins():
    async def scenario() -> GatekeeperMemory:
        memory = GatekeeperMemory.from_defaults()
        await memory.aput(user("We went to Ireland."))
        await memory.aput_messages([assistant("Noted: Ireland.")])
        await memory.aedit("Iceland", model=patch({"op": "replace", "id": "1", "content": "We went to Iceland."}))
        assert contents(await memory.aget_all())[0] == "We went to Iceland."
        assert contents(await memory.aget(input="Iceland trip?"))[0] == "We went to Iceland."
        assert await memory.aexplain("Iceland trip?") == memory.explain("Iceland trip?")
        await memory.aundo()
        await memory.aredo()
        assert len(await memory.ahistory()) == 5 and "Iceland" in str(await memory.adiff(2))
        await memory.aset([user("only this")])
        await memory.areset()
        await memory.arevert(2)
        assert contents(await memory.arecord()) == ["We went to Ireland.", "Noted: Ireland.", "only this"]
        return memory

    memory = asyncio.run(scenario())
    assert contents(memory.get_all()) == ["We went to Ireland.", "Noted: Ireland."]


# -- serialisation ------------------------------------------------------------------------
def test_to_dict_from_dict_round_trips_state_and_history():
    memory = GatekeeperMemory.from_defaults(token_limit=1234, session_id="trip", message_overhead=1)
    turns(memory, ("We went to Ireland in 2021.", "Ireland in 2021, noted."), REDIS_1)
    memory.edit("Iceland", model=patch({"op": "replace", "id": "1", "content": "We went to Iceland in 2021."}))
    data = json.loads(json.dumps(memory.to_dict()))
    restored = GatekeeperMemory.from_dict(data)
    assert isinstance(restored, BaseMemory)
    assert (restored.session_id, restored.token_limit) == ("trip", 1234)
    assert restored.gate.gatekeeper.message_overhead == 1
    assert restored.get_all() == memory.get_all()
    assert restored.record() == memory.record()
    assert [(r.number, r.kind, r.instruction) for r in restored.history()] == [
        (r.number, r.kind, r.instruction) for r in memory.history()
    ]
    assert [m.id for m in restored.transcript.messages] == [m.id for m in memory.transcript.messages]
    assert restored.store is memory.store  # a live export of this process: the same session
    elsewhere = GatekeeperMemory.from_dict({k: v for k, v in data.items() if k != "live_token"})
    assert elsewhere.store is not memory.store and elsewhere.get_all() == memory.get_all()
    elsewhere.undo()
    assert contents(elsewhere.get_all())[0] == "We went to Ireland in 2021."
    assert contents(memory.get_all())[0] == "We went to Iceland in 2021."  # data from elsewhere: replayed, apart
    again = GatekeeperMemory.from_dict(data, store=elsewhere.store)  # that session went on (the undo): attached
    assert again.get_all() == elsewhere.get_all() and len(again.history()) == len(elsewhere.history())
    other = GatekeeperMemory.from_defaults(session_id="trip")
    other.put(ChatMessage(role="user", content="Another conversation."))
    with pytest.raises(ValueError, match="differs"):
        GatekeeperMemory.from_dict(data, store=other.store)  # a session with another log


def test_from_dict_attaches_to_the_sqlite_session_it_came_from(tmp_path: Path):
    path = str(tmp_path / "chat.db")
    memory = GatekeeperMemory.from_defaults(store=path, session_id="s")
    turns(memory, REDIS_1)
    data = memory.to_dict()
    again = GatekeeperMemory.from_dict(data, store=path)
    assert again.get_all() == memory.get_all() and len(again.history()) == 2
    turns(again, REDIS_2)
    assert len(memory.get_all()) == 4  # one session, two objects


def test_to_json_and_workflow_style_from_dict():
    memory = GatekeeperMemory.from_defaults()
    turns(memory, REDIS_1)
    restored = GatekeeperMemory.from_json(memory.to_json())
    assert restored.get_all() == memory.get_all()
    assert memory.to_dict()["class_name"] == "GatekeeperMemory"


def test_shared_store_sessions_are_separate():
    store = InMemoryStore()
    a = GatekeeperMemory.from_defaults(store=store, session_id="a")
    b = GatekeeperMemory.from_defaults(store=store, session_id="b")
    turns(a, REDIS_1)
    assert b.get_all() == [] and store.sessions() == ["a"]


# -- packaging ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["convert", "memory", "serialisation"])
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the examples' temporary files go
    module = importlib.import_module(f"llamaindex_gatekeeper.{name}")
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
    assert not list(temp.iterdir()), "an example left temporary files behind: clean them up in the example"


def test_a_llamaindex_llm_edits_through_the_models_resolver():
    pytest.importorskip("llamaindex_gatekeeper.models")
    from li_support import ScriptedLLM

    reply = json.dumps({"operations": [{"op": "replace", "id": "1", "content": "We went to Iceland."}]})
    memory = GatekeeperMemory.from_defaults(llm=ScriptedLLM([reply]), token_limit=1000)
    turns(memory, ("We went to Ireland.", "Noted: Ireland."))
    revision = memory.edit("Iceland, not Ireland")
    assert contents(memory.get_all())[0] == "We went to Iceland." and revision.model
    other = ScriptedLLM([json.dumps({"operations": [{"op": "replace", "id": "2", "content": "Noted: Iceland."}]})])
    memory.edit("and the answer", llm=other)
    assert contents(memory.get_all()) == ["We went to Iceland.", "Noted: Iceland."]
    assert "Ireland" in other.prompts[-1]


def test_get_without_input_does_not_spend_the_budget_twice_on_the_current_turn() -> None:
    from llama_index.core.llms import ChatMessage

    from llamaindex_gatekeeper import GatekeeperMemory

    memory = GatekeeperMemory.from_defaults(token_limit=80, token_counter=len, message_overhead=0)
    memory.put_messages([ChatMessage(role="user", content="Redis lock TTL sizing?"),
                         ChatMessage(role="assistant", content="Longer than the job.")])
    memory.put_messages([ChatMessage(role="user", content="Redis lock renewal?"),
                         ChatMessage(role="assistant", content="Watchdog.")])
    assert [m.content for m in memory.get()] == [
        "Redis lock TTL sizing?", "Longer than the job.", "Redis lock renewal?", "Watchdog.",
    ]


@pytest.mark.parametrize("bad", [None, 5, "hello", ChatMessage(role="user", content="alone"), [None]])
def test_put_messages_and_set_refuse_what_is_not_a_list_of_chat_messages_and_change_nothing(bad) -> None:
    from context_gatekeeper import InvalidTypeError

    memory = GatekeeperMemory.from_defaults(session_id="refusals")
    memory.put(ChatMessage(role="user", content="How long should a Redis lock TTL be?"))
    before = [(m.role, m.content) for m in memory.get_all()], memory.transcript.head
    for method in (memory.put_messages, memory.set):
        with pytest.raises(InvalidTypeError, match="ChatMessage"):
            method(bad)
    assert ([(m.role, m.content) for m in memory.get_all()], memory.transcript.head) == before


def test_a_message_json_cannot_keep_is_refused_with_the_librarys_error_and_nothing_written() -> None:
    from context_gatekeeper import InvalidInputError

    memory = GatekeeperMemory.from_defaults(session_id="unserialisable")
    with pytest.raises(InvalidInputError, match="nothing was written"):
        memory.put(ChatMessage(role="user", content="hi", additional_kwargs={"handle": object()}))
    assert memory.get_all() == [] and memory.transcript.head == 0


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
def test_a_blank_input_is_no_input(blank) -> None:
    memory = GatekeeperMemory.from_defaults(session_id="blank-input", token_limit=2000)
    memory.put_messages([
        ChatMessage(role="user", content="How long should a Redis lock TTL be?"),
        ChatMessage(role="assistant", content="Longer than the longest job."),
        ChatMessage(role="user", content="Best espresso grind?"),
        ChatMessage(role="assistant", content="Fine, like table salt."),
        ChatMessage(role="user", content="And the Redis lock watchdog?"),
    ])
    assert [m.content for m in memory.get(input=blank)] == [m.content for m in memory.get()]
    assert [m.content for m in asyncio.run(memory.aget(input=blank))] == [m.content for m in memory.get()]


@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy, lambda m: m.model_copy(deep=True)])
def test_a_copy_of_an_in_memory_memory_shares_its_store_and_session(make_copy) -> None:
    """A workflow's ctx.store.edit_state() deep-copies the state and keeps the copy: the copy
    replayed the log into a new store, so what the agent wrote afterwards never reached the
    caller's memory. The store is a live handle, shared, as a SQLite memory's copies share the file."""
    memory = GatekeeperMemory.from_defaults(session_id="s", token_limit=500)
    turns(memory, REDIS_1)
    twin = make_copy(memory)
    assert twin is not memory and twin.store is memory.store and twin.session_id == "s"
    assert twin.token_limit == 500
    turns(twin, ESPRESSO)
    assert contents(memory.get_all()) == [*REDIS_1, *ESPRESSO]
    twin.close()  # never closes a store it did not open
    turns(memory, REDIS_2)
    assert contents(twin.get_all()) == [*REDIS_1, *ESPRESSO, *REDIS_2]
    apart = pickle.loads(pickle.dumps(memory))  # a pickle still carries the log, apart
    turns(apart, REDIS_2)
    assert len(memory.get_all()) == 6 and len(apart.get_all()) == 8


def test_the_copies_apart_the_guide_names_are_apart_and_a_checkpoint_is_its_snapshot() -> None:
    """The guide's recipes for a copy apart from an in-memory memory (whose deep copies share
    the session): a pickle, from_dict(to_dict(), store=InMemoryStore()), and a checkpoint
    restored after the session went on (it was attached to the live session as it is now,
    showing the present and writing into the original)."""
    memory = GatekeeperMemory.from_defaults(session_id="s")
    turns(memory, REDIS_1)
    checkpoint = memory.to_dict()
    turns(memory, ESPRESSO)
    copies = [
        pickle.loads(pickle.dumps(memory)),
        GatekeeperMemory.from_dict(memory.to_dict(), store=InMemoryStore()),
        GatekeeperMemory.from_dict(checkpoint),
    ]
    assert [contents(c.get_all()) for c in copies] == [[*REDIS_1, *ESPRESSO]] * 2 + [list(REDIS_1)]
    for apart in copies:
        assert apart.store is not memory.store
        turns(apart, REDIS_2)
    assert contents(memory.get_all()) == [*REDIS_1, *ESPRESSO]  # none reached the original
    shared = GatekeeperMemory.from_dict(memory.to_dict())  # the session's log as it is now: the live session
    assert shared.store is memory.store


def test_set_keeps_the_provider_fields_a_replaced_message_comes_with() -> None:
    """set() with a regenerated answer in place of the old one kept the old id (a change, not
    a delete and insert), so the message read as edited and lost the thought signature and
    reasoning it came with. An edit that rewrites the text still drops them; undo restores them."""
    memory = GatekeeperMemory.from_defaults()
    memory.put_messages([ChatMessage(role="user", content="Trip to Ireland?"),
                         ChatMessage(role="assistant", content="Ireland is green.")])
    kwargs = {"thought_signature": "SIG", "reasoning_content": "r", "foo": 1}
    regenerated = ChatMessage(role="assistant", blocks=[ThinkingBlock(content="Ireland..."),
                                                        TextBlock(text="Ireland is very green.")],
                              additional_kwargs=kwargs)
    history, answer_id = memory.get_all(), memory.transcript.messages[1].id
    memory.set([history[0], regenerated])
    assert memory.transcript.messages[1].id == answer_id  # the same message, changed
    assert memory.get_all()[1] == regenerated
    memory.set(memory.get_all())  # what get_all returns is what was set: nothing to record
    assert [r.kind for r in memory.history()] == ["append", "set"]
    memory.edit("Iceland", model=patch({"op": "replace", "id": "2", "content": "Iceland is volcanic."}))
    edited = memory.get_all()[1]
    assert edited.additional_kwargs == {"foo": 1} and [type(b) for b in edited.blocks] == [TextBlock]
    memory.undo()
    assert memory.get_all()[1] == regenerated


@pytest.mark.parametrize("make_copy", [copy.copy, lambda m: m.model_copy(), lambda m: m.model_copy(update={"token_limit": 9})])
def test_a_shallow_copy_owns_its_store_so_closing_it_leaves_the_original_working(tmp_path, make_copy) -> None:
    memory = GatekeeperMemory.from_defaults(store=str(tmp_path / "chats.db"), session_id="s")
    turns(memory, REDIS_1)
    twin = make_copy(memory)
    assert twin.store is not memory.store
    twin.close()
    turns(memory, ESPRESSO)  # the original's store is still open
    assert len(memory.get_all()) == 4
    memory.close()


# -- get: the budget, message by message ----------------------------------------------
def sent_cost(messages: list[ChatMessage], overhead: int = 3) -> int:
    """What ``messages`` cost as a provider receives them, counted by :func:`words`: each
    message's text, the name and arguments of each tool call it makes, and ``overhead``."""
    total = 0
    for m in messages:
        total += words(m.content or "") + overhead
        for block in m.blocks:
            if isinstance(block, ToolCallBlock):
                total += words(block.tool_name) + words(json.dumps(block.tool_kwargs))
    return total


def agent_turn(n: int) -> list[ChatMessage]:
    """A question, a tool call with long arguments, its result and the answer."""
    script = "redis-cli --scan --pattern 'lock:*' | xargs -n1 redis-cli ttl " * 3
    return [
        user(f"what redis lock ttl is set on redis-{n}?"),
        ChatMessage(role="assistant", blocks=[
            ToolCallBlock(tool_call_id=f"c{n}", tool_name="shell", tool_kwargs={"host": f"redis-{n}", "script": script}),
        ]),
        ChatMessage(role="tool", content="30", additional_kwargs={"tool_call_id": f"c{n}", "name": "shell"}),
        assistant(f"the redis lock ttl on redis-{n} is 30 seconds"),
    ]


def paired(messages: list[ChatMessage]) -> bool:
    """Every tool call has its result among ``messages`` and every result its call."""
    calls = {b.tool_call_id for m in messages for b in m.blocks if isinstance(b, ToolCallBlock)}
    results = {m.additional_kwargs.get("tool_call_id") for m in messages if m.role.value == "tool"}
    return calls == results


@pytest.mark.parametrize("limit", [40, 80, 100, 118, 160, 250])
def test_get_stays_within_token_limit_for_agent_turns_counting_tool_call_arguments(limit: int) -> None:
    """The gate prices a turn by its texts (its assistant messages as one, tool-call arguments
    not at all); get() returns each message apart, and what it returns stays within token_limit
    as its messages cost, whole turns left out (oldest first), never a call without its result."""
    history = [m for n in range(4) for m in agent_turn(n)] + [user("and the redis lock ttl on redis-9?")]
    memory = GatekeeperMemory.from_defaults(token_limit=limit, token_counter=words, chat_history=history)
    for got in (memory.get(), asyncio.run(memory.aget()), memory.get("redis lock ttl on redis-2?")):
        assert sent_cost(got) <= limit
        assert paired(got) and got[-1].content == "and the redis lock ttl on redis-9?"
    if limit >= 160:  # room for an earlier turn: the budget is used, not emptied
        assert len(memory.get()) > 1


@pytest.mark.parametrize("limit", range(40, 60, 2))
def test_several_system_messages_each_count_their_overhead(limit: int) -> None:
    """The gate prices the leading system messages as one prompt; get() returns them apart, each
    costing message_overhead, and stays within token_limit all the same."""
    history = [ChatMessage(role="system", content=s) for s in ("be brief", "cite sources", "use metric units",
                                                               "answer in english")]
    history += [user("redis lock ttl?"), assistant("redis lock ttl 30s"), user("redis lock watchdog?"),
                assistant("redis lock watchdog renews"), user("redis lock ttl and watchdog together?")]
    memory = GatekeeperMemory.from_defaults(token_limit=limit, token_counter=words, chat_history=history)
    got = memory.get()
    assert sent_cost(got) <= limit and [m.role.value for m in got[:4]] == ["system"] * 4


def test_get_stays_within_token_limit_whenever_the_pinned_content_fits() -> None:
    """Property: whenever the system messages (all pinned) and the current turn fit, get() and
    aget() return no more than token_limit - initial_token_count, counted message by message
    (tool-call arguments included), never a tool call without its result, every system message,
    and the current turn whole."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from context_gatekeeper.integration import group_turns

    text = st.lists(st.sampled_from(["redis", "lock", "ttl", "watchdog", "espresso", "grind", "the"]),
                    min_size=1, max_size=6).map(" ".join)
    step = st.one_of(
        st.tuples(st.sampled_from(["user", "assistant", "system", "user", "assistant"]), text),
        st.tuples(st.just("call"), text),
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(step, max_size=12), st.one_of(st.none(), text), st.integers(0, 120), st.integers(0, 10))
    def check(steps: list[tuple[str, str]], query: str | None, limit: int, initial: int) -> None:
        initial = min(initial, limit)
        history: list[ChatMessage] = []
        for n, (role, said) in enumerate(steps):
            if role == "call":  # an agent step: a call and its result, in one message pair
                history.append(ChatMessage(role="assistant", blocks=[
                    ToolCallBlock(tool_call_id=f"c{n}", tool_name="search", tool_kwargs={"q": said})]))
                history.append(ChatMessage(role="tool", content=said, additional_kwargs={"tool_call_id": f"c{n}"}))
            else:
                history.append(ChatMessage(role=role, content=said))
        memory = GatekeeperMemory.from_defaults(token_limit=limit, token_counter=words, chat_history=history)
        system = [m for m in memory.transcript.messages if m.role == "system"]
        _, all_turns = group_turns([m for m in memory.transcript.messages if m.role != "system"])
        current = current_turns(all_turns, query)
        tail = from_core_messages([m for turn in current for m in turn.messages])
        floor = sent_cost(from_core_messages(system)) + sent_cost(tail)
        for got in (memory.get(query, initial_token_count=initial),
                    asyncio.run(memory.aget(query, initial_token_count=initial))):
            assert paired(got) or not paired(history)
            assert contents(got[:len(system)]) == [m.content for m in system]  # every one, first, in order
            if floor <= limit - initial:
                assert sent_cost(got) <= limit - initial
                assert got[len(got) - len(tail):] == tail

    check()


def current_turns(turns: list, query: str | None) -> list:
    """The turns get(query) returns whole at the end (when they fit): the last turn and the
    unanswered user messages before it when it is unanswered or ends in a tool call or result;
    else the last turn with no query or a query that is its question; else none."""
    if not turns:
        return []
    last = turns[-1]
    if last.is_open or last.messages[-1].role == "tool" or last.messages[-1].metadata.get("tool_calls"):
        start = len(turns) - 1
        while start and turns[start - 1].is_open:
            start -= 1
        return turns[start:]
    asked = last.messages[0].role == "user" and last.messages[0].content == query
    return [last] if query is None or asked else []


# -- get: the current turn ---------------------------------------------------------------
def test_a_run_of_unanswered_user_messages_is_the_current_turn_returned_whole() -> None:
    """Several user messages nobody answered yet (a pasted config, then the question; an image,
    then the question) are the current turn: returned whole, never gated away."""
    pasted = user("maxmemory 2gb\nmaxmemory-policy noeviction\nappendfsync always")
    question = user("Why are my writes so slow with this config?")
    image = ChatMessage(role="user", blocks=[ImageBlock(url="https://example.com/graph.png")])
    for first in (pasted, image):
        memory = GatekeeperMemory.from_defaults(token_limit=3000, chat_history=[*map(user, REDIS_1[:1]),
                                                                                 assistant(REDIS_1[1])])
        memory.put(first)
        memory.put(question)
        expected = [first.content, question.content]
        assert contents(memory.get())[-2:] == expected
        assert contents(memory.get(input=question.content))[-2:] == expected
        assert contents(asyncio.run(memory.aget()))[-2:] == expected
        assert contents(asyncio.run(memory.aget(input=question.content)))[-2:] == expected
        assert len(memory.get(input="Redis lock TTL?")) == 4  # the earlier turn is gated in as before


def test_a_long_run_of_unanswered_user_messages_stays_within_token_limit() -> None:
    """User messages nobody answered join the current turn only while they fit: a memory of
    retried questions (or one that logs user messages alone) is not returned whole."""
    memory = GatekeeperMemory.from_defaults(token_limit=60)
    for i in range(40):
        memory.put(user(f"Is the redis lock ttl still wrong, attempt {i}?"))
    for got in (memory.get(), memory.get(input="redis lock ttl"), asyncio.run(memory.aget())):
        assert 1 <= len(got) < 40 and got[-1].content == "Is the redis lock ttl still wrong, attempt 39?"
        assert memory._cost([to_core(m) for m in got]) <= 60


@pytest.mark.parametrize("blank", [[" "], ["", ""], ["\n"], ["", "Answer briefly."]])
def test_blank_system_messages_never_make_get_raise(blank: list[str]) -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=500)
    memory.set([ChatMessage(role="system", content=s) for s in blank] + [user(REDIS_1[0]), assistant(REDIS_1[1]),
                                                                         user("And the Redis watchdog?")])
    for got in (memory.get(), memory.get("Redis watchdog"), asyncio.run(memory.aget("Redis watchdog"))):
        assert contents(got) == [*blank, *REDIS_1, "And the Redis watchdog?"]


def test_model_copy_refuses_an_unknown_field_naming_the_ones_it_takes() -> None:
    from context_gatekeeper import InvalidTypeError

    memory = GatekeeperMemory.from_defaults(token_limit=100)
    turns(memory, REDIS_1)
    with pytest.raises(InvalidTypeError, match=r"\['foo'\].*'token_limit', 'session_id'"):
        memory.model_copy(update={"foo": 1, "token_limit": 50})
    assert memory.token_limit == 100 and len(memory.get_all()) == 2


def test_a_new_tokenizer_fn_is_refused_and_changes_nothing() -> None:
    """The budget counts with the counter the memory was built with: a tokenizer assigned later
    would make engines count their prefix otherwise than the budget does."""
    from context_gatekeeper import InvalidTypeError

    memory = GatekeeperMemory.from_defaults(token_limit=100)
    before = memory.tokenizer_fn
    with pytest.raises(InvalidTypeError, match="from_defaults"):
        memory.tokenizer_fn = lambda text: text.split()
    assert memory.tokenizer_fn is before
    memory.tokenizer_fn = before  # the same one: nothing changes


# -- get: an agent's tool loop is the current turn ----------------------------------------
HANDOFF_QUESTION = "Summarise our Redis lock TTL advice for the team wiki."


def handoff_loop(with_result: bool = True) -> list[ChatMessage]:
    """What AgentWorkflow writes before the next agent's get(input=...): the question, the
    router's handoff call and (once the tool ran) its result."""
    call = ChatMessage(role="assistant", blocks=[ToolCallBlock(
        tool_call_id="h1", tool_name="handoff", tool_kwargs={"to_agent": "writer", "reason": "a wiki page"})])
    result = ChatMessage(role="tool", content="Agent writer is now handling the request.",
                         additional_kwargs={"tool_call_id": "h1"})
    return [user(HANDOFF_QUESTION), call, result] if with_result else [user(HANDOFF_QUESTION), call]


def dumped(messages: list[ChatMessage]) -> list[dict]:
    return [m.model_dump(mode="json") for m in messages]


@pytest.mark.parametrize("with_result", [True, False])
@pytest.mark.parametrize("limit", [10, 2000])
def test_a_turn_in_an_agents_tool_loop_is_the_current_turn_even_with_an_input(with_result: bool, limit: int) -> None:
    """A last turn with no final answer (it ends in a tool result or a tool call) is current
    whatever the input: returned whole at the end, even over token_limit as an open turn is,
    and never gated (a multi-agent handoff asks get(input=question) of such a state)."""
    memory = GatekeeperMemory.from_defaults(token_limit=limit, token_counter=words, message_overhead=0)
    turns(memory, ESPRESSO, REDIS_1)
    loop = handoff_loop(with_result)
    memory.put_messages(loop)
    for query in (HANDOFF_QUESTION, "Which espresso grind for a moka pot?", None):
        for got in (memory.get(query), asyncio.run(memory.aget(query))):
            assert dumped(got[len(got) - len(loop):]) == dumped(loop)
            if limit == 10:  # nothing else fits
                assert len(got) == len(loop)
    assert ESPRESSO[0] not in contents(memory.get(HANDOFF_QUESTION))  # the earlier turns are gated as before


def test_the_unanswered_user_messages_before_a_tool_loop_join_it() -> None:
    """A pasted text, then the question an agent works on: one request, sent whole to the next
    agent as the open turn was to the first."""
    pasted = user("maxmemory 2gb\nmaxmemory-policy noeviction\nappendfsync always")
    memory = GatekeeperMemory.from_defaults(token_limit=2000, chat_history=[user(ESPRESSO[0]), assistant(ESPRESSO[1]),
                                                                            pasted, *handoff_loop()])
    for got in (memory.get(HANDOFF_QUESTION), asyncio.run(memory.aget(HANDOFF_QUESTION))):
        assert dumped(got) == dumped([pasted, *handoff_loop()])


def test_an_input_that_repeats_the_last_question_gets_that_turn_within_the_limit() -> None:
    """get(input=q) where q repeats the question of the last, answered turn ("Continue" after a
    long answer): an engine calls get before it puts q, so that turn is an earlier turn, within
    token_limit (taken for the current turn it was returned whole: 1,610 tokens for 300)."""
    memory = GatekeeperMemory.from_defaults(token_limit=8, token_counter=words, message_overhead=0)
    turns(memory, ESPRESSO, REDIS_1)  # 16 words each
    for got in (memory.get(REDIS_1[0]), asyncio.run(memory.aget(REDIS_1[0])), memory.get(f"  {REDIS_1[0]}\n")):
        assert got == []  # neither turn fits 8 words
    roomy = GatekeeperMemory.from_defaults(token_limit=20, token_counter=words, message_overhead=0)
    turns(roomy, ESPRESSO, REDIS_1)
    assert contents(roomy.get(REDIS_1[0])) == list(REDIS_1)  # the turn it repeats, gated in as any other


def test_fit_keeps_the_newest_selected_question_and_answer_when_no_user_message_would_be_left() -> None:
    """When the selected turns cost more than the room and no current turn carries a user message,
    the newest selected turn is kept as its question and final answer (its tool calls left out,
    with their results) if they fit; else no earlier turn (a question without its answer is not sent)."""
    memory = GatekeeperMemory.from_defaults(token_limit=100, token_counter=words, message_overhead=0)
    system = [to_core(ChatMessage(role="system", content="Be brief."))]
    turn = [to_core(m) for m in agent_turn(1)]
    question, answer = turn[0], turn[-1]
    gist = words(question.content) + words(answer.content) + 2
    assert memory._fit(system + turn, gist, needs_user=True) == [*system, question, answer]
    assert memory._fit(system + turn, gist - 1, needs_user=True) == system
    assert memory._fit(system + turn, gist, needs_user=False) == system  # the current turn has the user message
    whole = memory._cost(system + turn)
    assert memory._fit(system + turn, whole, needs_user=True) == system + turn


# -- get: system messages put mid-conversation ----------------------------------------------
def system_message(text: str) -> ChatMessage:
    return ChatMessage(role="system", content=text)


def test_a_system_message_put_mid_conversation_is_always_sent_after_the_leading_ones() -> None:
    """A system message put after the first turn (a new instruction) is pinned content, as the
    leading ones are: sent on every get, at the front after them, in order; never between a
    question and its answer, and never lost with the turn it was put after."""
    memory = GatekeeperMemory.from_defaults(token_limit=3000)
    memory.put(system_message("You are a helpful assistant."))
    turns(memory, ESPRESSO)
    memory.put(system_message("From now on, always answer in French."))  # grouped with the espresso turn by the core
    turns(memory, REDIS_1, REDIS_2)
    memory.put(user(REDIS_QUERY))
    memory.put(system_message("Cite your sources."))  # grouped with the open question
    front = ["You are a helpful assistant.", "From now on, always answer in French.", "Cite your sources."]
    for query in (None, REDIS_QUERY, "Which espresso grind for a moka pot?"):
        for got in (memory.get(query), asyncio.run(memory.aget(query))):
            assert contents(got[:3]) == front
            assert "system" not in [m.role.value for m in got[3:]] and got[-1].content == REDIS_QUERY
    assert contents(memory.get()) == [*front, *REDIS_1, *REDIS_2, REDIS_QUERY]  # the espresso turn still gated out


def test_a_system_message_put_mid_conversation_is_paid_for_once() -> None:
    """The turn a system message was put after costs no more for it: at a budget that holds the
    system message, that turn and the question exactly, all three are sent; a word less, the
    turn is left out and the system message is still sent."""
    memory = GatekeeperMemory.from_defaults(token_limit=24, token_counter=words, message_overhead=0)
    turns(memory, REDIS_1)  # 16 words
    memory.put(system_message("Answer in French."))  # 3
    memory.put(user("And the Redis lock watchdog?"))  # 5
    for got in (memory.get(), asyncio.run(memory.aget()), memory.get("Redis lock watchdog")):
        assert contents(got) == ["Answer in French.", *REDIS_1, "And the Redis lock watchdog?"]
    memory.token_limit = 23
    for got in (memory.get(), asyncio.run(memory.aget())):
        assert contents(got) == ["Answer in French.", "And the Redis lock watchdog?"]


def test_a_system_message_whose_turn_is_left_out_is_paid_for_up_front() -> None:
    """Put after an off-topic turn the gate leaves out, the system message is still sent and
    paid for: the turns the gate selects fit beside it, else they are selected again within
    what it leaves."""
    memory = GatekeeperMemory.from_defaults(token_limit=24, token_counter=words, message_overhead=0)
    turns(memory, ESPRESSO)  # 16 words
    memory.put(system_message("Answer in French."))  # 3, grouped with the espresso turn by the core
    turns(memory, REDIS_1)  # 16
    memory.put(user("And the Redis lock watchdog?"))  # 5
    for got in (memory.get(), asyncio.run(memory.aget())):
        assert contents(got) == ["Answer in French.", *REDIS_1, "And the Redis lock watchdog?"]
    memory.token_limit = 23
    for got in (memory.get(), asyncio.run(memory.aget())):
        assert contents(got) == ["Answer in French.", "And the Redis lock watchdog?"]
    two = GatekeeperMemory.from_defaults(token_limit=42, token_counter=words, message_overhead=0)
    turns(two, ESPRESSO)
    two.put(system_message("Answer in French."))
    turns(two, REDIS_1, REDIS_2)  # 16 words each
    two.put(user(REDIS_QUERY))  # 9: room for the system message and one Redis turn, not two
    for got in (two.get(), asyncio.run(two.aget())):  # the gate's choice (the TTL turn), not the newest
        assert contents(got) == ["Answer in French.", *REDIS_1, REDIS_QUERY]


# -- refusals: tokenizer_fn and values JSON cannot keep -------------------------------------
def test_a_tokenizer_fn_that_gives_no_tokens_is_refused_before_the_store_is_opened(tmp_path: Path) -> None:
    from context_gatekeeper import InvalidInputError, InvalidTypeError

    path = tmp_path / "chats.db"
    refused = [(5, InvalidTypeError, "callable.*token_counter="),
               ("cl100k_base", InvalidTypeError, "callable.*token_counter="),
               (lambda text: len(text.split()), InvalidInputError, "sequence of tokens.*token_counter=")]
    for bad, error, match in refused:
        with pytest.raises(error, match=match):
            GatekeeperMemory.from_defaults(store=str(path), chat_history=[user(REDIS_1[0])], tokenizer_fn=bad)
        with pytest.raises(error, match=match):
            GatekeeperMemory(tokenizer_fn=bad)
    assert not path.exists()


def test_a_tokenizer_fn_that_returns_a_count_later_raises_the_librarys_error_and_changes_nothing() -> None:
    from context_gatekeeper import InvalidInputError

    def tokens_for_short_texts(text: str) -> object:
        return text.split() if len(text) < 40 else len(text.split())

    memory = GatekeeperMemory.from_defaults(tokenizer_fn=tokens_for_short_texts)
    turns(memory, ("Redis lock TTL?", "Longer than the longest job that holds the lock, always."))
    memory.put(user("And the watchdog?"))
    with pytest.raises(InvalidInputError, match="tokenizer_fn must return a sequence of tokens.*token_counter="):
        memory.get()
    with pytest.raises(InvalidInputError, match="sequence of tokens"):  # what engines count their prefix with
        memory.tokenizer_fn("a prompt of more than forty characters, as engines send")
    assert len(memory.get_all()) == 3 and memory.transcript.head == 3


@pytest.mark.parametrize("message, where", [
    (ChatMessage(role="assistant", content="hi", additional_kwargs={"logprob": float("-inf")}),
     r"additional_kwargs\['logprob'\] is -inf"),
    (ChatMessage(role="assistant", content="hi", additional_kwargs={"scores": [0.5, {"top": float("nan")}]}),
     r"additional_kwargs\['scores'\]\[1\]\['top'\] is nan"),
    (ChatMessage(role="assistant",
                 blocks=[ToolCallBlock(tool_call_id="c1", tool_name="f", tool_kwargs={"x": float("inf")})]),
     r"blocks\[0\]\.tool_kwargs\['x'\] is inf"),
])
def test_nan_and_infinity_are_refused_naming_where_and_nothing_is_written(message: ChatMessage, where: str) -> None:
    """JSON has no NaN or infinity (pydantic's JSON dump writes null): the message is refused
    as any value JSON cannot keep is, before anything is written; finite floats are kept."""
    from context_gatekeeper import InvalidInputError

    memory = GatekeeperMemory.from_defaults(session_id="non-finite")
    turns(memory, REDIS_1)
    before = dumped(memory.get_all()), memory.transcript.head
    for write in (memory.put, lambda m: memory.put_messages([user("q"), m]), lambda m: memory.set([user("q"), m])):
        with pytest.raises(InvalidInputError, match=where + ".*nothing was written"):
            write(message)
    assert (dumped(memory.get_all()), memory.transcript.head) == before
    memory.put(ChatMessage(role="assistant", content="ok", additional_kwargs={"logprob": -1.5, "top": [0.25]}))
    assert memory.get_all()[-1].additional_kwargs == {"logprob": -1.5, "top": [0.25]}


@pytest.mark.parametrize("copied", ["copy.deepcopy", "model_copy(deep=True)", "from_dict"])
def test_a_copy_sharing_a_memorys_own_in_memory_store_outlives_the_originals_close(copied: str) -> None:
    """A memory with no store made its own InMemoryStore, and its copies write to that same store
    (an agent workflow deep-copies its state and keeps the copy); closing the original must not
    close it under them: an in-memory store holds nothing to release."""
    memory = GatekeeperMemory.from_defaults(session_id="s")
    memory.put(ChatMessage(role="user", content="Q1"))
    memory.put(ChatMessage(role="assistant", content="A1"))
    twin = {"copy.deepcopy": copy.deepcopy, "model_copy(deep=True)": lambda m: m.model_copy(deep=True),
            "from_dict": lambda m: GatekeeperMemory.from_dict(m.to_dict())}[copied](memory)
    assert twin.store is memory.store
    memory.close()
    twin.put(ChatMessage(role="user", content="Q2"))
    assert [m.content for m in twin.get_all()] == ["Q1", "A1", "Q2"]
