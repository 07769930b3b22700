"""Every store runs the conformance suite; SQLite also proves files, processes and crashes."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import context_gatekeeper
from context_gatekeeper.errors import InvalidInputError, InvalidTypeError, StoreUnavailableError
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.stores.sqlite import MIGRATIONS, SchemaVersionError
from context_gatekeeper.testing.stores import Capabilities, StoreConformance, append, edit, fill, message, put_ids, snapshot, turn
from context_gatekeeper.testing.store_tampering import COPIED_FROM
from store_raw import ROW_CONTENT, raw, tamper_rows


class ByteExact:
    """A refused commit must leave every stored byte of the session as it was."""

    def stored_state(self, store: Store, session: str) -> Any:
        return raw(store, session)


class TestInMemoryStore(ByteExact, StoreConformance):
    capabilities = Capabilities(reopens=False)

    def make(self, where: Path) -> Store:
        return InMemoryStore()


"""A revision row but its session and number (what ``copy`` and ``swap`` move)."""


class TamperedBySQL:
    """Changes a stored row with plain SQL, as a person with the sqlite3 shell would."""

    def tamper(self, store: Store, session: str, revision: int, how: str) -> None:
        where = " WHERE session_id = ? AND number = ?"
        with store._connection() as conn:  # type: ignore[attr-defined]
            def content(session_id: str, number: int) -> tuple[Any, ...]:
                return conn.execute(f"SELECT {ROW_CONTENT} FROM revisions" + where, (session_id, number)).fetchone()

            def put(values: tuple[Any, ...], number: int) -> None:
                conn.execute(f"UPDATE revisions SET ({ROW_CONTENT}) = ({', '.join('?' * len(values))})" + where,
                             (*values, session, number))

            tamper_rows(how, session, revision, COPIED_FROM, content, put,
                        lambda statement: conn.execute(statement.format(table="revisions") + where, (session, revision)))


class TestSQLiteStore(ByteExact, TamperedBySQL, StoreConformance):
    capabilities = Capabilities(tamper_evident=True, processes=True)

    def make(self, where: Path) -> Store:
        return SQLiteStore(where / "store.db")


class TestSQLiteMemoryStore(ByteExact, TamperedBySQL, StoreConformance):
    """``":memory:"`` keeps one connection behind a lock, so it is correct across threads too."""

    capabilities = Capabilities(reopens=False, tamper_evident=True)

    def make(self, where: Path) -> Store:
        return SQLiteStore(":memory:")


# -- SQLite only ---------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "gatekeeper.db"


def everything(store: Store) -> dict[str, tuple[int, list]]:
    """Head and log of every session."""
    return {session: snapshot(store, session) for session in store.sessions()}


def test_reopening_a_file_restores_state_and_history_exactly(db: Path) -> None:
    store = SQLiteStore(db)
    first, _ = fill(store, "a", 2)
    fill(store, "b 🚀", 3)
    proposal = edit(first.added[1], "rewritten — ✓")
    store.commit("a", turn(3), expected_head=None)
    store.commit("a", proposal, expected_head=2)  # rebased: base 2 < parent 3
    before = everything(store)
    store.close()
    again = SQLiteStore(db)
    assert everything(again) == before
    assert again.revisions("a")[-1].base == 2
    assert again.commit("a", turn(9), expected_head=None).number == 5
    again.close()


def test_migrations_are_recorded_once(db: Path) -> None:
    store = SQLiteStore(db, setup=False)
    with pytest.raises(SchemaVersionError, match=r"never set up.*setup\(\)"):
        store.head("s")  # nothing created yet
    store.setup()
    expected = [(m.version, m.name) for m in MIGRATIONS]
    assert store.applied_migrations() == expected
    raw = sqlite3.connect(db)
    rows = raw.execute("SELECT * FROM schema_migrations").fetchall()
    store.setup()
    store.close()
    SQLiteStore(db).close()
    assert raw.execute("SELECT * FROM schema_migrations").fetchall() == rows
    raw.close()


def test_a_file_before_the_hash_chain_opened_without_setup_says_to_run_setup(db: Path) -> None:
    """``setup=False`` leaves migrating to another job; meanwhile a file at a schema older than
    a call needs is the library's error (reads and writes alike), and a refused write writes nothing."""
    first = SQLiteStore(db)
    fill(first, "s", 1)
    first.close()
    with sqlite3.connect(db) as conn:  # the file as schema 3 left it: no digests, migrations 4 and 5 not recorded
        conn.execute("ALTER TABLE revisions DROP COLUMN digest")
        conn.execute("DELETE FROM schema_migrations WHERE version > 3")
    conn.close()
    store = SQLiteStore(db, setup=False)
    rows = raw(store, "s")
    for call in (lambda: store.revisions("s"), lambda: store.commit("s", turn(2), expected_head=None)):
        with pytest.raises(SchemaVersionError, match=r"schema version 3 \(migration\(s\) \[4, 5\] not applied.*setup\(\)") as caught:
            call()
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert raw(store, "s") == rows
    store.setup()
    assert store.commit("s", turn(2), expected_head=None).number == 2 and len(store.revisions("s")) == 2
    store.close()


def test_a_file_from_a_newer_version_is_refused(db: Path) -> None:
    SQLiteStore(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO schema_migrations VALUES (999, 'from the future', 0)")
    raw.close()
    with pytest.raises(SchemaVersionError, match="upgrade"):
        SQLiteStore(db)


def test_a_file_from_a_newer_version_is_refused_before_its_journal_mode_changes(db: Path) -> None:
    """A file another tool switched back to a rollback journal: the refused open left it in WAL
    mode (the switch rewrites the header) before refusing; now no byte of it changes."""
    SQLiteStore(db).close()
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
        with conn:
            conn.execute("INSERT INTO schema_migrations VALUES (999, 'from the future', 0)")
    before = db.read_bytes()
    with pytest.raises(SchemaVersionError, match="upgrade"):
        SQLiteStore(db)
    assert db.read_bytes() == before and not Path(f"{db}-wal").exists()
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


@pytest.mark.parametrize(
    "ddl",
    [
        ["CREATE TABLE schema_migrations (version varchar NOT NULL PRIMARY KEY)",  # Rails
         "INSERT INTO schema_migrations VALUES ('20240101120000')"],
        ["CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)",  # golang-migrate
         "INSERT INTO schema_migrations VALUES (3, 0)"],
        ["CREATE TABLE revisions (id INTEGER PRIMARY KEY, doc TEXT)", "INSERT INTO revisions VALUES (1, 'draft')"],
    ],
    ids=["rails-migrations", "golang-migrate-migrations", "app-revisions"],
)
@pytest.mark.parametrize("options", [{}, {"read_only": True}, {"setup": False}], ids=["setup", "read-only", "no-setup"])
def test_a_file_holding_another_programs_tables_of_the_same_name_is_refused(
    db: Path, ddl: list[str], options: dict[str, bool]
) -> None:
    """Not "upgrade context-gatekeeper", nor a bare sqlite3 error: the file is not the store's,
    and refusing it changes no byte of it (not even the journal mode in its header)."""
    with closing(sqlite3.connect(db)) as conn, conn:
        for statement in ddl:
            conn.execute(statement)
    before = db.read_bytes()
    with pytest.raises(SchemaVersionError, match="another program") as caught:
        SQLiteStore(db, **options)
    assert "file of its own" in str(caught.value)
    assert db.read_bytes() == before  # nothing created or migrated, and still in its own journal mode
    assert not Path(f"{db}-wal").exists()
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_wal_mode_is_on(db: Path) -> None:
    SQLiteStore(db).close()
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_two_objects_on_one_file_see_each_others_commits(db: Path) -> None:
    one, two = SQLiteStore(db), SQLiteStore(db)
    one.commit("s", turn(1), expected_head=None)
    assert two.head("s") == 1
    two.commit("s", turn(2), expected_head=None)
    assert one.head("s") == 2
    assert one.revisions("s") == two.revisions("s")
    one.close()
    two.close()


def test_a_closed_store_says_so(db: Path) -> None:
    store = SQLiteStore(db)
    store.close()
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.head("s")


def test_session_ids_must_be_text(db: Path) -> None:
    store = SQLiteStore(db)
    with pytest.raises(TypeError, match="session_id"):
        store.head(42)  # type: ignore[arg-type]
    store.close()


@pytest.mark.parametrize(("session", "error"), [(42, InvalidTypeError), ("lone \udc80", InvalidInputError)],
                         ids=["int", "lone-surrogate"])
def test_the_memory_store_refuses_the_session_ids_the_sql_stores_refuse(session: Any, error: type) -> None:
    """It took them, and ``sessions()`` then failed sorting an int among strs (a bare TypeError):
    code tried on the default store must fail there as it would on SQLite or PostgreSQL."""
    store = InMemoryStore()
    calls = [
        lambda: store.commit(session, turn(1), expected_head=None), lambda: store.head(session),
        lambda: store.tip(session), lambda: store.revisions(session), lambda: store.truncate(session, 0),
        lambda: store.purge(session), lambda: asyncio.run(store.acommit(session, turn(1), expected_head=None)),
    ]
    for call in calls:
        with pytest.raises(error, match="session"):
            call()
    store.commit("user-7", turn(1), expected_head=None)
    assert store.sessions() == ["user-7"] and store.stored_sessions() == ["user-7"]


def _database_bytes(db: Path) -> bytes:
    """Every byte of a SQLite database's files (the file, its -wal and -shm): where a purged text may stay."""
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name))


def test_purge_leaves_no_trace_in_the_files(db: Path) -> None:
    store = SQLiteStore(db)
    for n in range(1, 4):  # interleaved, so private rows share pages with rows that stay
        store.commit("public", turn(n), expected_head=None)
        store.commit("private", append(message(f"p{n}", content="my passport is XK-SECRET-4242")), expected_head=None)
    assert b"XK-SECRET-4242" in _database_bytes(db)
    store.purge("private")
    assert b"XK-SECRET-4242" not in _database_bytes(db)  # neither in the main file nor in the write-ahead log
    store.close()
    assert b"XK-SECRET-4242" not in _database_bytes(db)
    assert SQLiteStore(db).head("public") == 3


@pytest.mark.parametrize(("call", "finish"), [("purge", "a later write"), ("apurge", "checkpoint")])
def test_purge_while_another_connection_reads_says_the_log_still_holds_the_text_until_it_can_truncate_it(
    db: Path, call: str, finish: str
) -> None:
    """A reader on an older snapshot keeps the write-ahead log from being truncated: purge says
    so (the erase itself is committed), and the store truncates it once that reader is done."""
    store = SQLiteStore(db, busy_timeout=0)  # the reader is not done waiting for: give up at once
    store.commit("public", turn(1), expected_head=None)
    store.commit("private", append(message("p1", content="my passport is XK-SECRET-4242")), expected_head=None)
    with closing(sqlite3.connect(db)) as reader:  # a backup or another worker, mid-read
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM revisions").fetchone()
        with pytest.warns(RuntimeWarning, match=r"still in the write-ahead log.*store\.checkpoint\(\)"):
            if call == "purge":
                store.purge("private")
            else:
                asyncio.run(store.apurge("private"))
        assert store.revisions("private") == [] and store.sessions() == ["public"]
        assert b"XK-SECRET-4242" in _database_bytes(db)  # what the warning says
        assert store.checkpoint() is False
        reader.rollback()
    if finish == "a later write":
        store.commit("public", turn(2), expected_head=None)
    else:
        assert store.checkpoint() is True
    assert b"XK-SECRET-4242" not in _database_bytes(db)
    assert store.sessions() == ["public"]
    store.close()


@pytest.mark.parametrize("call", ["purge", "apurge"])
def test_purge_on_a_full_disk_stays_done_warns_and_truncates_the_log_at_the_next_write(
    db: Path, call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erase commits, then truncating the log fails (SQLITE_FULL: the checkpoint copies the
    log's pages into the main file, which may need to grow).  That failure escaped purge as "nothing
    was written and what was stored is intact" although the session was erased, and the log kept
    its text with no warning and no retry.  Now it is handled as a reader holding the log is."""
    from context_gatekeeper.stores import sqlite as sqlite_store

    def full_disk(conn: sqlite3.Connection, *, wait: bool) -> bool:
        error = sqlite3.OperationalError("database or disk is full")
        error.sqlite_errorcode = 13  # SQLITE_FULL, as the driver sets it
        raise error

    store = SQLiteStore(db)
    store.commit("public", turn(1), expected_head=None)
    store.commit("private", append(message("p1", content="my passport is XK-SECRET-4242")), expected_head=None)
    truncate_log = sqlite_store._truncate_log
    monkeypatch.setattr(sqlite_store, "_truncate_log", full_disk)
    with pytest.warns(RuntimeWarning, match=r"still in the write-ahead log.*disk is full.*store\.checkpoint\(\)"):
        if call == "purge":
            store.purge("private")
        else:
            asyncio.run(store.apurge("private"))
    assert store.revisions("private") == [] and store.sessions() == ["public"]
    assert b"XK-SECRET-4242" in _database_bytes(db)  # what the warning says
    monkeypatch.setattr(sqlite_store, "_truncate_log", truncate_log)  # space was freed
    store.commit("public", turn(2), expected_head=None)  # the next write truncates the log
    assert b"XK-SECRET-4242" not in _database_bytes(db)
    assert store.sessions() == ["public"] and store.head("public") == 2
    store.close()


def test_a_commit_holds_the_write_lock_from_its_first_statement(db: Path) -> None:
    """``BEGIN IMMEDIATE``: another connection cannot write between our head read and our insert."""
    mine, theirs = SQLiteStore(db), SQLiteStore(db, busy_timeout=0.05)
    blocked: list[Exception] = []

    def meanwhile(point: str) -> None:
        if point == "begin":
            try:
                theirs.commit("s", turn(2), expected_head=None)
            except StoreUnavailableError as exc:
                blocked.append(exc)

    mine.fault_hook = meanwhile
    mine.commit("s", turn(1), expected_head=None)
    assert len(blocked) == 1 and "locked" in str(blocked[0]) and "busy_timeout" in str(blocked[0])
    assert isinstance(blocked[0], OSError) and isinstance(blocked[0].__cause__, sqlite3.OperationalError)
    assert theirs.commit("s", turn(2), expected_head=None).number == 2
    mine.close()
    theirs.close()


# -- other processes -------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from context_gatekeeper.stores import SQLiteStore
    from context_gatekeeper.testing.store_builders import append, message

    path, mode, arg, tag = sys.argv[1:5]
    print("ready", flush=True)
    sys.stdin.readline()  # wait for the parent's go
    store = SQLiteStore(path)
    if mode == "append":
        for j in range(int(arg)):
            store.commit("s", append(message(f"{tag}-{j}")), expected_head=None)
            time.sleep(0.001)  # pacing, like a chat between turns, so the writers interleave
    else:  # die with SIGKILL at fault point ``arg`` inside the next commit
        def die(point):
            if point == arg:
                os.kill(os.getpid(), signal.SIGKILL)
        store.fault_hook = die
        store.commit("s", append(message("doomed")), expected_head=None)
    """
)


def spawn(db: Path, mode: str, arg: str, tag: str = "child") -> subprocess.Popen:
    """A second Python process running ``CHILD`` on ``db``; returns once it is ready for :func:`go`."""
    paths = [str(Path(context_gatekeeper.__file__).parents[1]), str(Path(__file__).parent)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), mode, arg, tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def go(*procs: subprocess.Popen) -> None:
    """Let the spawned processes start their work."""
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()


def finish(proc: subprocess.Popen) -> int:
    """Wait for a spawned process, close its pipes, and return its exit status."""
    try:
        return proc.wait(timeout=60)
    finally:
        proc.stdin.close()
        proc.stdout.close()


def assert_appends_complete(log: list, tags: list[str], each: int) -> None:
    """``log`` numbers 1..n and holds every tagged append once, each writer's in its order."""
    assert [r.number for r in log] == list(range(1, len(tags) * each + 1))
    ids = put_ids(log)
    for tag in tags:
        assert [i for i in ids if i.startswith(f"{tag}-")] == [f"{tag}-{j}" for j in range(each)]


def test_another_process_appending_at_the_same_time_loses_nothing(db: Path) -> None:
    store = SQLiteStore(db)
    proc = spawn(db, "append", "150")
    go(proc)
    for j in range(150):
        store.commit("s", append(message(f"parent-{j}")), expected_head=None)
        time.sleep(0.001)
    assert finish(proc) == 0
    assert_appends_complete(store.revisions("s"), ["parent", "child"], 150)
    store.close()


def test_processes_opening_a_new_file_together_all_succeed(db: Path) -> None:
    procs = [spawn(db, "append", "25", tag=f"p{i}") for i in range(4)]
    go(*procs)
    assert [finish(proc) for proc in procs] == [0] * 4
    store = SQLiteStore(db)
    assert_appends_complete(store.revisions("s"), [f"p{i}" for i in range(4)], 25)
    assert store.applied_migrations() == [(m.version, m.name) for m in MIGRATIONS]
    store.close()


@pytest.mark.parametrize("point", ["written", "before_commit"])
def test_a_writer_killed_inside_a_commit_leaves_the_previous_revision_intact(db: Path, point: str) -> None:
    store = SQLiteStore(db)
    fill(store, "s", 3)
    before = everything(store)
    proc = spawn(db, "die", point)
    go(proc)
    assert finish(proc) == -signal.SIGKILL
    assert everything(store) == before  # seen by a connection that stayed open
    store.close()
    again = SQLiteStore(db)
    assert everything(again) == before
    assert again.commit("s", turn(4), expected_head=None).number == 4
    again.close()
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()


@pytest.mark.parametrize(
    "text",
    ['[{"op":"put"}]', ' [1] ', '[1] [2]', '[1', '', '\ufeff[1]', '{"a": "\\ud800"}', b'[1, 2]', 7, None, '"x"'],
    ids=["stored", "spaces", "two-values", "cut", "empty", "bom", "escape", "bytes", "int", "none", "string"],
)
def test_stored_json_reads_as_json_loads_does(text: Any) -> None:
    """The stores' reader of changes JSON (the decoder's scanner, for speed) gives what
    json.loads gives, errors (type and message) included."""
    import json

    from context_gatekeeper.stores.schema import _decoded

    try:
        expected: Any = ("ok", json.loads(text))
    except Exception as exc:  # noqa: BLE001 - whatever json.loads raises, _decoded must raise too
        expected = ("error", type(exc), str(exc))
    try:
        got: Any = ("ok", _decoded(text))
    except Exception as exc:  # noqa: BLE001
        got = ("error", type(exc), str(exc))
    assert got == expected
