"""Review of issue #11: a store checks a revision's *content*, not only its ids.

Inside the committing transaction every store (in memory, SQLite, PostgreSQL) refuses,
with :class:`InvalidRevisionError` naming the session and writing nothing:

* a change whose ``before`` is not the role and text the store holds for the message
  (undoing it would restore text that never existed), and a removal carrying other text;
* a revision of an unknown kind;
* an append after a message the session never held (it used to land at the end).

``GatekeeperMemory.from_dict(data, store=...)`` on a session the store already holds
compares the revisions' changes too, and refuses other text under the same shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from context_gatekeeper import Transcript
from context_gatekeeper.errors import InvalidInputError, InvalidRevisionError
from context_gatekeeper.transcripts.messages import Message
from context_gatekeeper.transcripts.operations import AT_END, Change, Put, Remove
from context_gatekeeper.transcripts.revisions import Revision
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from pg_support import drop_run_tables, postgres_dsn, prefix_for
from store_conformance import StoreHandles, append, message

S = "s"


def revision(kind: str, *changes: Any) -> Revision:
    return Revision(number=0, parent=0, kind=kind, changes=tuple(changes))  # type: ignore[arg-type]


def raw(store: Store, session: str) -> Any:
    """Every stored byte of a session: its revision rows and its id-index rows, as stored."""
    if isinstance(store, InMemoryStore):
        return (
            [r.to_dict() for r in store._logs.get(session, [])],  # type: ignore[attr-defined]
            dict(store._index.get(session, {})),  # type: ignore[attr-defined]
        )
    if isinstance(store, SQLiteStore):
        with store._connection() as conn:  # type: ignore[attr-defined]
            revisions = conn.execute("SELECT * FROM revisions WHERE session_id = ? ORDER BY number", (session,)).fetchall()
            ids = conn.execute("SELECT * FROM message_ids WHERE session_id = ? ORDER BY message_id", (session,)).fetchall()
        return revisions, ids
    from psycopg import sql

    names = store._names  # type: ignore[attr-defined]
    key = store._key(session)[0]  # type: ignore[attr-defined]
    with store._connection() as conn:  # type: ignore[attr-defined]
        revisions = conn.execute(
            sql.SQL("SELECT * FROM {} WHERE session_key = %s ORDER BY number").format(names["revisions"]), (key,)
        ).fetchall()
        ids = conn.execute(
            sql.SQL("SELECT * FROM {} WHERE session_key = %s ORDER BY message_id").format(names["ids"]), (key,)
        ).fetchall()
    return revisions, ids


def refused(store: Store, bad: Revision, match: str | None = None) -> InvalidRevisionError:
    """Commit ``bad`` at the head: it must be refused, naming the session, and change no stored byte."""
    before = raw(store, S)
    with pytest.raises(InvalidRevisionError, match=match) as caught:
        store.commit(S, bad, expected_head=store.head(S))
    assert f"session {S!r}" in str(caught.value) and "nothing was written" in str(caught.value)
    assert raw(store, S) == before
    return caught.value


def started(store: Store) -> tuple[Message, Message]:
    """A session holding a user question and its answer; the two messages."""
    first = store.commit(S, append(message("u1", "user", "stored question"), message("a1", "assistant", "answer")), expected_head=None)
    return first.added[0], first.added[1]


class ContentChecks(StoreHandles):
    """Subclass and define :meth:`make`."""

    # -- a change's ``before`` ------------------------------------------------------------
    @pytest.mark.parametrize(
        "wrong",
        [
            pytest.param({"content": "WRONG BEFORE"}, id="other-text"),
            pytest.param({"role": "assistant"}, id="other-role"),
        ],
    )
    def test_a_change_whose_before_is_not_the_stored_message_is_refused(self, store: Store, wrong: dict) -> None:
        user, _ = started(store)
        fake = Message(**{"id": user.id, "role": user.role, "content": user.content, **wrong})
        error = refused(store, revision("edit", Change(fake, Message(user.id, "user", "y"))))
        assert repr(user.id) in str(error) and "Reload the transcript" in str(error)
        # the right ``before`` still commits, and undo restores the text that was stored
        transcript = Transcript(S, store=store)
        store.commit(S, revision("edit", Change(user, Message(user.id, "user", "y"))), expected_head=store.head(S))
        transcript.undo()
        assert [m.content for m in Transcript(S, store=store).messages] == ["stored question", "answer"]

    def test_a_change_built_on_text_edited_since_is_refused(self, store: Store) -> None:
        user, _ = started(store)
        edited = store.commit(S, revision("edit", Change(user, user.revised("second text", 0))), expected_head=1)
        now = edited.changes[0].after
        refused(store, revision("edit", Change(user, user.revised("third text", 0))))  # the first text: stale
        refused(store, revision("apply", Remove(user, None)))
        store.commit(S, revision("edit", Change(now, now.revised("third text", 0))), expected_head=2)
        assert [m.content for m in Transcript(S, store=store).messages] == ["third text", "answer"]

    # -- a removal's message --------------------------------------------------------------
    @pytest.mark.parametrize("kind", ["apply", "set", "clear", "edit"])
    def test_a_remove_carrying_other_text_is_refused(self, store: Store, kind: str) -> None:
        user, answer = started(store)
        wrong = Message(answer.id, answer.role, "never the answer")
        error = refused(store, revision(kind, Remove(user, None), Remove(wrong, None)))
        assert repr(answer.id) in str(error)
        refused(store, revision(kind, Remove(Message(user.id, "system", user.content), None)))  # other role
        store.commit(S, revision(kind, Remove(user, None), Remove(answer, user.id)), expected_head=1)
        assert list(Transcript(S, store=store).messages) == []

    def test_an_undo_cannot_remove_a_message_under_other_text(self, store: Store) -> None:
        user, answer = started(store)
        refused(store, revision("undo", Remove(Message(answer.id, "assistant", "other"), user.id)))

    # -- kinds and anchors ----------------------------------------------------------------
    @pytest.mark.parametrize("kind", ["bogus", "", "APPEND"])
    def test_a_revision_of_unknown_kind_is_refused(self, store: Store, kind: str) -> None:
        user, _ = started(store)
        error = refused(store, revision(kind, Change(user, user.revised("y", 0))), match="unknown kind")
        assert repr(kind) in str(error)
        refused(store, revision(kind, Put(message("new"), AT_END)), match="unknown kind")

    def test_an_append_after_a_message_never_held_is_refused(self, store: Store) -> None:
        started(store)
        before = raw(store, S)
        for anchored in (
            append(message("late", "assistant"), after="never-there"),
            append(message("q", "user"), message("late", "assistant"), after="never-there"),
        ):
            with pytest.raises(InvalidRevisionError, match="never held") as caught:
                store.commit(S, anchored, expected_head=None)
            assert f"session {S!r}" in str(caught.value) and "'never-there'" in str(caught.value)
            assert raw(store, S) == before
        # anchors on a held message, on one put earlier in the same append, or none still commit
        store.commit(S, append(message("u2"), message("a2", "assistant"), after="a1"), expected_head=None)
        store.commit(S, append(message("u3"), after=AT_END), expected_head=None)
        assert [m.id for m in Transcript(S, store=store).messages] == ["u1", "a1", "u2", "a2", "u3"]

    # -- the index rebuilt by truncate knows the current text -----------------------------
    def test_the_rebuilt_index_checks_the_current_text(self, store: Store) -> None:
        user, answer = started(store)
        edited = store.commit(S, revision("edit", Change(user, user.revised("second text", 0))), expected_head=1)
        store.commit(S, revision("apply", Remove(answer, user.id)), expected_head=2)
        store.commit(S, append(message("extra")), expected_head=None)
        assert store.truncate(S, 3) == 1
        now = edited.changes[0].after
        refused(store, revision("edit", Change(user, user.revised("third", 0))))
        refused(store, revision("undo", Put(Message(answer.id, "assistant", "answer"), user.id), Remove(user, None)))
        store.commit(S, revision("undo", Put(answer, user.id)), expected_head=3)
        store.commit(S, revision("edit", Change(now, now.revised("third", 0))), expected_head=4)
        assert [m.content for m in Transcript(S, store=store).messages] == ["third", "answer"]


class TestInMemory(ContentChecks):
    persistent = False

    def make(self, where: Path) -> Store:
        return InMemoryStore()


class TestSQLite(ContentChecks):
    def make(self, where: Path) -> Store:
        return SQLiteStore(where / "store.db")

    def test_index_rows_of_older_versions_do_not_refuse_changes_to_edited_messages(self, store: Store) -> None:
        """Rows written before the current digest was kept hold only the first one: their
        current text is unknown, so a change is not refused for it (compatibility)."""
        user, _ = started(store)
        edited = store.commit(S, revision("edit", Change(user, user.revised("second", 0))), expected_head=1)
        with store._connection() as conn:  # type: ignore[attr-defined]
            conn.execute("UPDATE message_ids SET digest = substr(digest, 1, 32)")
        now = edited.changes[0].after
        store.commit(S, revision("edit", Change(now, now.revised("third", 0))), expected_head=2)
        refused(store, revision("edit", Change(now, now.revised("fourth", 0))))  # recorded again: checked


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_afterwards() -> Iterator[None]:
    yield
    drop_run_tables()


class TestPostgres(ContentChecks):
    def make(self, where: Path) -> Store:
        from context_gatekeeper.stores import PostgresStore

        return PostgresStore(postgres_dsn(), table_prefix=prefix_for(where))


# -- GatekeeperMemory.from_dict on a session the store already holds -------------------------
@pytest.fixture(params=["memory", "sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield InMemoryStore()
        return
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "memory.db")
    else:
        from context_gatekeeper.stores import PostgresStore

        store = PostgresStore(postgres_dsn(), table_prefix=prefix_for(tmp_path))
    try:
        yield store
    finally:
        store.close()


def exported(store: Store | None, question: str, answer: str) -> tuple[Any, dict[str, Any]]:
    from llama_index.core.llms import ChatMessage

    from llamaindex_gatekeeper import GatekeeperMemory

    memory = GatekeeperMemory.from_defaults(session_id="imported", **({"store": store} if store else {}))
    memory.put_messages([ChatMessage(role="user", content=question), ChatMessage(role="assistant", content=answer)])
    memory.put_messages([ChatMessage(role="user", content="second"), ChatMessage(role="assistant", content="reply")])
    return memory, json.loads(json.dumps(memory.to_dict()))


def test_from_dict_refuses_a_session_with_the_same_shape_but_other_text(target: Store) -> None:
    from llamaindex_gatekeeper import GatekeeperMemory

    held, own = exported(target, "We went to Ireland.", "Ireland, noted.")
    _, other = exported(None, "We went to Iceland.", "Iceland, noted.")
    assert [(r["number"], r["kind"]) for r in own["revisions"]] == [(r["number"], r["kind"]) for r in other["revisions"]]
    before = raw(target, "imported")
    with pytest.raises(InvalidInputError, match=r"revision 1 \(append\)") as caught:
        GatekeeperMemory.from_dict(other, store=target)
    assert isinstance(caught.value, ValueError) and "'imported'" in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert raw(target, "imported") == before
    # a later revision differing is named, and a log longer or shorter than the store's is refused
    other["revisions"][0] = own["revisions"][0]
    with pytest.raises(InvalidInputError, match=r"revision 2 \(append\)"):
        GatekeeperMemory.from_dict(other, store=target)
    with pytest.raises(InvalidInputError, match="revision 2 is only in the store"):
        GatekeeperMemory.from_dict({**own, "revisions": own["revisions"][:1]}, store=target)
    assert raw(target, "imported") == before
    # the same log is attached as it is
    attached = GatekeeperMemory.from_dict(own, store=target)
    assert [str(m.content) for m in attached.get_all()] == [str(m.content) for m in held.get_all()]
    assert raw(target, "imported") == before
