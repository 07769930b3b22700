"""The Transcript's integrity: sessions poisoned or written by older versions are migrated,
recovered and still undo and redo, the end marker never collides with an id, no-ops record
nothing, an answer never loses its question (a lost one is refused with a way out),
record/set/append validate, returned and new messages are copies with metadata of their
own, and ``asnapshot`` matches ``snapshot``."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from context_gatekeeper import Delete, InsertAfter, Message, Replace, Transcript
from context_gatekeeper.editing.format import ideal_patch_reply
from context_gatekeeper.errors import (
    CorruptLogError,
    GatekeeperError,
    HistoryError,
    InvalidInputError,
    InvalidRevisionError,
    StaleHeadError,
)
from context_gatekeeper.records.revisions import Revision, undo_stacks
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


# -- migration, load failures, recovery ----------------------------------------
def test_the_migration_indexes_old_sessions_and_a_poisoned_one_is_recovered(tmp_path: Path) -> None:
    path = old_database(
        tmp_path / "old.db",
        {
            "ok": [("append", [put("u1"), put("a1", "assistant", "u1")]), ("append", [put("u2")])],
            "poisoned": [("append", [put("same")]), ("append", [put("same")]), ("append", [put("later")])],
        },
    )
    store = SQLiteStore(path)
    assert [v for v, _ in store.applied_migrations()] == [1, 2, 3, 4, 5]  # 3: saved vectors, 4-5: the hash chain
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


# -- the end marker ---------------------------------------------------------
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


# -- no-op revisions ----------------------------------------------------------
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


# -- an answer never loses its question ------------------------------------------
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


# -- record, set, validation ----------------------------------------------------
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


# -- returned objects are copies -------------------------------------------------
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


# -- session ids, retried requests --------------------------------------------------------
def test_a_lone_surrogate_session_id_is_refused_on_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    with pytest.raises(InvalidInputError, match="surrogate"):
        Transcript("bad \ud800 id", store=store)
    with pytest.raises(InvalidInputError):
        store.head("\udfff")
    assert store.sessions() == []


def test_langchain_histories_retrying_one_request_add_it_once(tmp_path: Path) -> None:
    """Through LangChain: a retried ``add_messages`` with message ids adds each message once."""
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


# -- no-op rows and their undo/redo rows, as the code of commit 01e140a wrote them ------
_U, _A = "7782d2771ad7", "083992a7ef47"
_APPEND = [
    {"op": "put", "message": {"id": _U, "role": "user", "content": "a"}, "after": "<end>"},
    {"op": "put", "message": {"id": _A, "role": "assistant", "content": "b"}, "after": _U},
]
_REPLACE = [
    {
        "op": "change",
        "before": {"id": _U, "role": "user", "content": "a", "revision": 1},
        "after": {"id": _U, "role": "user", "content": "A", "origin": "edited", "derived_from": [_U]},
    }
]
# (number, kind, target, changes) per session, exactly as 01e140a stored them for
#   noop: t.append(user="a", assistant="b"); t.apply([]); t.apply([Replace(u, "A")]); t.apply([]); t.undo()
#   redo: t.append(user="a", assistant="b"); t.apply([Replace(u, "A")]); t.apply([]); t.undo(); t.redo()
OLD_SESSIONS = {
    "noop": [(1, "append", None, _APPEND), (2, "apply", None, []), (3, "apply", None, _REPLACE),
             (4, "apply", None, []), (5, "undo", 4, [])],
    "redo": [(1, "append", None, _APPEND), (2, "apply", None, _REPLACE), (3, "apply", None, []),
             (4, "undo", 3, []), (5, "redo", 3, [])],
}


def write_old_database(path: Path) -> None:
    """A SQLite file as the code of commit 01e140a left it (schema version 1, no id index)."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        conn.execute("INSERT INTO schema_migrations VALUES (1, 'revisions', 1.0)")
        conn.execute(
            """CREATE TABLE revisions (
                session_id  TEXT    NOT NULL,
                number      INTEGER NOT NULL CHECK (number >= 1),
                parent      INTEGER NOT NULL,
                kind        TEXT    NOT NULL,
                instruction TEXT,
                model       TEXT,
                created_at  REAL    NOT NULL,
                base        INTEGER,
                target      INTEGER,
                changes     TEXT    NOT NULL,
                PRIMARY KEY (session_id, number)
            )"""
        )
        for session, rows in OLD_SESSIONS.items():
            for number, kind, target, changes in rows:
                conn.execute(
                    "INSERT INTO revisions VALUES (?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?)",
                    (session, number, number - 1, kind, 1000.0 + number, number - 1, target,
                     json.dumps(changes, separators=(",", ":"))),
                )
    conn.close()


def contents(t: Transcript) -> list[str]:
    return [m.content for m in t.messages]


@pytest.mark.parametrize("session", sorted(OLD_SESSIONS))
def test_a_session_with_old_noop_undo_rows_opens_and_undoes_and_redoes(tmp_path: Path, session: str) -> None:
    path = tmp_path / "old.db"
    write_old_database(path)
    store = SQLiteStore(path)
    try:
        t = Transcript(session, store=store)
        assert contents(t) == ["A", "b"]
        undo = t.undo()  # raised ValueError: list.remove(x): x not in list
        assert undo.kind == "undo" and undo.target == (3 if session == "noop" else 2)
        assert contents(t) == ["a", "b"]
        redo = t.redo()
        assert redo.target == undo.target and contents(t) == ["A", "b"]
        t.undo()
        with pytest.raises(HistoryError, match="nothing to undo"):
            t.undo()
        assert contents(Transcript(session, store=store)) == ["a", "b"]
    finally:
        store.close()


def _rev(number: int, kind: str, target: int | None = None, changes: tuple = ()) -> Revision:
    return Revision(number, number - 1, kind, changes, target=target)  # type: ignore[arg-type]


def test_undo_stacks_skips_undo_and_redo_rows_that_acted_on_noops() -> None:
    real = Revision.from_dict(
        {"number": 2, "parent": 1, "kind": "apply", "changes": _REPLACE}
    ).changes
    from context_gatekeeper.records.operations import invert

    back = tuple(invert(real))
    log = [
        _rev(1, "append"),
        _rev(2, "apply", changes=real),
        _rev(3, "undo", 2, back),  # a real undo: redo may re-apply it
        _rev(4, "apply"),  # an old no-op: it no longer discards the redo
        _rev(5, "undo", 4),  # undid that no-op
        _rev(6, "redo", 4),  # and redid it
    ]
    done, undone = undo_stacks(log)
    assert done == [] and [r.number for r in undone] == [3]
    done, undone = undo_stacks(log + [_rev(7, "redo", 2, real)])
    assert done == [2] and undone == []


# -- an answer whose open question this object deleted ---------------------------------
def test_an_answer_after_this_object_deleted_its_open_question_is_refused_with_a_way_out() -> None:
    t = Transcript("q")
    t.append(user="Hi", assistant="Hello.")
    t.append(user="open q")
    t.apply([Delete(t.messages[-1].id)])
    head = t.head
    with pytest.raises(InvalidRevisionError, match=r"deleted meanwhile.*append\(user=") as refused:
        t.append(assistant="About 500 billion.")
    assert "Reload" not in str(refused.value) and "revision 3" in str(refused.value)
    assert t.head == head and no_two_assistants_in_a_row(t)
    # the object works again: the way out the message names succeeds
    t.append(user="What was Ireland's GDP?")
    t.append(assistant="About 500 billion.")
    t.append(user="And 2022?", assistant="More.")
    assert contents(t) == ["Hi", "Hello.", "What was Ireland's GDP?", "About 500 billion.", "And 2022?", "More."]
    assert no_two_assistants_in_a_row(t)


def test_an_answer_whose_question_is_deleted_between_read_and_write_is_refused_with_a_way_out() -> None:
    class DeletesFirst(InMemoryStore):
        """Lets another writer delete the open question just before the answer commits."""

        victim: str | None = None

        def commit(self, session_id, revision, **kwargs):  # type: ignore[no-untyped-def]
            victim, self.victim = self.victim, None
            if victim is not None:
                Transcript(session_id, store=self).apply([Delete(victim)])
            return super().commit(session_id, revision, **kwargs)

    store = DeletesFirst()
    t = Transcript("q", store=store)
    t.append(user="open q")
    store.victim = t.messages[-1].id
    with pytest.raises(InvalidRevisionError, match=r"append\(user="):
        t.append(assistant="late")
    t.append(assistant="now at the end")  # the question is forgotten: no refusal for ever
    assert contents(t) == ["now at the end"]


# -- metadata of new and returned messages -------------------------------------------
def test_a_new_message_has_its_own_mutable_metadata() -> None:
    first, second = Message("i", "user", "x"), Message("j", "user", "y")
    first.metadata["a"] = 1  # worked at 01e140a; raised TypeError (a shared read-only mapping)
    assert first.metadata == {"a": 1} and second.metadata == {}
    assert Message.from_dict({"id": "k", "role": "user", "content": "z"}).metadata == {}


def test_returned_messages_with_empty_metadata_are_mutable_copies() -> None:
    t = Transcript("m")
    t.append(user="plain", assistant="answer")
    t.append(messages=[{"role": "user", "content": "tagged", "metadata": {"n": 1}}])
    expected = [m.to_dict() for m in t.messages]
    for read in (
        lambda: t.messages,
        t.record,
        lambda: t.snapshot(2),
        lambda: [e.after for e in t.diff(0).messages],
        lambda: [m for r in t.history() for m in r.added],
    ):
        for message in read():
            message.metadata["new"] = 1  # allowed, and on a copy
            assert message.metadata["new"] == 1
    assert [m.to_dict() for m in t.messages] == expected
    assert all("new" not in m.metadata for m in t.messages)
    assert [m.to_dict() for m in Transcript("m", store=t.store).messages] == expected


def test_the_writer_holds_metadata_and_parts_as_every_other_reader_reads_them(tmp_path: Path) -> None:
    """What JSON changes (a tuple becomes a list, an int key a str one) is changed for the
    writing object too: two objects on one session serve the same messages, and setting the
    state another object reads records nothing."""
    path = str(tmp_path / "s.db")
    writer = Transcript("s", store=path)
    tuple_metadata = {1: "one", "span": (0, 2), "nested": [{"at": (1, 2)}]}
    appended = writer.append(messages=[
        {"role": "user", "content": "hi", "metadata": tuple_metadata, "parts": [{"type": "text", "span": (0, 2)}]},
        {"role": "assistant", "content": "plain", "metadata": {"n": 1}},
    ])
    as_json = {"1": "one", "span": [0, 2], "nested": [{"at": [1, 2]}]}
    reader = Transcript("s", store=path)
    for messages in (writer.messages, appended.added, reader.messages, writer.snapshot(1)):
        assert dict(messages[0].metadata) == as_json and messages[0].parts == ({"type": "text", "span": [0, 2]},)
    assert writer.messages == reader.messages
    head = writer.head
    writer.set(reader.messages)
    writer.set([Message(m.id, m.role, m.content, parts=m.parts, metadata=tuple_metadata if i == 0 else m.metadata)
                for i, m in enumerate(writer.messages)])  # what the state holds, in Python's own shapes
    assert writer.head == head  # neither is a change
    q = writer.messages[0]
    writer.set([Message(q.id, q.role, q.content, metadata={"span": (5, 6)}), *writer.messages[1:]])
    assert dict(writer.messages[0].metadata) == {"span": [5, 6]} == dict(reader.messages[0].metadata)
    writer.close()
    reader.close()


def test_storable_returns_a_plain_json_message_itself() -> None:
    from context_gatekeeper.records.messages import storable

    plain = Message("p", "user", "hi", parts=({"type": "text", "text": "hi"},), metadata={"a": [1, {"b": None}]})
    assert storable(plain) is plain
    shaped = storable(Message("t", "user", "hi", parts=(("a", 1),), metadata={2: (3,)}))
    assert shaped.parts == (["a", 1],) and shaped.metadata == {"2": [3]}


def test_messages_given_to_a_transcript_stay_the_callers() -> None:
    mine = Message("x1", "user", "hi")
    t = Transcript("g")
    t.append(messages=[mine])
    mine.metadata["later"] = True
    assert t.messages[0].metadata == {}


# -- asnapshot ----------------------------------------------------------------------------
def test_asnapshot_matches_snapshot() -> None:
    t = Transcript("s")
    t.append(user="a", assistant="b")
    t.apply([Replace(t.messages[0].id, "A")])

    async def both() -> None:
        for n in range(t.head + 1):
            assert await t.asnapshot(n) == t.snapshot(n)
        with pytest.raises(HistoryError) as sync_error:
            t.snapshot(9)
        with pytest.raises(HistoryError) as async_error:
            await t.asnapshot(9)
        assert str(async_error.value) == str(sync_error.value)

    asyncio.run(both())


def test_a_reopened_or_caught_up_transcript_refuses_a_deleted_id_too(tmp_path: Path) -> None:
    """The ids a session used are gathered from its log when first needed (a first read
    skips them): a transcript that loaded the log, and one that then read more of it,
    know every id as one that wrote them does."""
    store = SQLiteStore(tmp_path / "ids.db")
    writer = Transcript("s", store=store)
    writer.append(messages=[{"id": "x", "role": "user", "content": "one"}])
    writer.apply([Delete("x")])
    reader = Transcript("s", store=SQLiteStore(tmp_path / "ids.db"))  # loaded from the store
    with pytest.raises(InvalidInputError, match="reuse"):
        reader.set([{"id": "x", "role": "user", "content": "again"}])
    writer.append(messages=[{"id": "y", "role": "user", "content": "two"}])
    writer.apply([Delete("y")])
    with pytest.raises(InvalidInputError, match="reuse"):  # read after the ids were gathered
        reader.set([{"id": "y", "role": "user", "content": "again"}])
    fresh = Transcript("s", store=SQLiteStore(tmp_path / "ids.db"))
    fresh.append(messages=[{"id": "z", "role": "user", "content": "three"}])  # caught up before the ids are read
    with pytest.raises(InvalidInputError, match="reuse"):
        fresh.set([{"id": "x", "role": "user", "content": "again"}])
    assert fresh.set([{"id": "w", "role": "user", "content": "new"}]).changes
