"""Appends that repeat an id neither lose nor misorder messages.

The rule (``stores/integrity.py``, checked inside every store's write transaction):

* a message whose id the session *holds now*, with the role and text it was first
  appended with, is a retried request: skipped, and the message after it in the append
  takes its place (the end, not the old copy's place);
* an id given twice in one append, an id of a message no longer in the state (deleted,
  cleared, reverted), or an id held with other text is renewed under
  ``renew_taken_ids=True`` (what ``add_messages`` passes: every message is stored) and
  otherwise refused whole (``InvalidInputError``, nothing written).

Each case runs on the in-memory, SQLite and PostgreSQL stores (the last skipped loudly
without ``CG_TEST_POSTGRES_DSN``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from context_gatekeeper import Delete, Transcript
from context_gatekeeper.errors import InvalidInputError
from context_gatekeeper.records.messages import Message
from context_gatekeeper.records.operations import AT_END
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from langchain_gatekeeper import GatekeeperChatMessageHistory
from pg_support import drop_run_tables, postgres_dsn, prefix_for
from context_gatekeeper.testing.store_builders import append, message, snapshot


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens handles on one fresh storage of each kind; closes them afterwards."""
    handles: list[Store] = []
    shared = InMemoryStore()

    def open_() -> Store:
        if request.param == "memory":
            return shared
        if request.param == "sqlite":
            handles.append(SQLiteStore(tmp_path / "store.db"))
        else:
            from context_gatekeeper.stores import PostgresStore

            handles.append(PostgresStore(postgres_dsn(), table_prefix=prefix_for(tmp_path)))
        return handles[-1]

    yield open_
    for handle in handles:
        handle.close()


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


@pytest.fixture
def store(open_store: Callable[[], Store]) -> Store:
    return open_store()


def texts(history: GatekeeperChatMessageHistory) -> list[str]:
    return [m.text for m in history.messages]


# -- a retry inside a longer append ------------------------------------------------------------


def test_a_message_after_a_retried_one_goes_to_the_end(store: Store) -> None:
    """The new answer followed the old copy of the repeated question."""
    history = GatekeeperChatMessageHistory("s", store=store)
    history.add_messages([HumanMessage("yes", id="q1"), AIMessage("first answer", id="a1")])
    history.add_messages([HumanMessage("and then?", id="q2"), AIMessage("second answer", id="a2")])
    history.add_messages([HumanMessage("yes", id="q1"), AIMessage("third answer", id="a3")])
    assert texts(history) == ["yes", "first answer", "and then?", "second answer", "third answer"]
    assert history.message_ids() == ["q1", "a1", "q2", "a2", "a3"]  # the retried q1 is not stored again


def test_the_store_anchors_what_follows_a_retry_where_the_retry_would_have_gone(store: Store) -> None:
    store.commit("s", append(message("q1"), message("a1", "assistant"), after=AT_END), expected_head=None)
    store.commit("s", append(message("q2"), message("a2", "assistant"), after=AT_END), expected_head=None)
    later = append(message("q1"), message("a3", "assistant"), message("a4", "assistant"), after=AT_END)
    stored = store.commit("s", later, expected_head=None)
    assert [(c.message.id, c.after) for c in stored.changes] == [("a3", AT_END), ("a4", "a3")]
    again = append(message("q1"), message("a1", "assistant"), message("a5", "assistant"), after=AT_END)
    assert [(c.message.id, c.after) for c in store.commit("s", again, expected_head=None).changes] == [("a5", AT_END)]
    new = append(message("n1"), message("q2"), message("n2", "assistant"), after=AT_END)  # a retry put after n1
    assert [(c.message.id, c.after) for c in store.commit("s", new, expected_head=None).changes] == [
        ("n1", AT_END),
        ("n2", "n1"),
    ]
    assert [m.id for m in Transcript("s", store=store).messages] == ["q1", "a1", "q2", "a2", "a3", "a4", "a5", "n1", "n2"]


def test_a_retried_answer_to_a_held_question_is_followed_at_its_stored_copy(store: Store) -> None:
    """An answer put after a question the session held: repeating the stored answer keeps the
    new one after it, not between the question and its first answer."""
    store.commit("s", append(message("q"), after=AT_END), expected_head=None)
    store.commit("s", append(message("a1", "assistant"), after="q"), expected_head=None)
    store.commit("s", append(message("meanwhile"), after=AT_END), expected_head=None)
    stored = store.commit("s", append(message("a1", "assistant"), message("a2", "assistant"), after="q"), expected_head=None)
    assert [(c.message.id, c.after) for c in stored.changes] == [("a2", "a1")]
    assert [m.id for m in Transcript("s", store=store).messages] == ["q", "a1", "a2", "meanwhile"]


def test_a_whole_retried_append_is_still_a_no_op(store: Store) -> None:
    history = GatekeeperChatMessageHistory("s", store=store)
    batch = [HumanMessage("hi", id="q1"), AIMessage("hello", id="a1")]
    history.add_messages(batch)
    before = snapshot(store, "s")
    history.add_messages(batch)
    assert snapshot(store, "s") == before
    assert history.messages == batch


# -- one id twice in one append ----------------------------------------------------------------


def test_an_id_twice_in_one_batch_stores_both_messages(store: Store) -> None:
    """InMemoryChatMessageHistory stores both; the second copy gets a fresh id."""
    history = GatekeeperChatMessageHistory("s", store=store)
    history.add_messages([HumanMessage("yes", id="x"), HumanMessage("yes", id="x"), AIMessage("ok", id="y")])
    assert texts(history) == ["yes", "yes", "ok"]
    ids = history.message_ids()
    assert ids[0] == "x" and ids[1] not in ("x", "y") and ids[2] == "y"
    assert [m.id for m in history.messages] == ids
    history.add_messages([HumanMessage("one", id="z"), AIMessage("two", id="z")])  # other text, same id
    assert texts(history)[-2:] == ["one", "two"] and history.message_ids()[-2] == "z"


def test_an_id_twice_in_one_append_is_refused_whole_without_renew_taken_ids(store: Store) -> None:
    transcript = Transcript("s", store=store)
    transcript.append(user="before")
    before = snapshot(store, "s")
    for second in ("same", "other"):
        with pytest.raises(InvalidInputError, match="'x' appears twice in this append.*renew_taken_ids=True"):
            transcript.append(messages=[Message("x", "user", "same"), Message("x", "user", second)])
        assert snapshot(store, "s") == before
    transcript.append(messages=[Message("x", "user", "same"), Message("x", "user", "same")], renew_taken_ids=True)
    assert [m.content for m in transcript.messages] == ["before", "same", "same"]


# -- an id of a message no longer in the state -------------------------------------------------


@pytest.mark.parametrize("remove", ["delete", "clear", "revert"])
def test_a_message_re_added_after_it_was_removed_is_appended(store: Store, remove: str) -> None:
    """A message re-added after deletion was silently dropped."""
    history = GatekeeperChatMessageHistory("s", store=store)
    history.add_messages([HumanMessage("earlier", id="e")])
    history.add_messages([HumanMessage("yes", id="x"), AIMessage("ok", id="y")])
    {"delete": lambda: history.apply([Delete("x"), Delete("y")]), "clear": history.clear, "revert": lambda: history.revert(1)}[remove]()
    history.add_messages([HumanMessage("yes", id="x"), AIMessage("ok", id="y")])
    kept = ["earlier"] if remove != "clear" else []
    assert texts(history) == [*kept, "yes", "ok"]
    ids = history.message_ids()
    assert "x" not in ids and "y" not in ids  # ids are never reused: both came back under fresh ids
    assert len(Transcript("s", store=store).record()) == 5  # the removed copies stay in the record


def test_re_adding_a_removed_message_without_renew_taken_ids_is_refused_loudly(store: Store) -> None:
    transcript = Transcript("s", store=store)
    transcript.append(messages=[Message("x", "user", "yes")])
    transcript.apply([Delete("x")])
    before = snapshot(store, "s")
    with pytest.raises(InvalidInputError, match="'x' was used .* no longer in it"):
        transcript.append(messages=[Message("x", "user", "yes")])
    assert snapshot(store, "s") == before
    revision = transcript.append(messages=[Message("x", "user", "yes"), Message("y", "assistant", "ok")], renew_taken_ids=True)
    fresh = revision.added[0].id
    assert fresh != "x" and revision.changes[1].after == fresh
    assert [(m.id, m.content) for m in transcript.messages] == [(fresh, "yes"), ("y", "ok")]


def test_async_add_messages_follows_the_same_rule(store: Store) -> None:
    history = GatekeeperChatMessageHistory("s", store=store)

    async def scenario() -> list[str]:
        await history.aadd_messages([HumanMessage("yes", id="q1"), AIMessage("first", id="a1")])
        await history.aadd_messages([HumanMessage("next", id="q2")])
        await history.aadd_messages([HumanMessage("yes", id="q1"), HumanMessage("yes", id="q1"), AIMessage("last", id="a3")])
        return [m.text for m in await history.aget_messages()]

    assert asyncio.run(scenario()) == ["yes", "first", "next", "yes", "last"]
