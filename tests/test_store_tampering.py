"""A revision log edited outside the library is detected, named, and recoverable.

Each test builds a session through the library, then changes the database file by hand
(plain sqlite3, as a person with the ``sqlite3`` shell would), and checks that opening the
session raises ``CorruptLogError`` naming the session and the first revision that is not
what was written, that ``store.truncate(session, revision - 1)`` keeps exactly the intact
prefix, and that the session then opens and takes appends again.  The index of message ids
beside the log is not chained; a hand edit of it must never make the library write a
revision that breaks the session.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from context_gatekeeper import CorruptLogError, InvalidInputError, StoreUnavailableError, Transcript
from context_gatekeeper.stores import SQLiteStore
from context_gatekeeper.stores import sqlite as sqlite_module
from context_gatekeeper.testing import ScriptedModel
from context_gatekeeper.testing.store_builders import turn
from context_gatekeeper.stores.chain import chain_text, chained_prefix, genesis, row_digest

TURNS = 300


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A file holding session "s": 300 appends of a question and its answer (600 messages),
    an edit at revision 301 and its undo at 302, and a second session "other"."""
    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    t = Transcript("s", store=store)
    for n in range(TURNS):
        t.append(user=f"question {n}", assistant=f"answer {n}")
    from context_gatekeeper.records.operations import Replace

    t.apply([Replace(t.messages[0].id, "question 0, edited")])
    t.undo()
    Transcript("other", store=store).append(user="elsewhere", assistant="fine")
    store.close()
    return path


def hand_edit(path: Path, *statements: str) -> None:
    """Run SQL on the file outside the library."""
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


def refused_at(path: Path, revision: int, says: str = "", *, other: list[str] | None = None) -> CorruptLogError:
    """Opening "s" fails naming revision ``revision``; truncating before it recovers the prefix."""
    store = SQLiteStore(path)
    with pytest.raises(CorruptLogError) as caught:
        Transcript("s", store=store)
    error = caught.value
    assert (error.session_id, error.revision) == ("s", revision), str(error)
    assert says in str(error) and f"store.truncate('s', {revision - 1})" in str(error)
    expected_other = ["elsewhere", "fine"] if other is None else other
    assert [m.content for m in Transcript("other", store=store).messages] == expected_other  # untouched
    store.truncate("s", revision - 1)
    t = Transcript("s", store=store)
    assert t.head == store.head("s") == revision - 1
    t.append(user="after the recovery", assistant="ok")
    assert SQLiteStore(path).revisions("s")[-1].number == revision
    store.close()
    return error


def test_an_untouched_file_opens(db: Path) -> None:
    store = SQLiteStore(db)
    t = Transcript("s", store=store)
    assert (t.head, len(t.messages)) == (TURNS + 2, 2 * TURNS)
    store.close()


def test_a_deleted_row_is_named(db: Path) -> None:
    hand_edit(db, "DELETE FROM revisions WHERE session_id = 's' AND number = 5")
    refused_at(db, 5, "missing")


def test_a_deleted_last_row_before_a_later_one_is_named(db: Path) -> None:
    hand_edit(db, f"DELETE FROM revisions WHERE session_id = 's' AND number = {TURNS + 1}")
    refused_at(db, TURNS + 1, "missing")


def test_a_row_of_unknown_kind_is_named(db: Path) -> None:
    hand_edit(db, "UPDATE revisions SET kind = 'bogus' WHERE session_id = 's' AND number = 7")
    refused_at(db, 7, "'bogus'")


def test_an_inserted_undo_with_an_impossible_target_is_named(db: Path) -> None:
    head = TURNS + 2
    hand_edit(
        db,
        f"INSERT INTO revisions (session_id, number, parent, kind, created_at, base, target, changes) "
        f"VALUES ('s', {head + 1}, {head}, 'undo', 1.0, {head}, 999, '[]')",
    )
    refused_at(db, head + 1, "999")


def test_an_inserted_row_that_looks_right_is_named(db: Path) -> None:
    """A plausible row (valid kind, no target) without the library's digest."""
    head = TURNS + 2
    put = [{"op": "put", "message": {"id": "forged", "role": "user", "content": "forged"}, "after": None}]
    hand_edit(
        db,
        f"INSERT INTO revisions (session_id, number, parent, kind, created_at, base, changes) "
        f"VALUES ('s', {head + 1}, {head}, 'append', 1.0, {head}, '{json.dumps(put)}')",
    )
    refused_at(db, head + 1, "no digest")


def test_altered_text_is_named(db: Path) -> None:
    hand_edit(db, "UPDATE revisions SET changes = replace(changes, 'answer 41', 'answer 14') WHERE session_id = 's' AND number = 42")
    refused_at(db, 42, "digest does not match")


def test_an_altered_time_is_named(db: Path) -> None:
    hand_edit(db, "UPDATE revisions SET created_at = created_at + 1 WHERE session_id = 's' AND number = 100")
    refused_at(db, 100, "digest does not match")


def test_reordered_rows_are_named(db: Path) -> None:
    """Revisions 10 and 11 swap places (their numbers and parents follow)."""
    hand_edit(
        db,
        "UPDATE revisions SET number = 100000 WHERE session_id = 's' AND number = 10",
        "UPDATE revisions SET number = 10 WHERE session_id = 's' AND number = 11",
        "UPDATE revisions SET number = 11, parent = 10 WHERE session_id = 's' AND number = 100000",
        "UPDATE revisions SET parent = 9 WHERE session_id = 's' AND number = 10",
        "UPDATE revisions SET base = parent WHERE session_id = 's' AND number IN (10, 11)",
    )
    refused_at(db, 10, "digest does not match")


def test_a_duplicated_row_is_named(db: Path) -> None:
    """Revision 20 copied, digest and all, over revision 21's place."""
    hand_edit(
        db,
        "DELETE FROM revisions WHERE session_id = 's' AND number = 21",
        "INSERT INTO revisions SELECT session_id, 21, 20, kind, instruction, model, created_at, base, target, changes, digest "
        "FROM revisions WHERE session_id = 's' AND number = 20",
    )
    refused_at(db, 21, "digest does not match")


def test_a_row_moved_from_another_session_is_named(db: Path) -> None:
    hand_edit(
        db,
        "DELETE FROM revisions WHERE session_id = 's' AND number = 1",
        "UPDATE revisions SET session_id = 's' WHERE session_id = 'other' AND number = 1",
    )
    refused_at(db, 1, "digest does not match", other=[])


def test_a_removed_digest_is_named(db: Path) -> None:
    hand_edit(db, "UPDATE revisions SET digest = NULL WHERE session_id = 's' AND number = 250")
    refused_at(db, 250, "no digest")


def test_a_catching_up_reader_checks_what_it_reads(db: Path) -> None:
    """A transcript open before the tampering checks the rows it catches up on."""
    store = SQLiteStore(db)
    reader = Transcript("s", store=store)
    writer = Transcript("s", store=SQLiteStore(db))
    writer.append(user="one more", assistant="ok")
    writer.append(user="and another", assistant="ok")
    hand_edit(db, f"UPDATE revisions SET changes = replace(changes, 'one more', 'one less') WHERE number = {TURNS + 3}")
    with pytest.raises(CorruptLogError) as caught:
        reader.messages
    assert (caught.value.session_id, caught.value.revision) == ("s", TURNS + 3)
    writer.store.close()
    store.close()


@pytest.mark.parametrize(
    ("edit", "named"),
    [("UPDATE revisions SET digest = NULL WHERE number = 3", 3),
     ("UPDATE revisions SET digest = 'f' || substr(digest, 2) WHERE number = 3", 3),
     ("UPDATE revisions SET changes = replace(changes, 'q3', 'Q3') WHERE number = 4", 4)],
    ids=["anchor-digest-removed", "anchor-digest-changed", "first-row-after-the-anchor-changed"],
)
def test_a_catching_up_reader_names_the_damaged_row_it_reads_from(tmp_path: Path, edit: str, named: int) -> None:
    """A reader at revision 4 catches up from revision 3 (the row before its newest): when the
    digest of that row was damaged, it named revision 4 and advised store.truncate('s', 3),
    after which a fresh open still failed at revision 3; now it names the row a fresh open names."""
    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    t = Transcript("s", store=store)
    for n in range(4):
        t.append(user=f"q{n}", assistant=f"a{n}")
    reader = Transcript("s", store=SQLiteStore(path))
    assert len(reader.messages) == 8
    hand_edit(path, edit)
    t.append(user="q4", assistant="a4")  # a writer that read the log before the edit
    with pytest.raises(CorruptLogError) as caught:
        reader.messages
    assert (caught.value.session_id, caught.value.revision) == ("s", named), str(caught.value)
    reader.store.close()
    with pytest.raises(CorruptLogError) as fresh:
        Transcript("s", store=store)
    assert fresh.value.revision == named
    store.truncate("s", named - 1)
    assert len(Transcript("s", store=store).messages) == 2 * (named - 1)
    store.close()


def test_the_migration_chains_the_valid_prefix_of_old_files(db: Path, tmp_path: Path) -> None:
    """A file from before the chain (migration 4 undone by hand): its intact sessions are
    chained and open; a session already damaged then stays refused at the damage."""
    hand_edit(
        db,
        "ALTER TABLE revisions DROP COLUMN digest",
        "DELETE FROM schema_migrations WHERE version = 4",
        "DELETE FROM revisions WHERE session_id = 's' AND number = 5",  # damaged before the upgrade
    )
    store = SQLiteStore(db)  # migrates: backfills the digests
    assert [v for v, _ in store.applied_migrations()] == [1, 2, 3, 4, 5]
    assert [m.content for m in Transcript("other", store=store).messages] == ["elsewhere", "fine"]
    store.close()
    refused_at(db, 5, "missing")  # the damage is not blessed by the backfill


# -- the text fields: no hand edit gives the same text ---------------------------------------
@pytest.mark.parametrize("edit", [
    "UPDATE revisions SET instruction = 'None' WHERE session_id = 's' AND number = 301",  # was NULL
    "UPDATE revisions SET model = 'None' WHERE session_id = 's' AND number = 301",
    "UPDATE revisions SET instruction = CAST('None' AS BLOB) WHERE session_id = 's' AND number = 301",
])
def test_a_missing_instruction_or_model_written_in_by_hand_is_named(db: Path, edit: str) -> None:
    """NULL and the text 'None' were one text to the first chain."""
    hand_edit(db, edit)
    refused_at(db, TURNS + 1)


def _edited(store: SQLiteStore, instruction: str, model: str) -> None:
    """Session "s" gains an edit of its first message recorded with ``instruction`` and ``model``
    (a scripted model's proposal, committed with those fields)."""
    t = Transcript("s", store=store)
    editor = ScriptedModel([json.dumps({"operations": [{"op": "replace", "id": "1", "content": "first, edited"}]})])
    proposal = t.edit("shorten it", model=editor, preview=True)
    t.commit(replace(proposal, instruction=instruction, model=model))


def test_text_moved_between_the_instruction_and_the_model_is_named(tmp_path: Path) -> None:
    """A U+001F in a field was the separator to the first chain: moving text across it between
    the instruction and the model name kept the digest."""
    path = tmp_path / "moved.db"
    store = SQLiteStore(path)
    Transcript("s", store=store).append(user="question", assistant="answer")
    _edited(store, "shorter\x1fplease", "m")
    Transcript("other", store=store).append(user="elsewhere", assistant="fine")
    store.close()
    hand_edit(path, "UPDATE revisions SET instruction = 'shorter', model = 'please' || char(31) || 'm' "
                    "WHERE session_id = 's' AND number = 2")
    refused_at(path, 2)


def _first_chain(path: Path) -> None:
    """``path`` as the first chain left it: every digest recomputed as migration 4 wrote them,
    migration 5 not applied."""
    conn = sqlite3.connect(path)
    with conn:
        for (session,) in conn.execute("SELECT DISTINCT session_id FROM revisions").fetchall():
            previous = genesis(session)
            rows = conn.execute(f"SELECT {sqlite_module._COLUMNS} FROM revisions WHERE session_id = ? ORDER BY number",
                                (session,)).fetchall()
            for row in rows:
                previous = row_digest(previous, row, legacy=True)
                conn.execute("UPDATE revisions SET digest = ? WHERE session_id = ? AND number = ?",
                             (previous, session, row[0]))
        conn.execute("DELETE FROM schema_migrations WHERE version = 5")
    conn.close()


def _with_ambiguous_fields(path: Path) -> None:
    """Session "s" of ``path`` gains an edit whose instruction is the text 'None' and whose
    model name holds a U+001F (what the first chain wrote ambiguously), then a later append."""
    store = SQLiteStore(path)
    _edited(store, "None", "a\x1fb")
    Transcript("s", store=store).append(user="later", assistant="still here")
    store.close()


def test_the_migration_rewrites_the_ambiguous_rows_of_a_file_with_the_first_chain(db: Path) -> None:
    _with_ambiguous_fields(db)
    _first_chain(db)
    read_only = SQLiteStore(db, read_only=True)  # not migrated: read with the first chain
    assert Transcript("s", store=read_only).head == TURNS + 4
    read_only.close()
    store = SQLiteStore(db)  # migration 5
    assert [v for v, _ in store.applied_migrations()][-1] == 5
    t = Transcript("s", store=store)
    edit = store.revisions("s")[TURNS + 2]
    assert t.head == TURNS + 4 and (edit.instruction, edit.model) == ("None", "a\x1fb")
    store.close()
    hand_edit(db, f"UPDATE revisions SET instruction = NULL WHERE session_id = 's' AND number = {TURNS + 3}")
    refused_at(db, TURNS + 3)  # the rewritten row is checked with the new text


def test_a_read_only_store_opened_before_another_process_migrates_reads_on(db: Path) -> None:
    """A viewer opened on the old file keeps reading after a writer ran migration 5 (the rows
    it rewrote carry the new chain's digests)."""
    _with_ambiguous_fields(db)
    _first_chain(db)
    viewer = SQLiteStore(db, read_only=True)
    assert Transcript("s", store=viewer).head == TURNS + 4
    SQLiteStore(db).close()  # another process migrates
    assert Transcript("s", store=viewer).head == TURNS + 4
    assert [r.instruction for r in viewer.revisions("s")][TURNS + 2] == "None"
    viewer.close()


@pytest.mark.parametrize("when", ["before the check", "after the check"])
def test_a_viewer_reading_while_another_process_migrates_sees_no_damage(
    db: Path, when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration commits between the viewer's reads (its rows, whether the file has had
    migration 5, its rows again): the viewer reads the session, never a false CorruptLogError."""
    _with_ambiguous_fields(db)
    _first_chain(db)
    viewer = SQLiteStore(db, read_only=True)
    real = sqlite_module._verified_rows

    def migrated_meanwhile(conn, session_id, after, *, shared, legacy=False):  # type: ignore[no-untyped-def]
        if legacy and when == "after the check":
            SQLiteStore(db).close()  # the upgrade commits before the first chain's read
        try:
            return real(conn, session_id, after, shared=shared, legacy=legacy)
        except CorruptLogError:
            if not legacy and when == "before the check":
                SQLiteStore(db).close()  # the upgrade commits before the viewer asks which chain
            raise

    monkeypatch.setattr(sqlite_module, "_verified_rows", migrated_meanwhile)
    assert Transcript("s", store=viewer).head == TURNS + 4
    viewer.close()


@pytest.mark.parametrize("migrated", ["before the check", "after the check", "never"])
def test_postgres_reads_see_no_damage_when_migration_5_commits_between_their_statements(
    db: Path, migrated: str
) -> None:
    """PostgreSQL runs each statement of a read in its own snapshot (READ COMMITTED): the rows,
    which migrations the tables have had, the rows again.  Driven by hand here with the rows
    as the first chain left them, then as migration 5 rewrote them."""
    pytest.importorskip("psycopg", reason="the PostgreSQL store's read steps need the postgres extra")
    from context_gatekeeper.stores import postgres_ops

    _with_ambiguous_fields(db)
    rewritten = [(*row, "s") for row in _rows(db)]  # as PostgreSQL reads them: with their session_id
    _first_chain(db)
    old = [(*row, "s") for row in _rows(db)]
    before, after = [(1,), (2,), (3,), (4,)], [(1,), (2,), (3,), (4,), (5,)]
    answers = {
        "before the check": [old, after, rewritten],  # rows (old), applied (5 now), rows again (new)
        "after the check": [old, before, rewritten, after, rewritten],  # old, no 5, rows (new by now), 5, new
        "never": [old, before, old],  # the first chain's rows, read with the first chain
    }[migrated]
    steps = postgres_ops.load_steps({"load_chained": "load_chained", "applied": "applied"}, (b"k", "s"), 0)
    next(steps)
    with pytest.raises(StopIteration) as done:
        for answer in answers:
            steps.send(answer)
    assert [r.number for r in done.value.value] == list(range(1, TURNS + 5))


def _rows(path: Path) -> list[tuple[object, ...]]:
    """Session "s"'s stored rows with their digests, as a load reads them."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sqlite_module._SELECT_CHAINED, ("s", 0)).fetchall()
    finally:
        conn.close()


def test_the_migration_blesses_no_row_the_first_chain_refuses(db: Path) -> None:
    _with_ambiguous_fields(db)
    _first_chain(db)
    hand_edit(db, "UPDATE revisions SET created_at = 1.5 WHERE session_id = 's' AND number = 20")  # damaged before
    refused_at(db, 20)


def test_chain_text_is_one_to_one_and_never_holds_the_separator() -> None:
    values = [None, "None", "none", "", "\x1e", "\x1estr:\"None\"", "a\x1fb", "a", b"a", b"None", "\u00e9", "\x1f"]
    texts = [chain_text(v) for v in values]
    assert len(set(texts)) == len(values) and not any("\x1f" in t for t in texts)
    assert chain_text("edit the tone") == "edit the tone" and chain_text(None) == "None"  # as the first chain


def test_chained_prefix_stops_at_the_first_invalid_row() -> None:
    rows = [
        (1, 0, "append", None, None, 1.0, 0, None, "[]"),
        (2, 1, "bogus", None, None, 2.0, 1, None, "[]"),
        (3, 2, "append", None, None, 3.0, 2, None, "[]"),
    ]
    first = row_digest(genesis("s"), rows[0], legacy=True)
    assert chained_prefix("s", rows) == [(1, first)]
    assert chained_prefix("s", [rows[0], rows[2]]) == [(1, first)]  # a gap


# -- damage to the files themselves ------------------------------------------------------------
@pytest.mark.parametrize("kept", [2, 3, 4])
def test_a_truncated_file_is_reported_as_damaged(db: Path, kept: int) -> None:
    """A file cut short is no log with a bad revision (CorruptLogError, which ``truncate``
    recovers) but a damaged database: StoreUnavailableError saying to restore a backup, as
    docs/guide/stores.md says."""
    size = db.stat().st_size
    with open(db, "r+b") as handle:
        handle.truncate(size // kept)
    with pytest.raises(StoreUnavailableError, match="damaged") as caught:
        store = SQLiteStore(db)
        try:
            Transcript("s", store=store)
        finally:
            store.close()
    assert "backup" in str(caught.value) and isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_a_file_that_is_not_a_database_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(StoreUnavailableError, match="not an SQLite database") as caught:
        SQLiteStore(path)
    assert isinstance(caught.value, OSError) and isinstance(caught.value.__cause__, sqlite3.DatabaseError)
    assert path.read_bytes() == b"these are my notes, not a database\n" * 200  # nothing written


def test_deleted_wal_files_lose_at_most_the_uncheckpointed_tail_and_never_open_wrong(tmp_path: Path) -> None:
    """The -wal and -shm files removed while a writer holds the database open: a new opening
    sees either the checkpointed prefix (which verifies) or an error of the library."""
    path = tmp_path / "wal.db"
    writer = SQLiteStore(path)
    t = Transcript("s", store=writer)
    for n in range(5):
        t.append(user=f"q{n}", assistant=f"a{n}")
    writer.checkpoint()
    for n in range(5, 8):
        t.append(user=f"q{n}", assistant=f"a{n}")
    for suffix in ("-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.remove(f"{path}{suffix}")
    try:
        reader = SQLiteStore(path)
        try:
            opened = Transcript("s", store=reader)
            assert 5 <= opened.head <= 8
            assert [m.content for m in opened.messages][:10] == [x for n in range(5) for x in (f"q{n}", f"a{n}")]
        finally:
            reader.close()
    except StoreUnavailableError as exc:
        assert isinstance(exc.__cause__, sqlite3.Error)
    finally:
        try:
            writer.close()
        except StoreUnavailableError:
            pass


def test_a_copy_of_the_file_verifies_like_the_original(db: Path, tmp_path: Path) -> None:
    """The chain depends on the content only: a backup copy opens (no path or row id in it)."""
    copy = tmp_path / "copy.db"
    store = SQLiteStore(db)
    store.checkpoint()
    store.close()
    shutil.copy(db, copy)
    assert Transcript("s", store=SQLiteStore(copy)).head == TURNS + 2


def test_migrations_list_the_chain() -> None:
    assert [m.version for m in sqlite_module.MIGRATIONS][-2:] == [4, 5]


@pytest.mark.parametrize("edit", [
    lambda conn: conn.execute("UPDATE revisions SET parent = 0 WHERE number = 3"),
    lambda conn: conn.execute("UPDATE revisions SET base = 99 WHERE number = 3"),
])
def test_impossible_fields_are_named(db: Path, edit: Callable[[sqlite3.Connection], object]) -> None:
    conn = sqlite3.connect(db)
    with conn:
        edit(conn)
    conn.close()
    refused_at(db, 3)


def test_a_refused_read_leaves_no_statement_open(db: Path) -> None:
    """A session read checks each row as it comes from SQLite; a row refused half way must
    not leave the read statement open on the store's connection (it would hold a read lock,
    and the store's own checkpoint would fail as locked), even while the error is kept."""
    hand_edit(db, "UPDATE revisions SET created_at = 1.5 WHERE session_id = 's' AND number = 20")
    store = SQLiteStore(db)
    with pytest.raises(CorruptLogError) as caught:
        store.revisions("s")
    assert caught.value.revision == 20  # the error, and the frames it holds, are still alive here
    store.checkpoint()  # "database table is locked" while a statement is open
    store.truncate("s", 19)
    assert store.head("s") == 19
    store.close()


@pytest.mark.parametrize("call", ["append", "aappend"])
def test_appends_after_a_hand_edited_id_index_never_store_a_message_twice(call: str, tmp_path: Path) -> None:
    """The index of message ids is not chained, so a hand edit of it goes unnoticed on open.
    A retried append (a client re-sending messages with their ids) still does nothing, and
    a taken id is still refused or renewed: the transcript checks an append's ids against
    the log it has read before anything is written, so the store never writes a second copy
    of a message the session holds (a revision no reader could load)."""
    path = tmp_path / "chat.db"
    hello = {"id": "u1", "role": "user", "content": "hello"}
    with Transcript("s", store=path) as t:
        t.append(messages=[hello, {"id": "a1", "role": "assistant", "content": "hi"}])
        t.append(user="second", assistant="reply")
    hand_edit(path, "DELETE FROM message_ids WHERE session_id = 's'")  # e.g. a cleanup script that took it for a cache
    store = SQLiteStore(path)
    try:
        t = Transcript("s", store=store)
        written = store.revisions("s")

        def append(**kwargs: object):
            return t.append(**kwargs) if call == "append" else asyncio.run(t.aappend(**kwargs))

        retried = append(messages=[dict(hello)])
        assert (retried.number, retried.changes) == (2, ())
        with pytest.raises(InvalidInputError, match="'a1' is already used in session 's' with other content"):
            append(messages=[{"id": "a1", "role": "assistant", "content": "other text"}])
        assert store.revisions("s") == written  # nothing written
        renewed = append(messages=[dict(hello), {"id": "a1", "role": "assistant", "content": "other text"}],
                         renew_taken_ids=True)
        (fresh,) = renewed.added
        assert (renewed.number, fresh.content) == (3, "other text") and fresh.id not in {"u1", "a1"}
        with Transcript("s", store=path) as reopened:
            assert reopened.messages == t.messages and [m.id for m in t.messages][:2] == ["u1", "a1"]
    finally:
        store.close()


# -- the id index checked against the log when it refuses a write ------------------------------
def _small(tmp_path: Path) -> tuple[Path, str]:
    """A file holding session "s": one question and answer, then the question edited
    (revision 2); returns the path and the question's id."""
    from context_gatekeeper.records.operations import Replace

    path = tmp_path / "small.db"
    store = SQLiteStore(path)
    t = Transcript("s", store=store)
    t.append(user="hello", assistant="hi")
    question = t.messages[0].id
    t.apply([Replace(question, "HELLO")])
    store.close()
    return path, question


def _revision_rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM revisions ORDER BY session_id, number").fetchall()
    finally:
        conn.close()


def _refused_as_damage(path: Path, head: int, write: Callable[[Transcript], object]) -> None:
    """``write`` on a freshly opened "s" raises CorruptLogError naming the repair, every time
    (reloading does not help), and writes nothing."""
    rows = _revision_rows(path)
    for _ in range(2):
        store = SQLiteStore(path)
        t = Transcript("s", store=store)
        with pytest.raises(CorruptLogError) as caught:
            write(t)
        store.close()
        error = caught.value
        assert (error.session_id, error.revision) == ("s", head + 1), str(error)
        assert "message-id index" in str(error) and "outside context-gatekeeper" in str(error)
        assert f"store.truncate('s', {head})" in str(error)
        assert "reload the transcript" not in str(error).lower().replace("reloading will not help", "")
        assert _revision_rows(path) == rows  # nothing was written


@pytest.mark.parametrize(
    "edit", ["DELETE FROM message_ids", "UPDATE message_ids SET present = 0"], ids=["deleted", "marked_absent"]
)
def test_an_index_changed_by_hand_is_named_when_an_undo_needs_it(tmp_path: Path, edit: str) -> None:
    path, _ = _small(tmp_path)
    hand_edit(path, edit)
    store = SQLiteStore(path)
    Transcript("s", store=store).append(user="still fine")  # appends at the end do not read the old rows
    store.close()
    _refused_as_damage(path, 3, lambda t: t.undo())
    store = SQLiteStore(path)
    assert store.truncate("s", 3) == 0  # the named repair: nothing set aside, the index rebuilt
    t = Transcript("s", store=store)
    t.undo()
    assert [m.content for m in t.messages] == ["hello", "hi", "still fine"]
    store.close()
    store = SQLiteStore(path)
    assert [m.content for m in Transcript("s", store=store).messages] == ["hello", "hi", "still fine"]
    store.close()


def _edit_after_the_repair(path: Path, head: int, question: str) -> None:
    """The repair the error names (``truncate`` to the head: nothing set aside, the index
    rebuilt), then the refused edit goes through and a fresh open reads it."""
    from context_gatekeeper.records.operations import Replace

    store = SQLiteStore(path)
    assert store.truncate("s", head) == 0
    Transcript("s", store=store).apply([Replace(question, "bye")])
    store.close()
    store = SQLiteStore(path)
    assert [m.content for m in Transcript("s", store=store).messages] == ["bye", "hi"]
    store.close()


def test_an_index_changed_by_hand_is_named_when_an_edit_needs_it(tmp_path: Path) -> None:
    from context_gatekeeper.records.operations import Replace

    path, question = _small(tmp_path)
    hand_edit(path, "DELETE FROM message_ids")
    _refused_as_damage(path, 2, lambda t: t.apply([Replace(question, "bye")]))
    _edit_after_the_repair(path, 2, question)


def test_a_newest_revision_deleted_by_hand_is_named_when_an_edit_needs_it(tmp_path: Path) -> None:
    from context_gatekeeper.records.operations import Replace

    path, question = _small(tmp_path)
    hand_edit(path, "DELETE FROM revisions WHERE number = 2")  # the edit: nothing after it in the chain
    store = SQLiteStore(path)
    assert [m.content for m in Transcript("s", store=store).messages] == ["hello", "hi"]  # opens: unnoticed
    store.close()
    _refused_as_damage(path, 1, lambda t: t.apply([Replace(question, "bye")]))
    _edit_after_the_repair(path, 1, question)


def test_a_refusal_with_an_intact_index_stays_a_refusal(tmp_path: Path) -> None:
    """A write the index rightly refuses (the message is gone) is still InvalidRevisionError."""
    from context_gatekeeper import InvalidRevisionError
    from context_gatekeeper.records.operations import Change
    from context_gatekeeper.records.revisions import Revision
    from context_gatekeeper.records.messages import Message

    path, question = _small(tmp_path)
    store = SQLiteStore(path)
    gone = Message(id="never-there", role="user", content="x")
    with pytest.raises(InvalidRevisionError, match="is not in the transcript"):
        store.commit("s", Revision(0, 0, "edit", (Change(gone, replace(gone, content="y")),)), expected_head=2)
    store.close()


# -- an append the id index takes for a retry is confirmed against the log ----------------------
TURN_TWO = ({"id": "u2", "role": "user", "content": "second question"},
            {"id": "a2", "role": "assistant", "content": "second answer"})


def _with_a_lost_newest_append(tmp_path: Path) -> Path:
    """A file holding session "s" whose newest revision (the append of ``TURN_TWO``) was deleted
    by hand: the id index still says the session holds u2 and a2; the log, which opens, does not."""
    path = tmp_path / "chat.db"
    with Transcript("s", store=path) as t:
        t.append(user="hello", assistant="hi")
        t.append(messages=[dict(m) for m in TURN_TWO])
    hand_edit(path, "DELETE FROM revisions WHERE session_id = 's' AND number = 2")
    return path


@pytest.mark.parametrize("call", ["append", "aappend", "commit", "commit_renewing"])
def test_a_message_the_index_holds_but_the_log_lacks_is_never_dropped_as_a_retry(call: str, tmp_path: Path) -> None:
    """The client re-sends the lost turn with its ids: the index takes the messages for a retry,
    the log does not hold them, so dropping them would lose them without a word (the append
    "succeeded" and wrote nothing).  CorruptLogError names the repair, every time; nothing is
    written; after the repair the same append stores them."""
    from context_gatekeeper.records.messages import Message
    from context_gatekeeper.records.operations import AT_END, Put
    from context_gatekeeper.records.revisions import Revision

    path = _with_a_lost_newest_append(tmp_path)
    rows = _revision_rows(path)

    def resend(t: Transcript, store: SQLiteStore) -> object:
        messages = [dict(m) for m in TURN_TWO]
        if call == "append":
            return t.append(messages=messages)
        if call == "aappend":
            return asyncio.run(t.aappend(messages=messages))
        puts = (Put(Message(**TURN_TWO[0]), AT_END), Put(Message(**TURN_TWO[1]), AT_END))  # type: ignore[arg-type]
        return store.commit("s", Revision(0, 0, "append", puts), expected_head=None,
                            renew_taken_ids=call == "commit_renewing")

    for _ in range(2):  # reloading does not help
        store = SQLiteStore(path)
        t = Transcript("s", store=store)
        assert [m.content for m in t.messages] == ["hello", "hi"]  # opens: the lost append goes unnoticed
        with pytest.raises(CorruptLogError) as caught:
            resend(t, store)
        store.close()
        error = caught.value
        assert (error.session_id, error.revision) == ("s", 2), str(error)
        assert "'a2', 'u2'" in str(error) and "retries" in str(error) and "message-id index" in str(error)
        assert "store.truncate('s', 1)" in str(error)
        assert _revision_rows(path) == rows  # nothing was written
    store = SQLiteStore(path)
    assert store.truncate("s", 1) == 0  # the named repair: nothing set aside, the index rebuilt
    stored = Transcript("s", store=store).append(messages=[dict(m) for m in TURN_TWO])
    assert stored.number == 2 and [m.id for m in stored.added] == ["u2", "a2"]
    store.close()
    with Transcript("s", store=path) as reopened:
        assert [m.content for m in reopened.messages] == ["hello", "hi", "second question", "second answer"]


def test_revisions_restored_from_an_older_backup_beside_a_newer_index_lose_no_append(tmp_path: Path) -> None:
    """The revisions table put back from a backup taken before the newest append, the index
    left as it is: the same refusal, naming the same repair."""
    path = tmp_path / "chat.db"
    with Transcript("s", store=path) as t:
        t.append(user="hello", assistant="hi")
    backup = _revision_rows(path)
    with Transcript("s", store=path) as t:
        t.append(messages=[dict(m) for m in TURN_TWO])
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM revisions")
        conn.executemany(f"INSERT INTO revisions VALUES ({', '.join('?' * len(backup[0]))})", backup)
    conn.close()
    with Transcript("s", store=path) as t, pytest.raises(CorruptLogError, match=r"store\.truncate\('s', 1\)"):
        t.append(messages=[dict(m) for m in TURN_TWO])
    assert _revision_rows(path) == backup


def test_a_retry_the_log_holds_is_still_dropped(tmp_path: Path) -> None:
    """A retry the log holds (a second process appended the same turn first) is dropped as before."""
    from context_gatekeeper.records.messages import Message
    from context_gatekeeper.records.operations import AT_END, Put
    from context_gatekeeper.records.revisions import Revision

    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    Transcript("s", store=store).append(user="hello", assistant="hi")
    puts = (Put(Message(**TURN_TWO[0]), AT_END), Put(Message(**TURN_TWO[1]), AT_END))  # type: ignore[arg-type]
    assert store.commit("s", Revision(0, 0, "append", puts), expected_head=None).number == 2
    rows = _revision_rows(path)
    for renew in (False, True):
        again = store.commit("s", Revision(0, 0, "append", puts), expected_head=None, renew_taken_ids=renew)
        assert (again.number, again.changes) == (2, ())
    assert _revision_rows(path) == rows
    store.close()


# -- a revision number SQLite keeps as text, a blob or a real ----------------------------------
@pytest.mark.parametrize("number", ["'two'", "x'02'", "2.5"], ids=["text", "blob", "real"])
def test_a_revision_number_changed_to_a_non_integer_is_named_by_every_read(tmp_path: Path, number: str) -> None:
    """SQLite's INTEGER column keeps such a value as it is, and sorts it after every integer:
    ``head`` and ``tip`` returned it (a str or bytes), and transcripts failed with a bare
    TypeError; now each raises CorruptLogError naming the truncate that recovers."""
    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    Transcript("s", store=store).append(user="hello", assistant="hi")
    Transcript("s", store=store).append(user="two", assistant="2")
    reader = Transcript("s", store=store)  # an object that has read the log already
    assert len(reader.messages) == 4
    hand_edit(path, f"UPDATE revisions SET number = {number} WHERE session_id = 's' AND number = 2")
    calls: list[Callable[[], object]] = [
        lambda: store.head("s"),
        lambda: store.tip("s"),
        lambda: asyncio.run(store.ahead("s")),
        lambda: reader.messages,
        lambda: Transcript("s", store=store),
        lambda: reader.append(user="three"),
        lambda: store.commit("s", turn(3), expected_head=None),
    ]
    for call in calls:
        with pytest.raises(CorruptLogError) as caught:
            call()
        assert (caught.value.session_id, caught.value.revision) == ("s", 2), str(caught.value)
        assert "store.truncate('s', 1)" in str(caught.value)
    assert store.truncate("s", 1) == 1
    assert store.head("s") == 1 and store.tip("s")[0] == 1
    assert [m.content for m in Transcript("s", store=store).messages] == ["hello", "hi"]
    store.close()


def test_a_commit_after_a_revision_number_set_to_the_largest_integer_is_named(tmp_path: Path) -> None:
    """The newest revision's number set by hand to 2**63 - 1 (the largest SQLite's INTEGER
    holds): a commit raised a bare OverflowError; now CorruptLogError names the first revision
    that fails and the truncate that recovers, sync and async, and nothing is written."""
    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    for n in range(2):
        Transcript("s", store=store).append(user=f"q{n}", assistant=f"a{n}")
    hand_edit(path, "UPDATE revisions SET number = 9223372036854775807 WHERE number = 2")
    rows = _revision_rows(path)
    calls: list[Callable[[], object]] = [
        lambda: store.commit("s", turn(3), expected_head=None),
        lambda: asyncio.run(store.acommit("s", turn(3), expected_head=None)),
    ]
    for call in calls:
        with pytest.raises(CorruptLogError) as caught:
            call()
        assert (caught.value.session_id, caught.value.revision) == ("s", 2), str(caught.value)
        assert "store.truncate('s', 1)" in str(caught.value)
        assert _revision_rows(path) == rows
    assert store.truncate("s", 1) == 1
    assert store.commit("s", turn(3), expected_head=None).number == 2
    store.close()


def test_the_documented_repair_of_a_hand_edited_id_index_makes_commits_check_ids_again(tmp_path: Path) -> None:
    """A commit through the Store API trusts the id index for the ids it does not list (the docs
    say so: confirming them would read the whole log per commit), so after message_ids was
    deleted by hand it may store an append reusing an id the log holds, which the next open
    refuses.  The repair the docs give, store.truncate(session, head), sets nothing aside and
    rebuilds the index, after which the reused id is refused again, or renewed."""
    from context_gatekeeper.records.messages import Message
    from context_gatekeeper.records.operations import AT_END, Put
    from context_gatekeeper.records.revisions import Revision

    path = tmp_path / "chat.db"
    store = SQLiteStore(path)
    Transcript("s", store=store).append(messages=[{"id": "u1", "role": "user", "content": "hello"},
                                                  {"id": "a1", "role": "assistant", "content": "hi"}])
    hand_edit(path, "DELETE FROM message_ids")
    assert store.truncate("s", store.head("s")) == 0
    reused = Revision(0, 0, "append", (Put(Message(id="u1", role="user", content="other"), AT_END),))
    with pytest.raises(InvalidInputError, match="'u1' is already used"):
        store.commit("s", reused, expected_head=None)
    stored = store.commit("s", reused, expected_head=None, renew_taken_ids=True)
    assert [c.message.id for c in stored.changes] != ["u1"]
    assert [m.content for m in Transcript("s", store=store).messages] == ["hello", "hi", "other"]
    store.close()
