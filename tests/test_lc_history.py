"""GatekeeperChatMessageHistory: a LangChain chat history over a versioned, editable transcript.

Real LangChain message classes and fake chat models; no network.  (The module name must
not start with ``langchain``: langchain-core hides deprecation warnings from such callers.)
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import doctest
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage

import langchain_gatekeeper.history as history_module
from context_gatekeeper import (
    Delete, EditError, InMemoryStore, InsertAfter, ModelUnavailableError, Proposal, Replace, SQLiteStore,
    StoreUnavailableError,
)
from context_gatekeeper.testing import ScriptedModel
from langchain_gatekeeper.history import GatekeeperChatMessageHistory
from lc_support import ESPRESSO, ESPRESSO_QUERY, REDIS_1, REDIS_2, REDIS_QUERY, answers, patch_reply
from net_support import no_network
from store_raw import LostReplyStore


def rich_conversation() -> list[BaseMessage]:
    """Every kind of message and field the history must keep."""
    return [
        SystemMessage("You are a travel assistant.", id="sys"),
        HumanMessage(
            [
                {"type": "text", "text": "Plan a trip to Ireland."},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
            id="u1",
            name="ana",
        ),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "weather", "args": {"city": "Dublin"}, "id": "call-1", "type": "tool_call"}],
            additional_kwargs={"thought_signature": "sig", "custom": {"k": 1}},
            response_metadata={"model_name": "fake"},
        ),
        ToolMessage("12 C, rain", tool_call_id="call-1", name="weather", id="t1", artifact={"raw": [1, 2]}),
        AIMessage(
            "Dublin is rainy: pack a coat.",
            id="a2",
            additional_kwargs={"thought_signature": "sig2", "custom": 2},
            name="planner",
        ),
    ]


def turns(history: GatekeeperChatMessageHistory, *pairs: tuple[str, str]) -> None:
    for user, assistant in pairs:
        history.add_messages([HumanMessage(user), AIMessage(assistant)])


def texts(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages]


# -- BaseChatMessageHistory contract ---------------------------------------------------------
def test_messages_keep_types_and_fields_across_a_round_trip():
    original = rich_conversation()
    history = GatekeeperChatMessageHistory("round-trip")
    history.add_messages(original)
    assert history.messages == original
    assert [type(m) for m in history.messages] == [type(m) for m in original]
    assert history.record() == original
    assert asyncio.run(history.aget_messages()) == original


def test_add_messages_is_turn_atomic_and_messages_is_the_full_transcript():
    history = GatekeeperChatMessageHistory("atomic")
    turns(history, REDIS_1, ESPRESSO, REDIS_2)
    kinds = [r.kind for r in history.history()]
    assert kinds == ["append"] * 3
    assert [len(r.added) for r in history.history()] == [2, 2, 2]
    assert texts(history.messages) == [*REDIS_1, *ESPRESSO, *REDIS_2]
    history.add_user_message("Open question?")
    history.add_ai_message("Its answer.")
    assert texts(history.messages)[-2:] == ["Open question?", "Its answer."]


def test_clear_is_a_recorded_revision_and_the_record_survives():
    history = GatekeeperChatMessageHistory("clear")
    turns(history, REDIS_1)
    history.clear()
    assert history.messages == []
    assert history.history()[-1].kind == "clear"
    assert texts(history.record()) == list(REDIS_1)
    history.undo()
    assert texts(history.messages) == list(REDIS_1)
    history.clear()
    history.clear()  # clearing an empty history records nothing
    assert [r.kind for r in history.history()][-2:] == ["undo", "clear"]


def test_an_id_already_used_gets_a_fresh_one_instead_of_breaking_the_session():
    history = GatekeeperChatMessageHistory("ids")
    message = HumanMessage("same object twice", id="dup")
    history.add_messages([message, AIMessage("ok")])
    history.add_messages([message])  # the same message again: a retried request, added once
    history.clear()
    history.add_messages([HumanMessage("reuses a cleared id", id="dup")])
    history.undo()  # the cleared messages come back next to the new one
    ids = [m.id for m in history.messages]
    assert len(ids) == len(set(ids)) == 3
    assert ids[0] == "dup"


def test_sqlite_history_reopened_shows_the_same_messages(tmp_path: Path):
    path = tmp_path / "chat.db"
    first = GatekeeperChatMessageHistory("s1", store=path)
    first.add_messages(rich_conversation())
    first.edit("x", model=patch_reply({"op": "replace", "id": "1", "content": "Dublin: pack a coat."}))
    before = first.messages
    first.store.close()
    again = GatekeeperChatMessageHistory("s1", store=str(path))
    assert again.messages == before
    assert again.record() == rich_conversation()
    assert [r.kind for r in again.history()] == ["append", "edit"]
    assert isinstance(GatekeeperChatMessageHistory("s2", store=SQLiteStore(path)).store, SQLiteStore)


def test_any_core_store_is_accepted():
    store = InMemoryStore()
    a = GatekeeperChatMessageHistory("shared", store=store)
    turns(a, REDIS_1)
    b = GatekeeperChatMessageHistory("shared", store=store)
    assert texts(b.messages) == list(REDIS_1)
    assert b.session_id == "shared" and b.store is store


# -- the gated view --------------------------------------------------------------------------
def test_select_excludes_the_off_topic_turn_and_keeps_the_relevant_one():
    history = GatekeeperChatMessageHistory("gate")
    history.add_messages([SystemMessage("Be brief.")])
    turns(history, REDIS_1, ESPRESSO, REDIS_2)
    view = history.select(REDIS_QUERY)
    assert texts(view) == ["Be brief.", *REDIS_1, *REDIS_2]
    assert isinstance(view[0], SystemMessage) and isinstance(view[1], HumanMessage)
    assert texts(history.messages) == ["Be brief.", *REDIS_1, *ESPRESSO, *REDIS_2]  # the store keeps everything
    assert history.explain(REDIS_QUERY).turn_ids == (1, 3)
    assert texts(asyncio.run(history.aselect(ESPRESSO_QUERY))) == ["Be brief.", *ESPRESSO]


def test_select_keeps_the_open_turn():
    history = GatekeeperChatMessageHistory("open")
    turns(history, ESPRESSO)
    history.add_messages([HumanMessage("Redis lock TTL?")])
    assert texts(history.select("Redis lock TTL?"))[-1] == "Redis lock TTL?"


def test_select_keeps_a_paste_sent_before_the_question_with_it():
    """Unanswered human messages right before the question (a paste, then the question) are
    the open turn with it, as on the list path and in the LlamaIndex memory."""
    history = GatekeeperChatMessageHistory("paste")
    turns(history, REDIS_1, ESPRESSO)
    paste = "Traceback (most recent call last): File app.py line 12 KeyError: 'user_id'"
    question = "Which logging library would you recommend instead?"
    history.add_messages([HumanMessage(paste), HumanMessage(question)])
    assert texts(history.select(question)) == [paste, question]
    assert texts(asyncio.run(history.aselect(question))) == [paste, question]


# -- edits and versions ----------------------------------------------------------------------
def test_edit_revises_text_and_undo_brings_it_back_keeping_later_turns():
    history = GatekeeperChatMessageHistory("edit")
    history.add_messages([HumanMessage("We went to Ireland in 2021."), AIMessage("Ireland in 2021, noted.")])
    revision = history.edit(
        "It was Iceland, not Ireland.",
        patch_reply(
            {"op": "replace", "id": "1", "content": "We went to Iceland in 2021."},
            {"op": "replace", "id": "2", "content": "Iceland in 2021, noted."},
        ),
    )
    assert revision.kind == "edit" and revision.instruction == "It was Iceland, not Ireland."
    assert texts(history.messages) == ["We went to Iceland in 2021.", "Iceland in 2021, noted."]
    assert "Ireland" in str(history.diff(1)) and "Iceland" in str(history.diff(1))
    assert texts(history.record()) == ["We went to Ireland in 2021.", "Ireland in 2021, noted."]
    turns(history, ("What should we pack?", "Warm layers."))
    history.undo()
    assert texts(history.messages) == [
        "We went to Ireland in 2021.", "Ireland in 2021, noted.", "What should we pack?", "Warm layers."
    ]
    history.redo()
    assert texts(history.messages)[0] == "We went to Iceland in 2021."
    history.revert(1)
    assert texts(history.messages) == ["We went to Ireland in 2021.", "Ireland in 2021, noted."]


def test_preview_changes_nothing_until_commit():
    history = GatekeeperChatMessageHistory("preview")
    turns(history, ("Budget is 300 EUR.", "300 EUR it is."))
    reply = patch_reply({"op": "replace", "id": "1", "content": "Budget is 500 EUR."})
    proposal = history.edit("500 EUR", reply, preview=True)
    assert isinstance(proposal, Proposal)
    assert texts(history.messages)[0] == "Budget is 300 EUR."
    history.commit(proposal)
    assert texts(history.messages)[0] == "Budget is 500 EUR."


def test_rewritten_assistant_text_drops_provider_keys_only():
    history = GatekeeperChatMessageHistory("provider")
    history.add_messages(rich_conversation())
    reply = patch_reply({"op": "replace", "id": "2", "content": "Dublin is rainy: pack an umbrella."})
    history.edit("coat -> umbrella", reply)
    current = {m.id: m for m in history.messages}
    assert current["a2"].text == "Dublin is rainy: pack an umbrella."
    assert current["a2"].additional_kwargs == {"custom": 2}
    assert current["a2"].name == "planner" and isinstance(current["a2"], AIMessage)
    assert current["a1"] == rich_conversation()[2]  # untouched messages keep everything
    assert current["t1"] == rich_conversation()[3]
    assert current["u1"].content[1] == rich_conversation()[1].content[1]  # non-text blocks kept


def test_model_arguments_llm_alias_and_constructor_default():
    history = GatekeeperChatMessageHistory("models", llm=patch_reply({"op": "replace", "id": "1", "content": "B"}))
    turns(history, ("A", "ok"))
    history.edit("A -> B")  # the constructor's llm= is the default
    assert texts(history.messages)[0] == "B"
    history.edit("B -> C", llm=patch_reply({"op": "replace", "id": "1", "content": "C"}))
    scripted = ScriptedModel(['{"operations": [{"op": "replace", "id": "1", "content": "D"}]}'])
    history.edit("C -> D", scripted)  # the core's model protocol works too
    assert texts(history.messages)[0] == "D" and len(scripted.calls) == 1
    with pytest.raises(TypeError):
        history.edit("x", model=answers("a"), llm=answers("b"))


def test_malformed_edit_output_leaves_everything_unchanged():
    history = GatekeeperChatMessageHistory("malformed")
    turns(history, REDIS_1, ESPRESSO)
    before, head = history.messages, len(history.history())
    with pytest.raises(EditError):
        history.edit("drop espresso", answers("I cannot help with that.", "{not json"))
    assert history.messages == before and len(history.history()) == head


def test_edit_without_model_or_key_raises_model_unavailable_naming_the_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    history = GatekeeperChatMessageHistory("no-key")
    turns(history, REDIS_1)
    with no_network(monkeypatch):  # refused before any connection is tried: never a hang
        with pytest.raises(ModelUnavailableError, match="GOOGLE_API_KEY"):
            history.edit("anything")
        with pytest.raises(ModelUnavailableError, match="model="):
            asyncio.run(history.aedit("anything"))
    assert texts(history.messages) == list(REDIS_1)


# -- async -----------------------------------------------------------------------------------
@pytest.mark.parametrize("answer", [AIMessage, AIMessageChunk])
def test_streamed_answers_are_answers_to_selection(answer) -> None:
    # .stream() through a RunnableWithMessageHistory hands the history AIMessageChunks
    history = GatekeeperChatMessageHistory("s", token_budget=4000)
    history.add_messages([HumanMessage("How long should a Redis lock TTL be?"), answer("Longer than the longest job.")])
    history.add_messages([HumanMessage("By the way, what espresso grind suits a moka pot?"),
                          answer("Medium-fine, a little coarser than espresso.")])
    history.add_messages([HumanMessage("How should the Redis lock renewal watchdog work?"),
                          answer("Extend the lock TTL from a watchdog thread.")])
    assert [m.role for m in history.transcript.messages] == ["user", "assistant"] * 3
    kept = texts(history.select("Which espresso beans for a moka pot?"))
    assert "Extend the lock TTL from a watchdog thread." not in kept and type(history.messages[1]) is answer


def test_apply_refuses_to_insert_a_tool_message_and_a_core_inserted_one_stays_readable() -> None:
    from context_gatekeeper import InsertAfter, InvalidInputError

    history = GatekeeperChatMessageHistory("s")
    turns(history, REDIS_1)
    head = history.transcript.head
    with pytest.raises(InvalidInputError, match="tool_call_id"):
        history.apply([InsertAfter(1, "tool", "lookup result")])
    assert history.transcript.head == head and texts(history.messages) == [*REDIS_1]
    history.transcript.apply([InsertAfter(history.message_ids()[1], "tool", "lookup result")])  # the core allows it
    last = history.messages[-1]
    assert isinstance(last, ToolMessage) and last.text == "lookup result"
    assert texts(history.select("Redis lock TTL?"))  # selection reads it too


def test_async_twins():
    async def scenario() -> GatekeeperChatMessageHistory:
        history = GatekeeperChatMessageHistory("async")
        await history.aadd_messages([HumanMessage("We went to Ireland."), AIMessage("Noted: Ireland.")])
        await history.aedit("Iceland", patch_reply({"op": "replace", "id": "1", "content": "We went to Iceland."}))
        assert texts(await history.aget_messages())[0] == "We went to Iceland."
        proposal = await history.aedit(
            "2022", patch_reply({"op": "replace", "id": "1", "content": "We went to Iceland in 2022."}), preview=True
        )
        await history.acommit(proposal)
        await history.aundo()
        await history.aredo()
        assert texts(await history.aget_messages())[0] == "We went to Iceland in 2022."
        assert "Iceland" in str(await history.adiff(1))
        await history.aclear()
        assert await history.aget_messages() == []
        assert texts(await history.arecord()) == ["We went to Ireland.", "Noted: Ireland."]
        await history.arevert(1)
        assert [r.kind for r in await history.ahistory()][-1] == "revert"
        return history

    history = asyncio.run(scenario())
    assert texts(history.messages) == ["We went to Ireland.", "Noted: Ireland."]


# -- hygiene ---------------------------------------------------------------------------------
def test_constructing_and_using_the_history_raises_no_warning(tmp_path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        history = GatekeeperChatMessageHistory("quiet", store=tmp_path / "q.db")
        turns(history, REDIS_1)
        history.add_message(HumanMessage("hi"))
        history.select("Redis lock TTL?")
        history.edit("x", patch_reply({"op": "replace", "id": "1", "content": "Redis lock TTL?"}))
        asyncio.run(history.aget_messages())
        str(history)
        history.clear()


def test_docstring_examples_run():
    assert doctest.testmod(history_module).failed == 0


# -- pickle and copy.deepcopy ---------------------------------------------------------------
def test_an_in_memory_history_pickles_with_its_log_and_unpickles_independent():
    history = GatekeeperChatMessageHistory("p", token_budget=1234, strategy="rewrite", model=ScriptedModel([]))
    turns(history, REDIS_1, ESPRESSO)
    history.clear()
    history.undo()  # the copy can redo it: the undo stacks travel with the log
    copy_ = pickle.loads(pickle.dumps(history))
    assert (copy_.session_id, copy_.gate.gatekeeper.token_budget, copy_.transcript.strategy) == ("p", 1234, "rewrite")
    assert copy_.messages == history.messages and copy_.message_ids() == history.message_ids()
    untimed = lambda h: [dataclasses.replace(r, time=0.0) for r in h.history()]  # noqa: E731
    assert untimed(copy_) == untimed(history) and copy_.record() == history.record()  # times: the replay's
    assert copy_.transcript.model is None  # a model is never pickled
    copy_.redo()  # the clear again, in the copy only
    turns(copy_, REDIS_2)
    assert texts(history.messages) == [*REDIS_1, *ESPRESSO]
    assert texts(copy_.messages) == [*REDIS_2]


def test_a_sqlite_history_pickles_as_its_path_and_reattaches(tmp_path: Path):
    path = str(tmp_path / "chat.db")
    history = GatekeeperChatMessageHistory("s", store=path)
    turns(history, REDIS_1)
    data = pickle.dumps(history)
    assert path.encode() in data and REDIS_1[0].encode() not in data  # the path, not a copy of the log
    again = pickle.loads(data)
    try:
        assert again.messages == history.messages
        turns(again, ESPRESSO)  # a write through the copy reaches the same session of the same file
        assert texts(history.messages) == [*REDIS_1, *ESPRESSO]
        other = SQLiteStore(path)
        assert other.head("s") == 2
        other.close()
    finally:
        again.close()
        history.close()


def test_copies_of_a_history_on_a_relative_path_reopen_the_same_file_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    history = GatekeeperChatMessageHistory("s", store="chat.db")  # as the README writes it
    turns(history, REDIS_1)
    data = pickle.dumps(history)
    monkeypatch.chdir(tmp_path / "elsewhere")  # a worker process, a notebook that moved on
    for again in (pickle.loads(data), copy.deepcopy(history)):
        try:
            assert texts(again.messages) == [*REDIS_1]
        finally:
            again.close()
    history.close()
    assert not list((tmp_path / "elsewhere").iterdir())  # no new, empty chat.db there


def test_copies_of_a_read_only_history_stay_read_only(tmp_path: Path):
    path = tmp_path / "chat.db"
    writer = GatekeeperChatMessageHistory("s", store=str(path))
    turns(writer, REDIS_1)
    writer.close()
    store = SQLiteStore(path, read_only=True, busy_timeout=2.5)
    history = GatekeeperChatMessageHistory("s", store=store)
    for again in (pickle.loads(pickle.dumps(history)), copy.deepcopy(history)):
        try:
            assert again.transcript.store.read_only and again.transcript.store.busy_timeout == 2.5
            with pytest.raises(StoreUnavailableError):
                turns(again, ESPRESSO)
        finally:
            again.close()
    store.close()
    reader = SQLiteStore(path)
    assert reader.head("s") == 1  # nothing was written through a copy
    reader.close()


def test_a_shallow_copy_keeps_the_model_as_a_deep_copy_does(tmp_path: Path):
    editor = patch_reply({"op": "replace", "id": "1", "content": "Redis lock TTL, please?"})
    history = GatekeeperChatMessageHistory("s", store=str(tmp_path / "chat.db"), model=editor)
    turns(history, REDIS_1)
    twin = copy.copy(history)
    try:
        assert twin.transcript.model is history.transcript.model  # the same model, not a copy
        twin.edit("ask politely")
        assert texts(history.messages)[0] == "Redis lock TTL, please?"
    finally:
        twin.close()
        history.close()


def test_a_history_on_a_store_object_reattaches_to_its_file(tmp_path: Path):
    store = SQLiteStore(tmp_path / "chat.db")
    history = GatekeeperChatMessageHistory("s", store=store, embedder=lambda texts: [[1.0, 0.0] for _ in texts])
    turns(history, REDIS_1)
    again = pickle.loads(pickle.dumps(history))  # the embedder (a lambda) is left out, not a pickling error
    assert not again.gate.semantic
    turns(again, ESPRESSO)
    again.close()  # closes the store the copy opened, not the caller's
    assert texts(history.messages) == [*REDIS_1, *ESPRESSO]
    store.close()


def test_deepcopy_keeps_the_model_and_attaches_to_the_same_sqlite_session(tmp_path: Path):
    editor = patch_reply({"op": "replace", "id": "1", "content": "Redis lock TTL, please?"})
    history = GatekeeperChatMessageHistory("s", store=str(tmp_path / "chat.db"), model=editor, token_budget=777)
    turns(history, REDIS_1)
    twin = copy.deepcopy(history)
    try:
        assert twin is not history and twin.transcript is not history.transcript
        assert twin.messages == history.messages and twin.gate.gatekeeper.token_budget == 777
        assert twin.transcript.model is history.transcript.model  # the same model, not a copy
        twin.edit("ask politely")  # with the default model it kept (no model= here)
        turns(twin, ESPRESSO)
        assert texts(history.messages) == ["Redis lock TTL, please?", REDIS_1[1], *ESPRESSO]
    finally:
        twin.close()
        history.close()


def test_deepcopy_of_an_in_memory_history_is_independent():
    history = GatekeeperChatMessageHistory("m")
    turns(history, REDIS_1)
    twin = copy.deepcopy({"h": history})["h"]  # inside a container, as a framework's state copy does it
    turns(twin, ESPRESSO)
    assert texts(history.messages) == [*REDIS_1] and texts(twin.messages) == [*REDIS_1, *ESPRESSO]


def test_a_postgres_history_pickles_without_its_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from pg_support import drop_tables, postgres_dsn, prefix_for

    dsn = postgres_dsn()
    from psycopg.conninfo import conninfo_to_dict

    from context_gatekeeper import PostgresStore

    password = conninfo_to_dict(dsn).get("password")
    assert password, "the test server's DSN carries a password"
    prefix = prefix_for(tmp_path)
    store = PostgresStore(dsn, table_prefix=prefix, lock_timeout=None)
    try:
        history = GatekeeperChatMessageHistory("pg", store=store)
        turns(history, REDIS_1)
        data = pickle.dumps(history)
        assert password.encode() not in data
        monkeypatch.setenv("PGPASSWORD", password)  # where the unpickling side keeps it
        again = pickle.loads(data)
        try:
            assert again.transcript.store.lock_timeout is None  # the store's settings travel with it
            turns(again, ESPRESSO)
            assert texts(history.messages) == [*REDIS_1, *ESPRESSO]
        finally:
            again.close()
    finally:
        store.close()
        drop_tables(dsn, prefix)


def test_the_gate_settings_can_come_as_one_options_record(tmp_path) -> None:
    import copy
    import pickle

    from context_gatekeeper import GateOptions, InvalidTypeError

    options = GateOptions(token_budget=300, message_overhead=0, preset="recall", token_counter=len)
    history = GatekeeperChatMessageHistory("opts", store=str(tmp_path / "h.sqlite3"), options=options)
    gate = history.gate.gatekeeper.options
    assert (gate.token_budget, gate.message_overhead, gate.on_overflow) == (300, 0, "keep_pinned")
    assert gate.params == options.params
    for copied in (copy.deepcopy(history), pickle.loads(pickle.dumps(history))):
        kept = copied.gate.gatekeeper.options
        assert (kept.token_budget, kept.params) == (300, options.params)
        copied.close()
    with pytest.raises(InvalidTypeError):  # a record beside keywords: which one wins would be a guess
        GatekeeperChatMessageHistory("opts", store=str(tmp_path / "other.sqlite3"), options=options, top_m=3)
    assert not (tmp_path / "other.sqlite3").exists()  # refused before the store was opened
    with pytest.raises(InvalidTypeError):  # one counter for the budget and the edits: the record's
        GatekeeperChatMessageHistory("opts", store=str(tmp_path / "other.sqlite3"), options=options, token_counter=len)
    assert not (tmp_path / "other.sqlite3").exists()
    history.close()


@pytest.mark.parametrize("bad", [None, 5, "hello", HumanMessage("alone"), {"role": "user"}, [None]])
def test_add_messages_and_apply_refuse_what_is_not_a_list_alike_sync_and_async_and_change_nothing(bad) -> None:
    from context_gatekeeper import InvalidTypeError

    history = GatekeeperChatMessageHistory("refusals")
    history.add_messages([HumanMessage("How long should a Redis lock TTL be?")])
    before = (history.messages, history.transcript.head)
    for call in (lambda: history.add_messages(bad), lambda: asyncio.run(history.aadd_messages(bad)),
                 lambda: history.apply(bad), lambda: asyncio.run(history.aapply(bad)),
                 lambda: history.transcript.apply(bad)):
        with pytest.raises(InvalidTypeError, match=r"must be a list|\[0\] is a"):
            call()
    assert (history.messages, history.transcript.head) == before


def test_a_cached_answer_keeps_a_stored_history_readable(tmp_path: Path) -> None:
    """An answer from a chat model's LLM cache (usage_metadata {"total_cost": 0}, which LangChain's
    own validation refuses) stored in a history: messages, select and a reopened SQLite session
    read it back as it was (each raised pydantic's ValidationError, for good)."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=["Dublin is the capital of Ireland."] * 3, cache=InMemoryCache())
    model.invoke("Capital of Ireland?")
    hit = model.invoke("Capital of Ireland?")
    assert hit.usage_metadata == {"total_cost": 0}
    path = tmp_path / "chats.db"
    history = GatekeeperChatMessageHistory("s", store=path)
    history.add_messages([HumanMessage("Capital of Ireland?"), hit])
    assert history.messages == [HumanMessage("Capital of Ireland?"), hit]
    assert history.select("And Ireland's currency?")[-1] == hit
    history.store.close()
    assert GatekeeperChatMessageHistory("s", store=path).messages[-1] == hit


def test_select_never_splits_a_tool_step_with_a_user_message_between_its_results() -> None:
    """Parallel tool calls with an image a tool delivered between their results (as an agent
    stores them): select keeps or drops the step whole at every budget (the image started a
    turn, so the second result was selected without its call)."""
    def step() -> list[BaseMessage]:
        return [
            HumanMessage("Why is the checkout button hidden? check the page and its zindex config"),
            AIMessage("", tool_calls=[{"name": "screenshot", "args": {"url": "https://acme.test/checkout"}, "id": "shot"},
                                      {"name": "read_config", "args": {"name": "checkout zindex"}, "id": "cfg"}]),
            ToolMessage("screenshot attached below", tool_call_id="shot"),
            HumanMessage([{"type": "image", "url": "https://x.test/shot.png"}]),
            ToolMessage("checkout.banner.zindex = 9999 ; checkout.button.zindex = 10", tool_call_id="cfg"),
            AIMessage("The cookie banner (z-index 9999) covers the checkout button."),
        ]

    for budget in range(0, 100, 5):
        history = GatekeeperChatMessageHistory("s", token_budget=budget, token_counter=lambda t: len(t.split()))
        history.add_messages([*step(), HumanMessage("Best espresso grind for a moka pot?"), AIMessage("Medium-fine grind.")])
        out = history.select("What was the banner zindex config value again?")
        results = [m.tool_call_id for m in out if isinstance(m, ToolMessage)]
        calls = [c["id"] for m in out if isinstance(m, AIMessage) for c in m.tool_calls]
        assert results == calls and (not calls or out[:6] == step()), budget


def test_an_answer_retried_after_its_reply_was_lost_is_not_stored_again(tmp_path: Path):
    """add_messages of an AI answer whose first write landed but whose reply was lost, sent again
    with the same id: a retried request, not stored again (and not refused as a second answer)."""

    store = LostReplyStore(tmp_path / "chat.db")
    try:
        history = GatekeeperChatMessageHistory("s", store=store)
        history.add_messages([HumanMessage("Capital of Iceland?", id="q1")])
        store.lose_next = True
        with pytest.raises(ConnectionError):
            history.add_messages([AIMessage("Reykjavik.", id="a1")])
        head = history.transcript.head
        history.add_messages([AIMessage("Reykjavik.", id="a1")])
        assert [(m.type, m.id) for m in history.messages] == [("human", "q1"), ("ai", "a1")]
        assert history.transcript.head == head
    finally:
        store.close()


def test_an_earlier_answer_returned_again_for_a_new_question_is_stored(tmp_path: Path):
    """An LLM cache answers a question asked again with the earlier answer's AIMessage, id and
    all: behind the new question it is stored (under a fresh id), so the question is answered;
    the same batch sent again right away (a retry) is still stored once."""
    history = GatekeeperChatMessageHistory("cache", store=tmp_path / "chat.db")
    cached = AIMessage(REDIS_1[1], id="lc_run-1")
    history.add_messages([HumanMessage(REDIS_1[0]), cached])
    history.add_messages([HumanMessage(ESPRESSO[0]), AIMessage(ESPRESSO[1], id="lc_run-2")])
    history.add_messages([HumanMessage(REDIS_1[0]), cached])
    assert texts(history.messages) == [*REDIS_1, *ESPRESSO, *REDIS_1]
    ids = history.message_ids()
    assert ids[1] == "lc_run-1" and ids[5] not in ids[:5] and history.messages[5].id == ids[5]
    head = history.transcript.head
    history.add_messages([HumanMessage(REDIS_1[0]), cached])  # a retry of that request
    assert (history.transcript.head, len(history.messages)) == (head, 6)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_message_likes_are_stored_as_the_messages_they_stand_for(use_async: bool):
    """(role, text) tuples and role/content dicts, as chat models and RunnableWithMessageHistory
    take them, are converted as LangChain converts them, not refused."""
    history = GatekeeperChatMessageHistory("likes")
    batch = [("human", REDIS_1[0]), {"role": "assistant", "content": REDIS_1[1]}]
    if use_async:
        asyncio.run(history.aadd_messages(batch))
    else:
        history.add_messages(batch)
    assert history.messages == [HumanMessage(REDIS_1[0]), AIMessage(REDIS_1[1])]


def test_a_remove_message_is_refused_naming_apply_delete():
    """A RemoveMessage (LangGraph's delete marker) would be stored as a user message saying nothing."""
    from langchain_core.messages import RemoveMessage

    from context_gatekeeper import InvalidInputError

    history = GatekeeperChatMessageHistory("rm")
    history.add_messages([HumanMessage("hi", id="h1"), AIMessage("yo", id="a1")])
    head = history.transcript.head
    for call in (history.add_messages, lambda b: asyncio.run(history.aadd_messages(b))):
        with pytest.raises(InvalidInputError, match=r"apply\(\[Delete"):
            call([HumanMessage("more"), RemoveMessage(id="h1")])
    assert history.transcript.head == head and history.message_ids() == ["h1", "a1"]


def tool_turn() -> list[BaseMessage]:
    return [
        HumanMessage("Weather in Dublin?"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "c1", "type": "tool_call"}]),
        ToolMessage("rain in Dublin", tool_call_id="c1"),
        AIMessage("Rainy in Dublin."),
    ]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    "requests, said",
    [
        (lambda: [Delete(1)], "would lose the assistant message"),
        (lambda: [Delete(2)], "would be separated from its result"),
        (lambda: [InsertAfter(1, "user", "hey")], "would be separated from its result"),
        (lambda: [Replace(0, "Weather in Cork?"), InsertAfter(1, "assistant", "checking")], "separated"),
    ],
    ids=["delete-call", "delete-result", "insert-between", "insert-after-a-replace"],
)
def test_apply_refuses_to_separate_a_tool_call_from_its_result(use_async: bool, requests: Any, said: str) -> None:
    """As edit() refuses it: every later call would send a provider an invalid sequence."""
    from context_gatekeeper import InvalidInputError

    history = GatekeeperChatMessageHistory("tools")
    history.add_messages(tool_turn())
    before = (history.messages, history.transcript.head)
    with pytest.raises(InvalidInputError, match=said):
        if use_async:
            asyncio.run(history.aapply(requests()))
        else:
            history.apply(requests())
    assert (history.messages, history.transcript.head) == before
    history.apply([Delete(1), Delete(2)])  # the call with its result goes
    history.apply([Replace(-1, "Rain in Dublin.")])
    assert texts(history.messages) == ["Weather in Dublin?", "Rain in Dublin."]


def test_async_reads_convert_messages_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Converting a long history (a deep copy and a pydantic model per message) on the event loop
    stalls it; aget_messages and arecord convert where they read, in a worker thread."""
    import threading

    history = GatekeeperChatMessageHistory("threads")
    turns(history, REDIS_1, ESPRESSO)
    threads: list[int] = []
    convert = history_module.from_core_messages

    def recorded(messages: Any) -> list[BaseMessage]:
        threads.append(threading.get_ident())
        return convert(messages)

    monkeypatch.setattr(history_module, "from_core_messages", recorded)

    async def read() -> tuple[int, list[BaseMessage], list[BaseMessage]]:
        return threading.get_ident(), await history.aget_messages(), await history.arecord()

    loop_thread, messages, record = asyncio.run(read())
    assert texts(messages) == texts(record) == [*REDIS_1, *ESPRESSO]
    assert len(threads) == 2 and loop_thread not in threads


def test_a_pickle_keeps_an_encoding_name_token_counter():
    """A token counter given by name ("o200k_base") is no code: it travels, as a custom one does not."""
    from context_gatekeeper import GateOptions

    for history in (GatekeeperChatMessageHistory("enc", token_counter="o200k_base", token_budget=50),
                    GatekeeperChatMessageHistory("enc", options=GateOptions(token_counter="o200k_base"))):
        again = pickle.loads(pickle.dumps(history))
        assert again.transcript.token_counter == "o200k_base"
        assert again.gate.gatekeeper.options.token_counter == history.gate.gatekeeper.options.token_counter
    dropped = pickle.loads(pickle.dumps(GatekeeperChatMessageHistory("enc", token_counter=len)))
    assert dropped.transcript.token_counter is None  # code is still left out


def test_a_cached_answer_added_after_its_question_is_stored(tmp_path: Path) -> None:
    """BaseChatMessageHistory's own flow, add_user_message then add_ai_message, with a chat model
    whose LLM cache answers a question asked again with the earlier AIMessage (id and all): the
    third question is answered (under a fresh id), not left open."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=[REDIS_1[1], ESPRESSO[1]], cache=InMemoryCache())
    history = GatekeeperChatMessageHistory("s", store=tmp_path / "chat.db")
    for question in (REDIS_1[0], ESPRESSO[0], REDIS_1[0]):
        history.add_user_message(question)
        history.add_ai_message(model.invoke(question))
    assert texts(history.messages) == [*REDIS_1, *ESPRESSO, *REDIS_1]
    ids = history.message_ids()
    assert ids[5] not in ids[:5] and history.messages[5].id == ids[5] and history.messages[1].id == ids[1]


def test_an_agents_cached_tool_call_after_its_question_keeps_its_result_with_it() -> None:
    """An agent's output [earlier tool-calling AIMessage (held), new ToolMessage, AIMessage] added
    after its question: the call is stored (under a fresh id) with its result right after it."""
    from context_gatekeeper.editing.checks import tool_violations

    call = AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Dublin"}, "id": "c1", "type": "tool_call"}],
                     id="lc_run-1")
    history = GatekeeperChatMessageHistory("s")
    history.add_messages([HumanMessage("Weather in Dublin?"), call, ToolMessage("rain", tool_call_id="c1"),
                          AIMessage("Rainy.", id="lc_run-2")])
    history.add_user_message("And the weather in Dublin now?")
    history.add_messages([call, ToolMessage("sun", tool_call_id="c1"), AIMessage("Sunny.", id="lc_run-3")])
    stored = history.messages
    assert texts(stored) == ["Weather in Dublin?", "", "rain", "Rainy.", "And the weather in Dublin now?", "", "sun",
                             "Sunny."]
    assert isinstance(stored[5], AIMessage) and stored[5].tool_calls == call.tool_calls and stored[5].id != call.id
    assert tool_violations(list(history.transcript.messages)) == []


def test_an_id_given_twice_in_an_answer_after_its_question_answers_that_question() -> None:
    """[the earlier answer x, x again with new text] added after the open question: both answer
    it, in order, under fresh ids (the second went after x's stored copy, mid-history)."""
    history = GatekeeperChatMessageHistory("s")
    history.add_messages([HumanMessage("Q1"), AIMessage("A1", id="x")])
    history.add_messages([HumanMessage("Q2"), AIMessage("A2", id="y")])
    history.add_user_message("Q3")
    history.add_messages([AIMessage("A1", id="x"), AIMessage("A3, the new answer", id="x")])
    assert texts(history.messages) == ["Q1", "A1", "Q2", "A2", "Q3", "A1", "A3, the new answer"]
    ids = history.message_ids()
    assert ids[1] == "x" and "x" not in ids[5:] and len(set(ids)) == 7
