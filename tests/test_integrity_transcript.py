"""Issue #11 through the Transcript: sessions poisoned by older versions are migrated and
recovered, the end marker never collides with an id, no-ops record nothing, an answer
never loses its question, record/set/append validate, returned objects are copies."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from context_gatekeeper import Delete, InsertAfter, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply
from context_gatekeeper.errors import (
    CorruptLogError,
    GatekeeperError,
    HistoryError,
    InvalidInputError,
    InvalidRevisionError,
    StaleHeadError,
)
from context_gatekeeper.stores import InMemoryStore, SQLiteStore
from context_gatekeeper.testing import ScriptedModel
from context_gatekeeper.testing.store_builders import run_together

V1_SCHEMA = """
CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);
INSERT INTO schema_migrations VALUES (1, 'revisions', 0);
CREATE TABLE revisions (
    session_id TEXT NOT NULL, number INTEGER NOT NULL CHECK (number >= 1), parent INTEGER NOT NULL,
    kind TEXT NOT NULL, instruction TEXT, model TEXT, created_at REAL NOT NULL, base INTEGER,
    target INTEGER, changes TEXT NOT NULL, PRIMARY KEY (session_id, number));
"""


def put(id: str, role: str = "user", after: str | None = "<end>", content: str | None = None) -> dict:
    """A put as the version before the fix wrote it (the end was the string "<end>")."""
    return {"op": "put", "message": {"id": id, "role": role, "content": content or f"text of {id}"}, "after": after}


def old_database(path: Path, sessions: dict[str, list[tuple[str, list | str]]]) -> Path:
    """An SQLite file at schema version 1, as the version before the fix left it."""
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_SCHEMA)
        for session, log in sessions.items():
            for number, (kind, changes) in enumerate(log, 1):
                text = changes if isinstance(changes, str) else json.dumps(changes)
                conn.execute(
                    "INSERT INTO revisions VALUES (?, ?, ?, ?, NULL, NULL, ?, ?, NULL, ?)",
                    (session, number, number - 1, kind, float(number), number - 1, text),
                )
    return path


# -- item 1: migration, load failures, recovery ----------------------------------------
def test_the_migration_indexes_old_sessions_and_a_poisoned_one_is_recovered(tmp_path: Path) -> None:
    path = old_database(
        tmp_path / "old.db",
        {
            "ok": [("append", [put("u1"), put("a1", "assistant", "u1")]), ("append", [put("u2")])],
            "poisoned": [("append", [put("same")]), ("append", [put("same")]), ("append", [put("later")])],
        },
    )
    store = SQLiteStore(path)
    assert [v for v, _ in store.applied_migrations()] == [1, 2, 3, 4]  # 3: saved vectors, 4: the hash chain
    ok = Transcript("ok", store=store)
    assert [m.id for m in ok.messages] == ["u1", "a1", "u2"]
    with pytest.raises(InvalidInputError):  # the backfilled index knows u1
        ok.append(messages=[{"id": "u1", "role": "user", "content": "something else"}])
    with pytest.raises(CorruptLogError) as caught:
        Transcript("poisoned", store=store)
    assert (caught.value.session_id, caught.value.revision) == ("poisoned", 2)
    assert "'poisoned'" in str(caught.value) and "revision 2" in str(caught.value)
    assert store.truncate("poisoned", caught.value.revision - 1) == 2
    recovered = Transcript("poisoned", store=store)
    assert [m.id for m in recovered.messages] == ["same"]
    recovered.append(user="works again")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT number FROM set_aside_revisions ORDER BY number").fetchall() == [(2,), (3,)]


def test_a_row_with_bad_json_names_its_session_and_revision_and_is_recovered(tmp_path: Path) -> None:
    path = old_database(tmp_path / "old.db", {"s": [("append", [put("u1")]), ("append", "{not json"), ("append", [put("u3")])]})
    store = SQLiteStore(path)
    with pytest.raises(CorruptLogError, match=r"session 's': revision 2") as caught:
        Transcript("s", store=store)
    assert not isinstance(caught.value, json.JSONDecodeError)
    store.truncate("s", 1)
    assert [m.id for m in Transcript("s", store=store).messages] == ["u1"]


def test_a_poisoned_session_can_still_be_purged(tmp_path: Path) -> None:
    path = old_database(tmp_path / "old.db", {"p": [("append", [put("x")]), ("append", [put("x")])]})
    store = SQLiteStore(path)
    store.purge("p")
    t = Transcript("p", store=store)
    t.append(messages=[{"id": "x", "role": "user", "content": "fresh"}])
    assert [m.content for m in t.messages] == ["fresh"]


# -- item 7: the end marker ---------------------------------------------------------
def test_an_id_named_like_the_old_end_marker_keeps_its_place_through_delete_and_undo() -> None:
    t = Transcript("end")
    t.append(messages=[{"id": "<end>", "role": "user", "content": "first question"}])
    t.append(assistant="first answer")  # answers "<end>"
    t.append(user="second question", assistant="second answer")
    order = [m.content for m in t.messages]
    t.apply([Delete(t.messages[1].id)])
    t.undo()
    assert [m.content for m in t.messages] == order
    reopened = Transcript("end", store=t.store)
    assert [m.content for m in reopened.messages] == order


def test_stored_rows_with_the_old_marker_still_load(tmp_path: Path) -> None:
    """Appends used "<end>" for the end; elsewhere the string was an id, which stays put."""
    path = old_database(
        tmp_path / "old.db",
        {
            "s": [
                ("append", [put("<end>"), put("a1", "assistant", "<end>")]),
                ("append", [put("u2"), put("a2", "assistant", "u2")]),
                ("apply", [{"op": "remove", "message": {"id": "a1", "role": "assistant", "content": "text of a1"}, "after": "<end>"}]),
                ("undo", [put("a1", "assistant", "<end>")]),
            ]
        },
    )
    t = Transcript("s", store=SQLiteStore(path))
    assert [m.id for m in t.messages] == ["<end>", "a1", "u2", "a2"]


# -- item 6: no-op revisions ----------------------------------------------------------
def test_no_op_calls_record_nothing_and_never_consume_an_undo() -> None:
    t = Transcript("noop")
    t.append(user="What was Ireland's GDP?", assistant="About 500 billion.")
    t.apply([Replace(t.messages[1].id, "About 504 billion.")])
    head = t.head
    user = t.messages[0]
    model = ScriptedModel(['{"operations": []}'])
    results = [t.apply([]), t.set(list(t.messages)), t.apply([Replace(user.id, user.content)])]
    try:
        results.append(t.edit("change nothing", model=model))
    except GatekeeperError:
        pass  # refusing an empty edit is fine too; recording it is not
    for result in results:
        assert (result.number, result.changes) == (head, ())
    assert t.head == head
    t.undo()
    assert t.messages[1].content == "About 500 billion."


def test_no_op_rows_written_by_older_versions_are_skipped_by_undo(tmp_path: Path) -> None:
    original = {"id": "u1", "role": "user", "content": "text of u1"}
    rewritten = {**original, "content": "changed", "origin": "edited", "derived_from": ["u1"], "revision": 2}
    path = old_database(
        tmp_path / "old.db",
        {"s": [("append", [put("u1")]), ("apply", [{"op": "change", "before": original, "after": rewritten}]), ("apply", [])]},
    )
    t = Transcript("s", store=SQLiteStore(path))  # the migration chains the three rows, no-op included
    assert t.head == 3 and t.messages[0].content == "changed"
    t.undo()
    assert t.messages[0].content == "text of u1"
    with pytest.raises(HistoryError):
        t.undo()


# -- item 8: an answer never loses its question ------------------------------------------
def no_two_assistants_in_a_row(t: Transcript) -> bool:
    roles = [m.role for m in t.messages]
    return all(not (a == b == "assistant") for a, b in zip(roles, roles[1:]))


def test_an_edit_deleting_the_open_question_is_stale_once_its_answer_lands() -> None:
    store = InMemoryStore()
    chat, editor = Transcript("q", store=store), Transcript("q", store=store)
    chat.append(user="Hi", assistant="Hello.")
    chat.append(user="What was Ireland's GDP?")  # open: the answer is being generated
    question = editor.messages[-1].id
    model = ScriptedModel([ideal_patch_reply(list(editor.messages), [Delete(question)])])
    proposal = editor.edit("drop the last question", model=model, preview=True, allow_large_deletion=True)
    chat.append(assistant="About 500 billion.")
    with pytest.raises(StaleHeadError):
        editor.commit(proposal)
    assert no_two_assistants_in_a_row(chat)


def test_an_answer_whose_question_was_deleted_meanwhile_is_refused() -> None:
    store = InMemoryStore()
    chat, editor = Transcript("q", store=store), Transcript("q", store=store)
    chat.append(user="Hi", assistant="Hello.")
    chat.append(user="What was Ireland's GDP?")
    editor.apply([Delete(editor.messages[-1].id)])
    head = store.head("q")
    with pytest.raises(InvalidRevisionError, match="deleted meanwhile"):
        chat.append(assistant="About 500 billion.")
    assert store.head("q") == head and no_two_assistants_in_a_row(chat)


# -- item 9: record, set, validation ----------------------------------------------------
def test_record_keeps_appended_messages_of_every_origin_once() -> None:
    t = Transcript("r")
    t.append(messages=[{"role": "user", "content": "imported", "origin": "edited"}])
    t.append(user="plain")
    t.apply([InsertAfter(None, "user", "inserted by an edit")])
    assert [m.content for m in t.record()] == ["imported", "plain"]


def test_set_cannot_reuse_a_deleted_id() -> None:
    t = Transcript("s")
    t.append(messages=[{"id": "x", "role": "user", "content": "one"}])
    t.apply([Delete("x")])
    head = t.head
    with pytest.raises(InvalidInputError, match="reuse"):
        t.set([{"id": "x", "role": "user", "content": "again"}])
    assert t.head == head


@pytest.mark.parametrize(
    "bad", [{"origin": "bogus"}, {"parts": "abc"}, {"metadata": "abc"}, {"derived_from": "abc"}, {"role": "wizard"}]
)
def test_append_validates_origin_parts_and_metadata(bad: dict) -> None:
    t = Transcript("v")
    with pytest.raises(InvalidInputError):
        t.append(messages=[{"role": "user", "content": "hi", **bad}])
    assert t.head == 0


# -- item 5: returned objects are copies -------------------------------------------------
def test_mutating_returned_messages_never_changes_history() -> None:
    t = Transcript("m")
    t.append(messages=[{"role": "user", "content": "hi", "metadata": {"tags": ["a"]}, "parts": [{"text": "hi"}]}])
    t.append(user="plain")
    expected = [m.to_dict() for m in t.messages]
    first = t.messages[0]
    first.metadata["tags"].append("x")
    first.parts[0]["text"] = "changed"
    t.record()[0].metadata["tags"].append("y")
    t.history()[0].added[0].parts[0]["text"] = "changed"
    t.snapshot(1)[0].metadata["tags"].append("z")
    t.diff(0).messages[0].after.metadata["tags"].append("w")
    t.messages[1].metadata["new"] = 1  # a copy: allowed, changes nothing
    assert [m.to_dict() for m in t.messages] == expected
    assert [m.to_dict() for m in Transcript("m", store=t.store).messages] == expected


def test_langchain_additional_kwargs_are_copies() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_gatekeeper import GatekeeperChatMessageHistory

    history = GatekeeperChatMessageHistory("lc")
    sent = AIMessage("ok", additional_kwargs={"extra": {"k": [1]}})
    history.add_messages([HumanMessage("hi"), sent])
    sent.additional_kwargs["extra"]["k"].append("sent")
    history.messages[1].additional_kwargs["extra"]["k"].append("read")
    assert history.messages[1].additional_kwargs == {"extra": {"k": [1]}}


# -- item 11 -------------------------------------------------------------------------------
def test_a_lone_surrogate_session_id_is_refused_on_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    with pytest.raises(InvalidInputError, match="surrogate"):
        Transcript("bad \ud800 id", store=store)
    with pytest.raises(InvalidInputError):
        store.head("\udfff")
    assert store.sessions() == []


def test_langchain_histories_retrying_one_request_add_it_once(tmp_path: Path) -> None:
    """Issue #11 item 1 through LangChain: a retried ``add_messages`` with message ids."""
    from langchain_core.messages import HumanMessage

    from langchain_gatekeeper import GatekeeperChatMessageHistory

    db = tmp_path / "lc.db"
    histories = [GatekeeperChatMessageHistory("lc", store=db) for _ in range(4)]
    errors = run_together(*(lambda h=h: h.add_messages([HumanMessage("hi", id="same")]) for h in histories))
    assert errors == []
    fresh = GatekeeperChatMessageHistory("lc", store=db)
    assert [(m.id, m.content) for m in fresh.messages] == [("same", "hi")]
    for history in [*histories, fresh]:
        history.close()
