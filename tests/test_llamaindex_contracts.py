"""LlamaIndex's ``BaseMemory`` contracts, held by ``GatekeeperMemory``.

Mirrors what llama-index-core's unit tests check of a memory: get / put / put_messages /
set / reset / get_all and their async twins (``status=``, ``initial_token_count``, every
shape of ``input`` an engine passes, ``QueryBundle`` included), serialisation, pickle and
deepcopy (in memory, SQLite files and PostgreSQL, then the copy kept in use), written here
against ``GatekeeperMemory``.  Chat engines, agents and the postprocessor:
``test_llamaindex_engine_contracts.py``.

Where the adapter deliberately differs from ``ChatMemoryBuffer`` (it gates: an earlier
turn unrelated to the message is not sent), the test says so.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.chat_store.sql import MessageStatus

from context_gatekeeper import BudgetError, GatekeeperError
from context_gatekeeper.stores import InMemoryStore
from li_support import (
    ESPRESSO,
    PYDANTIC_DEPRECATIONS,
    REDIS_1,
    REDIS_2,
    REDIS_QUERY,
    assistant,
    contents,
    patch,
    three_turns,
    user,
)
from pg_support import drop_tables, postgres_dsn, prefix_for
from llamaindex_gatekeeper import GatekeeperMemory

pytestmark = PYDANTIC_DEPRECATIONS


# -- BaseMemory: get / put / set / reset / get_all, sync and async -------------------------


def test_messages_come_back_equal_to_what_was_put() -> None:
    memory = GatekeeperMemory.from_defaults()
    added = [user("first message"), assistant("first answer")]
    memory.put(added[0])
    memory.put_messages(added[1:])
    assert memory.get_all() == added  # equal as ChatMessage objects: nothing added to them
    assert memory.get() == added


def test_get_returns_copies_the_caller_may_change() -> None:
    memory = GatekeeperMemory.from_defaults(chat_history=[user("first message")])
    got = memory.get()
    got[0].content = "changed"
    got.append(user("extra"))
    assert contents(memory.get()) == ["first message"]


def test_set_replaces_and_reset_empties() -> None:
    memory = GatekeeperMemory.from_defaults(chat_history=[user("first message")])
    memory.put(user("first message"))
    assert len(memory.get_all()) == 2
    memory.set([user("first message")])
    assert contents(memory.get_all()) == ["first message"]
    memory.reset()
    assert memory.get() == [] and memory.get_all() == []


def test_async_twins_do_what_the_sync_methods_do() -> None:
    async def scenario() -> None:
        memory = GatekeeperMemory.from_defaults()
        await memory.aput(user("Message 1"))
        await memory.aput_messages([assistant("Response 1"), user("Message 2")])
        assert contents(await memory.aget()) == ["Message 1", "Response 1", "Message 2"]
        assert await memory.aget_all() == memory.get_all()
        await memory.aset([user("Message 1"), assistant("Response 1")])
        assert contents(await memory.aget_all()) == ["Message 1", "Response 1"]
        await memory.areset()
        assert await memory.aget() == []
        assert [r.kind for r in memory.history()][-1] == "clear"

    asyncio.run(scenario())


@pytest.mark.parametrize("status", [None, MessageStatus.ACTIVE, "active"])
def test_status_active_is_the_current_state(status: Any) -> None:
    async def scenario() -> None:
        memory = GatekeeperMemory.from_defaults()
        await memory.aput_messages([user("Message 1"), assistant("Response 1")])
        assert contents(await memory.aget_all(status=status)) == ["Message 1", "Response 1"]
        assert memory.get_all(status=status) == await memory.aget_all()
        await memory.areset(status=status)
        assert await memory.aget() == []

    asyncio.run(scenario())


def test_status_archived_is_empty_as_nothing_is_ever_archived() -> None:
    memory = GatekeeperMemory.from_defaults(chat_history=[user("Message 1")])
    assert memory.get_all(status=MessageStatus.ARCHIVED) == []
    asyncio.run(memory.areset(status=MessageStatus.ARCHIVED))  # nothing archived: nothing to delete
    assert contents(memory.get_all()) == ["Message 1"]
    with pytest.raises(ValueError, match="status"):
        memory.get_all(status="deleted")


@pytest.mark.parametrize(
    "query",
    [REDIS_QUERY, user(REDIS_QUERY), QueryBundle(REDIS_QUERY), QueryBundle(QueryBundle(REDIS_QUERY))],  # type: ignore[arg-type]
    ids=["str", "ChatMessage", "QueryBundle", "nested QueryBundle"],
)
def test_get_takes_every_shape_of_input(query: Any) -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    three_turns(memory)
    expected = [*REDIS_1, *REDIS_2]
    assert contents(memory.get(input=query)) == expected
    assert contents(asyncio.run(memory.aget(input=query))) == expected
    assert contents(asyncio.run(memory.aget(query))) == expected


def test_get_without_input_gates_on_the_open_user_message() -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    three_turns(memory)
    memory.put(user(REDIS_QUERY))
    assert contents(memory.get()) == [*REDIS_1, *REDIS_2, REDIS_QUERY]
    assert contents(memory.get(input=None)) == contents(memory.get(input=QueryBundle(REDIS_QUERY)))


def test_get_refuses_an_input_it_cannot_read() -> None:
    memory = GatekeeperMemory.from_defaults(chat_history=[user("first message")])
    with pytest.raises(TypeError, match="initial_token_count="):
        memory.get(5)  # type: ignore[arg-type]  # ChatMemoryBuffer ignores input; 5 was meant as tokens


def test_initial_token_count_over_the_limit_raises_a_value_error() -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=49, chat_history=[user("first message")])
    for call in (memory.get, lambda **kw: asyncio.run(memory.aget(**kw))):
        with pytest.raises(BudgetError) as error:
            call(initial_token_count=50)
        assert isinstance(error.value, ValueError) and isinstance(error.value, GatekeeperError)
        assert str(error.value) == "Initial token count exceeds token limit"  # ChatMemoryBuffer's text
        assert "token_limit=49" in "\n".join(error.value.__notes__)  # and what to do about it
    assert contents(memory.get(initial_token_count=49)) == ["first message"]  # the open turn is never dropped
    assert len(memory.history()) == 1


def test_initial_token_count_is_taken_off_the_limit_in_get_and_aget() -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=2000)
    three_turns(memory)
    memory.put(user(REDIS_QUERY))
    full = memory.get()
    assert contents(full) == [*REDIS_1, *REDIS_2, REDIS_QUERY]
    tight = memory.get(initial_token_count=1990)
    assert contents(tight) == [REDIS_QUERY]
    assert asyncio.run(memory.aget(initial_token_count=1990)) == tight


# -- serialisation, pickle, deepcopy ---------------------------------------------------------


def test_to_dict_and_to_json_round_trip_state_and_history() -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=5, chat_history=[user("first message")])
    memory.put(assistant("first answer"))
    for restored in (
        GatekeeperMemory.from_dict(memory.to_dict()),
        GatekeeperMemory.from_json(memory.to_json()),
    ):
        assert restored.token_limit == 5
        assert restored.get_all() == memory.get_all()
        assert [r.kind for r in restored.history()] == [r.kind for r in memory.history()]


def _edited(memory: GatekeeperMemory) -> GatekeeperMemory:
    """A memory with a history worth keeping: two appends and a ``set`` (undoable)."""
    three_turns(memory)
    memory.set([user(REDIS_1[0]), assistant(REDIS_1[1])])
    return memory


def _sqlite(tmp_path: Path, **options: Any) -> GatekeeperMemory:
    return _edited(GatekeeperMemory.from_defaults(store=str(tmp_path / "chat.db"), session_id="s1", **options))


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "model_copy"])
def test_an_in_memory_memory_copies_with_its_whole_history(how: str) -> None:
    original = _edited(GatekeeperMemory.from_defaults(token_limit=1234, session_id="s1"))
    if how == "pickle":
        twin = pickle.loads(pickle.dumps(original))
    elif how == "deepcopy":
        twin = copy.deepcopy(original)
    else:
        twin = original.model_copy(deep=True)
    assert isinstance(twin, GatekeeperMemory) and twin is not original
    assert (twin.token_limit, twin.session_id) == (1234, "s1")
    assert twin.get_all() == original.get_all()
    assert [(r.number, r.kind) for r in twin.history()] == [(r.number, r.kind) for r in original.history()]
    assert twin.record() == original.record()
    # the copy keeps working: undo of the set() brings the three turns back
    twin.undo()
    assert contents(twin.get_all()) == [*REDIS_1, *ESPRESSO, *REDIS_2]
    assert contents(twin.get(input=REDIS_QUERY)) == [*REDIS_1, *REDIS_2]
    twin.put(user("one more"))
    if how == "pickle":  # a pickle carries the log: the original is untouched
        assert twin.store is not original.store
        assert contents(original.get_all()) == list(REDIS_1)
        assert len(original.history()) == 4 and len(twin.history()) == 6
    else:  # a copy shares the live store and session (workflows deep-copy their state and keep the copy)
        assert twin.store is original.store
        assert original.get_all() == twin.get_all() and len(original.history()) == 6


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_sqlite_memory_copy_reattaches_to_the_same_session(tmp_path: Path, how: str) -> None:
    original = _sqlite(tmp_path, token_limit=777)
    twin = pickle.loads(pickle.dumps(original)) if how == "pickle" else copy.deepcopy(original)
    try:
        assert twin.token_limit == 777 and twin.session_id == "s1"
        assert twin.store is not original.store  # its own connection ...
        assert twin.store.path == original.store.path  # ... to the same file  # type: ignore[attr-defined]
        # nothing lost, nothing duplicated
        assert [(r.number, r.kind) for r in twin.history()] == [(r.number, r.kind) for r in original.history()]
        assert twin.get_all() == original.get_all()
        twin.undo()  # of the set(): a new revision in the shared session
        assert contents(twin.get_all()) == [*REDIS_1, *ESPRESSO, *REDIS_2]
        twin.put(user(REDIS_QUERY))
        assert contents(twin.get())[-1] == REDIS_QUERY
        reopened = GatekeeperMemory.from_defaults(store=str(tmp_path / "chat.db"), session_id="s1")
        assert reopened.get_all() == twin.get_all()
        assert [r.kind for r in reopened.history()] == ["append"] * 3 + ["set", "undo", "append"]
        reopened.close()
    finally:
        twin.close()
        original.close()


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_postgres_memory_copy_reattaches_to_the_same_session(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = postgres_dsn()
    from psycopg.conninfo import conninfo_to_dict

    from context_gatekeeper.stores.postgres import PostgresStore

    prefix = prefix_for(tmp_path)
    store = PostgresStore(dsn, table_prefix=prefix)
    try:
        original = _edited(GatekeeperMemory.from_defaults(store=store, session_id="pg", token_limit=777))
        if how == "pickle":
            monkeypatch.setenv("PGPASSWORD", conninfo_to_dict(dsn)["password"])  # a pickle never carries it
            twin = pickle.loads(pickle.dumps(original))
        else:
            monkeypatch.delenv("PGPASSWORD", raising=False)  # a deepcopy keeps it, in memory
            twin = copy.deepcopy(original)
        try:
            assert twin.store is not store and twin.token_limit == 777
            assert [(r.number, r.kind) for r in twin.history()] == [(r.number, r.kind) for r in original.history()]
            twin.undo()
            twin.put(user(REDIS_QUERY))
            again = GatekeeperMemory.from_defaults(store=store, session_id="pg")
            assert again.get_all() == twin.get_all()
            assert [r.kind for r in again.history()] == ["append"] * 3 + ["set", "undo", "append"]
        finally:
            twin.close()  # closes the connection the copy opened, and only that one
        assert twin.store._pool.closed and not store._pool.closed  # type: ignore[attr-defined]
    finally:
        store.close()
        drop_tables(dsn, prefix)


def test_deepcopy_keeps_the_editing_model_and_options_a_pickle_leaves_out() -> None:
    memory = GatekeeperMemory.from_defaults(
        model=patch({"op": "replace", "id": "1", "content": "Edited."}), token_counter=len, message_overhead=0
    )
    answer = "A long answer that the edit leaves alone, so that the change stays a small share of the text."
    memory.put_messages([user("Original."), assistant(answer)])
    twin = copy.deepcopy(memory)
    assert twin.gate.gatekeeper.message_overhead == 0
    twin.edit("rewrite the first message")
    assert contents(twin.get_all()) == ["Edited.", answer]
    assert contents(memory.get_all()) == ["Edited.", answer]  # one session: the copy shares the store
    shared = copy.deepcopy([memory, memory])
    assert shared[0] is shared[1]  # deepcopy's memo: one copy per original


def test_a_memory_in_another_store_pickles_as_its_log() -> None:
    store = InMemoryStore()
    memory = _edited(GatekeeperMemory.from_defaults(store=store, session_id="s2"))
    twin = pickle.loads(pickle.dumps(memory))
    assert twin.store is not store
    assert [r.kind for r in twin.history()] == [r.kind for r in memory.history()]
    assert twin.get_all() == memory.get_all()


def test_bad_reservations_and_statuses_are_library_errors_and_read_nothing() -> None:
    from context_gatekeeper import InvalidInputError

    memory = GatekeeperMemory.from_defaults(token_limit=500)
    memory.put(ChatMessage(role=MessageRole.USER, content="How long should a Redis lock TTL be?"))
    for bad in (-1, 2.5, True):
        with pytest.raises(InvalidInputError, match="initial_token_count must be an int >= 0"):
            memory.get(initial_token_count=bad)
        with pytest.raises(InvalidInputError, match="initial_token_count must be an int >= 0"):
            asyncio.run(memory.aget(initial_token_count=bad))
    with pytest.raises(InvalidInputError, match="status must be None, 'active' or 'archived'"):
        memory.get_all(status="bogus")
    assert [m.content for m in memory.get_all()] == ["How long should a Redis lock TTL be?"]


def test_an_open_turn_over_the_limit_returns_it_alone_without_a_negative_budget(caplog: pytest.LogCaptureFixture) -> None:
    memory = GatekeeperMemory.from_defaults(token_limit=20)
    memory.put(ChatMessage(role=MessageRole.USER, content="How long should a Redis lock TTL be?"))
    memory.put(ChatMessage(role=MessageRole.ASSISTANT, content="Longer than the longest job."))
    memory.put(ChatMessage(role=MessageRole.USER, content="redis " * 100))
    with caplog.at_level("WARNING"):
        got = memory.get()
    assert [m.content for m in got] == ["redis " * 100]
    assert "token_budget is -" not in caplog.text
