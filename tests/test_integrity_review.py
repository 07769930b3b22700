"""Regressions from the review of the issue #11 work: sessions written by older versions
still undo, an answer whose open question this object deleted is refused with a way
out, returned and new messages have metadata of their own, ``asnapshot``."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from context_gatekeeper import Delete, Message, Replace, Transcript
from context_gatekeeper.errors import HistoryError, InvalidRevisionError
from context_gatekeeper.records.revisions import Revision, undo_stacks
from context_gatekeeper.stores import InMemoryStore, SQLiteStore

# -- 1: no-op rows and their undo/redo rows, as the code of commit 01e140a wrote them ------
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


# -- 2: an answer whose open question this object deleted ---------------------------------
def no_two_assistants_in_a_row(t: Transcript) -> bool:
    roles = [m.role for m in t.messages]
    return all(not (a == b == "assistant") for a, b in zip(roles, roles[1:]))


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


# -- 3: metadata of new and returned messages -------------------------------------------
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
