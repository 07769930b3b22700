"""What a store says when its storage fails, or its input cannot be stored.

Storage failures (locked, full, read-only, unreachable) raise ``StoreUnavailableError``
(a ``StoreError`` and an ``OSError``) with the driver's error as ``__cause__`` and nothing
written; metadata that JSON cannot keep is refused with ``InvalidInputError`` before any
write; text is normalised once, at the store's boundary, so a writer and a fresh reader
hold the same text; a store written before ``commit`` took ``renew_taken_ids`` keeps
working.  Full and read-only disks are real: a size-limited tmpfs (root and ``mount``
needed; skipped, saying why, elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import context_gatekeeper
from context_gatekeeper import (
    GatekeeperError,
    InvalidInputError,
    StoreCapabilityError,
    StoreError,
    StoreUnavailableError,
    Transcript,
)
from context_gatekeeper.errors import CorruptLogError, InvalidTypeError, SchemaVersionError, StoreClosedError
from context_gatekeeper.stores import InMemoryStore, SQLiteStore, Store
from context_gatekeeper.stores.base import takes_keyword
from context_gatekeeper.testing.store_builders import append, fill, message, turn
from context_gatekeeper.records.revisions import Revision
from pg_support import postgres_dsn, prefix_for


# -- the hierarchy ------------------------------------------------------------------------------
def test_store_errors_share_a_root_and_keep_their_builtins() -> None:
    for cls in (CorruptLogError, SchemaVersionError, StoreClosedError):
        assert issubclass(cls, StoreError) and issubclass(cls, RuntimeError)
    assert issubclass(StoreUnavailableError, StoreError) and issubclass(StoreUnavailableError, OSError)
    assert issubclass(StoreCapabilityError, StoreError) and issubclass(StoreCapabilityError, TypeError)
    assert issubclass(StoreError, GatekeeperError)


# -- real disks: full, read-only -----------------------------------------------------------------
@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    """A 2 MiB tmpfs at a fresh folder; yields it and a function remounting it read-only."""
    if os.geteuid() != 0:
        pytest.skip("a size-limited tmpfs needs root (mount); not run here")
    folder = tmp_path / "mnt"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount refused in this sandbox: {done.stderr.strip() or done.returncode}")

    def read_only() -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, capture_output=True)

    try:
        yield folder, read_only
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_disk_is_reported_and_loses_no_acknowledged_revision(tmpfs: tuple[Path, Any]) -> None:
    folder, _ = tmpfs
    path = folder / "chat.db"
    store = SQLiteStore(path)
    t = Transcript("s", store=store)
    acknowledged = 0
    with pytest.raises(StoreUnavailableError, match="disk holding .* is full") as caught:
        for n in range(1000):
            t.append(user=f"{n} " + uuid.uuid4().hex * 2000, assistant="ok")  # 64 KB each, incompressible
            acknowledged += 1
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError) and isinstance(caught.value, OSError)
    assert acknowledged > 0
    assert store.head("s") == acknowledged  # the failed append wrote nothing
    store.close()
    again = SQLiteStore(path, read_only=True)
    assert Transcript("s", store=again).head == acknowledged
    again.close()


def test_a_database_on_a_read_only_mount_opens_for_reading(tmpfs: tuple[Path, Any]) -> None:
    folder, read_only = tmpfs
    path = folder / "chat.db"
    store = SQLiteStore(path)
    Transcript("s", store=store).append(user="kept", assistant="for reading")
    store.close()  # checkpoints the log into the file
    read_only()
    with pytest.raises(StoreUnavailableError, match="read_only=True") as caught:
        SQLiteStore(path)
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    reader = SQLiteStore(path, read_only=True)
    assert [m.content for m in Transcript("s", store=reader).messages] == ["kept", "for reading"]
    with pytest.raises(StoreUnavailableError, match="read_only=True"):
        reader.commit("s", append(message("x")), expected_head=None)
    assert reader.head("s") == 1
    reader.close()


def test_read_only_refuses_writes_on_a_writable_file(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    SQLiteStore(path).close()
    reader = SQLiteStore(path, read_only=True)
    before = path.read_bytes()
    for write in (lambda: reader.commit("s", append(message("x")), expected_head=None), lambda: reader.purge("s"),
                  lambda: reader.truncate("s", 0), reader.checkpoint):  # (checkpoint: was a "disk I/O error")
        with pytest.raises(StoreUnavailableError, match="read_only=True"):
            write()
    reader.close()
    assert path.read_bytes() == before
    with pytest.raises(InvalidInputError, match="memory"):
        SQLiteStore(":memory:", read_only=True)


def _copy_of_a_live_database(into: Path, *, in_the_log: int = 2) -> Path:
    """A database of 5 revisions, the last ``in_the_log`` of them only in its -wal file, copied
    (the file and its -wal, no -shm) into the folder ``into`` while its writer, beside that
    folder, has it open: as a backup or an image layer takes a live folder."""
    source = into.parent / f"{into.name}.live.db"
    writer = SQLiteStore(source)
    fill(writer, "s", 5 - in_the_log)
    writer.checkpoint()  # the -wal is empty now
    for n in range(6 - in_the_log, 6):
        writer.commit("s", turn(n), expected_head=None)
    copy = into / "chat.db"
    shutil.copy(source, copy)
    shutil.copy(f"{source}-wal", f"{copy}-wal")
    writer.close()
    return copy


def test_read_only_refuses_a_write_ahead_log_it_cannot_read(tmp_path: Path) -> None:
    """Where SQLite cannot make the -shm file it needs to read a -wal (a read-only mount; here a
    -shm link to nowhere, which fails alike for root), the file alone would be read without the
    -wal's revisions: refused, saying to copy both to a writable folder; an empty -wal is read."""
    folder = tmp_path / "snapshot"
    folder.mkdir()
    shm = folder / "chat.db-shm"
    shm.symlink_to(tmp_path / "no such folder" / "shm")
    copy = _copy_of_a_live_database(folder)
    with pytest.raises(StoreUnavailableError, match=r"write-ahead log .* writable folder") as caught:
        SQLiteStore(copy, read_only=True)
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    shm.unlink()  # a folder SQLite can make the -shm in: the copy reads whole
    reader = SQLiteStore(copy, read_only=True)
    assert reader.head("s") == 5
    reader.close()
    checkpointed = tmp_path / "checkpointed"
    checkpointed.mkdir()
    (checkpointed / "chat.db-shm").symlink_to(tmp_path / "no such folder" / "shm")
    reader = SQLiteStore(_copy_of_a_live_database(checkpointed, in_the_log=0), read_only=True)
    assert reader.head("s") == 5  # nothing in the log: the file alone is the whole database
    reader.close()


def test_a_copy_of_a_live_database_on_a_read_only_mount_is_refused_not_read_short(tmpfs: tuple[Path, Any]) -> None:
    folder, read_only = tmpfs
    copy = _copy_of_a_live_database(folder)
    read_only()
    with pytest.raises(StoreUnavailableError, match=r"write-ahead log .* writable folder"):
        SQLiteStore(copy, read_only=True)


def test_read_only_on_a_file_without_the_stores_tables_says_so(tmp_path: Path) -> None:
    empty, other = tmp_path / "empty.db", tmp_path / "other_app.db"
    empty.touch()  # what a crash during a first open leaves
    with sqlite3.connect(other) as conn:  # another program's database
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    for path in (empty, other):
        before = path.read_bytes()
        with pytest.raises(SchemaVersionError, match="holds no context-gatekeeper tables.*without read_only"):
            SQLiteStore(path, read_only=True)
        assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["empty.db", "other_app.db"]


def test_a_missing_folder_says_what_to_check(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="cannot open") as caught:
        SQLiteStore(tmp_path / "no" / "such" / "folder" / "chat.db")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_missing_folder_is_named_as_missing(tmp_path: Path, read_only: bool) -> None:
    folder = tmp_path / "no" / "such"
    with pytest.raises(StoreUnavailableError, match=r"folder .*no/such.* does not exist") as caught:
        SQLiteStore(folder / "chat.db", read_only=read_only)
    assert "-wal" not in str(caught.value) and not (tmp_path / "no").exists()


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_folder_given_as_the_database_says_it_is_a_folder(tmp_path: Path, read_only: bool) -> None:
    """A folder said "its folder is missing or not writable" (read-write) or gave the advice about
    deleted -wal and -shm files (read-only: SQLite's "disk I/O error")."""
    folder = tmp_path / "chats"
    folder.mkdir()
    with pytest.raises(StoreUnavailableError, match=r"is a folder, not a database file.*chats/chat\.db") as caught:
        SQLiteStore(folder, read_only=read_only)
    text = str(caught.value)
    assert "-wal" not in text and "missing" not in text and "not writable" not in text
    assert isinstance(caught.value.__cause__, sqlite3.Error) and list(folder.iterdir()) == []
    with pytest.raises(StoreUnavailableError, match="is a folder"):
        Transcript("s", store=folder)


def test_a_missing_file_opened_read_only_says_it_does_not_exist(tmp_path: Path) -> None:
    """It said "its folder is missing ... open SQLiteStore(path, read_only=True)", as it had been."""
    path = tmp_path / "missing.db"
    with pytest.raises(StoreUnavailableError, match=r"does not exist.*read_only=True creates nothing") as caught:
        SQLiteStore(path, read_only=True)
    assert "folder" not in str(caught.value).split("(SQLite")[0] and "open SQLiteStore(path, read_only=True)" not in str(
        caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_disk_too_full_for_the_shm_file_says_the_disk_is_full(tmp_path: Path) -> None:
    """SQLITE_IOERR_SHMSIZE (the -shm index could not be sized: no space) got the advice about
    deleted -wal and -shm files, its extended code masked off.  Here a child process whose files
    may not grow past 16 KiB (RLIMIT_FSIZE; the -shm takes 32 KiB) opens a new database."""
    child = textwrap.dedent("""
        import resource, signal, sys
        from context_gatekeeper.stores import SQLiteStore
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
        try:
            SQLiteStore(sys.argv[1])
        except Exception as exc:
            print(type(exc).__name__, getattr(exc.__cause__, "sqlite_errorname", None), exc)
    """)
    paths = [str(Path(context_gatekeeper.__file__).parents[1])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", child, str(tmp_path / "chat.db")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith("StoreUnavailableError SQLITE_IOERR_SHMSIZE the disk holding"), said
    assert "is full" in said and "-wal and -shm files were not deleted" not in said


# -- locked ------------------------------------------------------------------------------------
def test_a_locked_database_is_reported_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another program holds the write lock
    try:
        with pytest.raises(StoreUnavailableError, match="locked"):
            SQLiteStore(path, busy_timeout=0.05)  # opening migrates in a write transaction: it waits too
        with pytest.raises(StoreUnavailableError, match="locked") as caught:
            Transcript("s", store=store).append(user="waiting", assistant="too long")
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        assert "busy_timeout" in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.head("s") == 0
    Transcript("s", store=store).append(user="now", assistant="fine")
    store.close()


# -- PostgreSQL: a server that cannot be reached ---------------------------------------------------
def test_an_unreachable_postgres_server_is_reported(tmp_path: Path) -> None:
    psycopg = pytest.importorskip("psycopg")
    from context_gatekeeper.stores import PostgresStore

    with pytest.raises(StoreUnavailableError, match="cannot connect") as caught:
        PostgresStore("postgresql://nobody@127.0.0.1:9/none", connect_timeout=1)  # port 9: nothing listens
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)


def test_a_postgres_lock_timeout_is_reported(tmp_path: Path) -> None:
    postgres_dsn()
    import psycopg
    from psycopg_pool import ConnectionPool

    from context_gatekeeper.stores import PostgresStore

    store = PostgresStore(postgres_dsn(), table_prefix=prefix_for(tmp_path))
    Transcript("s", store=store).append(user="hi", assistant="there")
    pool = ConnectionPool(postgres_dsn(), kwargs={"autocommit": True, "options": "-c lock_timeout=50"}, open=True)
    impatient = PostgresStore(pool, table_prefix=prefix_for(tmp_path), lock_timeout=None)  # None: the server's
    holder = psycopg.connect(postgres_dsn(), autocommit=True)
    try:
        with holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (store._session_lock(store._key("s")),))
            with pytest.raises(StoreUnavailableError, match="lock") as caught:
                impatient.commit("s", append(message("late")), expected_head=None)
            assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        assert impatient.head("s") == 1
    finally:
        holder.close()
        impatient.close()
        pool.close()
        store.purge("s")
        store.close()


def open_pg(tmp_path: Path, dsn: str | None = None, **options: Any) -> Any:
    """A PostgresStore on this test's tables (skipped without a server)."""
    postgres_dsn()
    from context_gatekeeper.stores import PostgresStore

    return PostgresStore(dsn or postgres_dsn(), table_prefix=prefix_for(tmp_path), **options)


def with_settings(settings: str) -> str:
    """The test server's DSN with ``settings`` (``-c name=value ...``) for every connection."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(postgres_dsn(), options=settings)


def test_a_postgres_writer_stuck_behind_a_stalled_one_gives_up_after_lock_timeout(tmp_path: Path) -> None:
    import psycopg

    store = open_pg(tmp_path, lock_timeout=0.1)
    store.commit("s", append(message("first")), expected_head=None)
    stalled = psycopg.connect(postgres_dsn(), autocommit=True)  # a writer paused inside its commit

    async def async_commit() -> None:
        try:
            await store.acommit("s", append(message("late")), expected_head=None)
        finally:
            await store.aclose()

    try:
        with stalled.transaction():
            stalled.execute("SELECT pg_advisory_xact_lock(%s)", (store._session_lock(store._key("s")),))
            for commit in (lambda: store.commit("s", append(message("late")), expected_head=None),
                           lambda: asyncio.run(async_commit())):
                with pytest.raises(StoreUnavailableError, match="lock_timeout") as caught:
                    commit()
                assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
    finally:
        stalled.close()
        store.close()
    reader = open_pg(tmp_path)
    assert reader.head("s") == 1  # nothing was written
    reader.close()


def test_a_postgres_setup_waits_out_another_workers_migration_beyond_lock_timeout(tmp_path: Path) -> None:
    import threading
    import time

    import psycopg

    from context_gatekeeper.stores import PostgresStore

    first = open_pg(tmp_path, lock_timeout=0.05)
    key = first._lock_key("setup")
    outcome: dict[str, Any] = {}

    def open_another() -> None:
        try:
            outcome["store"] = PostgresStore(postgres_dsn(), table_prefix=prefix_for(tmp_path), lock_timeout=0.05)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    with psycopg.connect(postgres_dsn(), autocommit=True) as migrating:  # another worker, migrating
        migrating.execute("SELECT pg_advisory_lock(%s)", (key,))
        opener = threading.Thread(target=open_another)
        opener.start()
        waited = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' "
                  "AND now() - state_change > interval '500 milliseconds'")  # ten times lock_timeout, by the server's clock
        deadline = time.monotonic() + 30
        while not migrating.execute(waited).fetchone()[0]:
            assert "error" not in outcome, f"setup gave up: {outcome.get('error')!r}"
            assert time.monotonic() < deadline, "setup never waited for the migration's lock"
            time.sleep(0.01)
        migrating.execute("SELECT pg_advisory_unlock(%s)", (key,))
        opener.join(30)
    assert "store" in outcome, outcome
    outcome["store"].close()
    first.close()


@pytest.mark.parametrize("value, error", [(0, InvalidInputError), (-1, InvalidInputError),
                                          (float("inf"), InvalidInputError), (30 * 86400, InvalidInputError),
                                          ("30", TypeError), (True, TypeError)])
def test_a_postgres_lock_timeout_must_be_positive_seconds(tmp_path: Path, value: Any, error: type) -> None:
    with pytest.raises(error, match="lock_timeout"):
        open_pg(tmp_path, lock_timeout=value)


def test_a_read_only_postgres_connection_is_reported(tmp_path: Path) -> None:
    import psycopg

    writer = open_pg(tmp_path)
    writer.commit("s", append(message("first")), expected_head=None)
    standby = with_settings("-c default_transaction_read_only=on")  # what a hot standby answers
    with pytest.raises(StoreUnavailableError, match="read-only") as caught:
        open_pg(tmp_path / "fresh", standby)  # setup() must create these tables: it writes
    assert isinstance(caught.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
    open_pg(tmp_path, standby).close()  # tables that are up to date: setup() only reads
    reader = open_pg(tmp_path, standby, setup=False)
    assert reader.head("s") == 1  # reads work
    with pytest.raises(StoreUnavailableError, match="primary"):
        reader.commit("s", append(message("second")), expected_head=None)
    assert writer.head("s") == 1
    reader.close()
    writer.close()


@contextlib.contextmanager
def throwaway_role(prefix: str) -> Iterator[tuple[Any, str]]:
    """``(an autocommit admin connection, the name of a new NOLOGIN role)`` the test server's
    role may switch to (``-c role=...``); the role and what it owns are dropped afterwards.
    Skips when the server's role cannot create roles."""
    import psycopg
    from psycopg import sql

    role = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        if not admin.execute("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
            pytest.skip("the test server's role cannot create a role to test with")
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        try:
            if admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is False:
                admin.execute(sql.SQL("GRANT {} TO current_user").format(sql.Identifier(role)))
            yield admin, role
        finally:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_postgres_role_without_privileges_is_reported(tmp_path: Path) -> None:
    import psycopg
    from psycopg import sql

    writer = open_pg(tmp_path)
    writer.commit("s", append(message("first")), expected_head=None)
    with throwaway_role("cg_unprivileged") as (admin, role):
        limited = open_pg(tmp_path, with_settings(f"-c role={role}"), setup=False)
        try:
            with pytest.raises(StoreUnavailableError, match="privilege") as caught:
                limited.commit("s", append(message("second")), expected_head=None)
            assert isinstance(caught.value.__cause__, psycopg.errors.InsufficientPrivilege)
            with pytest.raises(StoreUnavailableError, match="GRANT|Grant"):
                limited.head("s")
        finally:
            limited.close()
    assert writer.head("s") == 1
    writer.close()


def test_a_postgres_role_without_create_opens_tables_that_are_up_to_date(tmp_path: Path) -> None:
    """A worker role with SELECT, INSERT, UPDATE and DELETE on the tables a migration job
    created, but no CREATE on their schema, opens them with the default setup=True (a URL
    cannot say setup=False); on tables still to create it is told about setup=False."""
    import psycopg
    from psycopg import sql

    migrated = open_pg(tmp_path)  # the migration job
    migrated.commit("s", append(message("first")), expected_head=None)
    with throwaway_role("cg_worker") as (admin, role):
        if admin.execute("SELECT has_schema_privilege(%s, current_schema(), 'CREATE')", (role,)).fetchone()[0]:
            pytest.skip("every role may create tables in the test server's schema (PostgreSQL < 15 defaults)")
        for table in migrated._names.values():
            admin.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(table, sql.Identifier(role)))
        worker = open_pg(tmp_path, with_settings(f"-c role={role}"))  # setup=True, the default
        try:
            assert worker.commit("s", append(message("second")), expected_head=None).number == 2
            assert worker.applied_migrations() == migrated.applied_migrations()
        finally:
            worker.close()
        with pytest.raises(StoreUnavailableError, match="setup=False") as caught:
            open_pg(tmp_path / "fresh", with_settings(f"-c role={role}"))  # no tables yet: it must create them
        assert isinstance(caught.value.__cause__, psycopg.errors.InsufficientPrivilege)
    assert migrated.head("s") == 2
    migrated.close()


def test_a_postgres_row_refused_by_a_constraint_added_outside_the_library_is_reported(tmp_path: Path) -> None:
    import psycopg
    from psycopg import sql

    store = open_pg(tmp_path)
    store.commit("s", append(message("first")), expected_head=None)
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT only_one CHECK (number < 2)")
                      .format(store._names["revisions"]))
    with pytest.raises(StoreUnavailableError, match="nothing was written") as caught:
        store.commit("s", append(message("second")), expected_head=None)
    assert isinstance(caught.value.__cause__, psycopg.IntegrityError)
    assert store.head("s") == 1
    store.close()


@pytest.mark.parametrize("dsn", [
    "postgresql://app:S3cretPassw0rd@[db.internal:5432/chat",
    "postgresql://app:S3cretPassw0rd@db.internal/chat?sslmode",
    "host=db.internal password=S3cretPassw0rd dbname",
    'postgresql://app:S3cret"Passw0rd%zz@db/chat',  # a quote inside the password, then a bad escape
    "host=db.internal sslpassword=S3cretPassw0rd dbname",
    "garbage string",
])
def test_a_malformed_postgres_connection_string_is_refused_without_its_password(dsn: str) -> None:
    pytest.importorskip("psycopg")
    from context_gatekeeper.stores import PostgresStore

    with pytest.raises(InvalidInputError, match="connection string") as caught:
        PostgresStore(dsn)
    assert "S3cret" not in str(caught.value) and "Passw0rd" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # psycopg's message quotes it


# -- input that cannot be stored ----------------------------------------------------------------
STORES = {
    "memory": lambda where: InMemoryStore(),
    "sqlite": lambda where: SQLiteStore(where / "chat.db"),
}


@pytest.fixture(params=sorted(STORES) + ["postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgres":
        postgres_dsn()
        from context_gatekeeper.stores import PostgresStore

        opened: Store = PostgresStore(postgres_dsn(), table_prefix=prefix_for(tmp_path))
    else:
        opened = STORES[request.param](tmp_path)
    yield opened
    for session in opened.sessions():
        opened.purge(session)
    opened.close()


class Opaque:
    """Something JSON cannot keep."""


@pytest.mark.parametrize("metadata", [{"when": Opaque()}, {"raw": b"bytes"}, {"set": {1, 2}}])
def test_metadata_that_cannot_be_stored_is_refused_before_anything_is_written(store: Store, metadata: dict) -> None:
    t = Transcript("s", store=store)
    t.append(user="first", assistant="kept")
    with pytest.raises(InvalidInputError, match="cannot be stored"):
        t.append(messages=[{"role": "user", "content": "x", "metadata": metadata}])
    with pytest.raises(InvalidInputError, match="cannot be stored"):  # the store itself refuses it too
        store.commit("s", append(message("direct", metadata=metadata)), expected_head=None)
    assert store.head("s") == 1 and len(Transcript("s", store=store).messages) == 2


@pytest.mark.parametrize("field", ["instruction", "model"])
@pytest.mark.parametrize("value", [123, b"gemini-2.5-flash", ["shorten"]], ids=["int", "bytes", "list"])
def test_an_instruction_or_model_name_that_is_not_text_is_refused_before_anything_is_written(
    store: Store, field: str, value: Any, tmp_path: Path
) -> None:
    """Every store took them on: an int failed with a bare AttributeError, and PostgreSQL wrote a
    bytes model name as text that its own hash chain then refused on every read of the session."""
    from dataclasses import replace

    from context_gatekeeper.testing.store_builders import edit

    [first] = fill(store, "s", 1)
    before = store.revisions("s")
    revision = replace(edit(first.added[0], "better"), **{field: value})
    with pytest.raises(InvalidTypeError, match=f"{'instruction' if field == 'instruction' else 'model name'} must be a str"):
        store.commit("s", revision, expected_head=1)

    postgres = type(store).__name__ == "PostgresStore"
    twin: Any = open_pg(tmp_path) if postgres else store  # PostgreSQL's native acommit, on a store of its own

    async def async_commit() -> None:
        try:
            await twin.acommit("s", revision, expected_head=1)
        finally:
            if postgres:
                await twin.aclose()

    with pytest.raises(InvalidTypeError, match="must be a str or None"):
        asyncio.run(async_commit())
    assert store.revisions("s") == before and store.head("s") == 1
    assert [m.content for m in Transcript("s", store=store).messages] == ["text of u1", "text of a1"]


def test_a_cycle_in_metadata_is_refused(store: Store) -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(InvalidInputError, match="cannot be stored"):
        store.commit("s", append(message("m", metadata=cyclic)), expected_head=None)
    assert store.head("s") == 0


# -- one text per revision ---------------------------------------------------------------------
def test_a_writer_and_a_fresh_reader_hold_the_same_text(store: Store) -> None:
    a = Transcript("s", store=store)
    a.append(messages=[{"id": "lc-1", "role": "user", "content": "\ud83d\ude00 hi", "metadata": {"k\ud83d\ude00": "\ud83d\ude00"}}])
    a.append(user="from api \udc80 bytes", assistant="ok")
    fresh = Transcript("s", store=store)
    assert [m.content for m in a.messages] == [m.content for m in fresh.messages] == ["\U0001F600 hi", "from api \\udc80 bytes", "ok"]
    assert a.messages[0].metadata == fresh.messages[0].metadata == {"k\U0001F600": "\U0001F600"}
    assert store.revisions("s") == Transcript("s", store=store).history()
    # a retried append of the same message (as first sent) is still recognised as a retry
    again = a.append(messages=[{"id": "lc-1", "role": "user", "content": "\ud83d\ude00 hi"}])
    assert again.changes == () and store.head("s") == 2


def test_sessions_stored_with_lone_surrogates_still_open_and_edit(tmp_path: Path) -> None:
    """Rows written before normalisation hold lone surrogates: they load, and change."""
    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    Transcript("s", store=store).append(user="x", assistant="y")
    store.close()
    conn = sqlite3.connect(path)
    with conn:  # the text as an older version stored it (JSON-escaped lone surrogate)
        conn.execute("UPDATE revisions SET changes = replace(changes, '\"x\"', '\"old \\udc80 text\"')")
        conn.execute("ALTER TABLE revisions DROP COLUMN digest")
        conn.execute("DELETE FROM schema_migrations WHERE version = 4")
    conn.close()
    store = SQLiteStore(path)
    store.truncate("s", 1)  # sets nothing aside: rebuilds the id index from the log, as the migration did
    t = Transcript("s", store=store)
    assert t.messages[0].content == "old \udc80 text"
    from context_gatekeeper.records.operations import Replace

    t.apply([Replace(t.messages[0].id, "new \udc80 text")])
    assert [m.content for m in Transcript("s", store=store).messages][0] == "new \\udc80 text"
    t.undo()  # puts the old version back, as every store now keeps text: escaped
    assert Transcript("s", store=store).messages[0].content == t.messages[0].content == "old \\udc80 text"
    store.close()


# -- a store written before commit took renew_taken_ids -----------------------------------------------
class OldStore(InMemoryStore):
    """A third-party store whose commit predates ``renew_taken_ids``."""

    def commit(self, session_id: str, revision: Revision, *, expected_head: int | None) -> Revision:  # type: ignore[override]
        return super().commit(session_id, revision, expected_head=expected_head)


def test_the_library_detects_what_commit_takes() -> None:
    assert takes_keyword(InMemoryStore(), "renew_taken_ids") and not takes_keyword(OldStore(), "renew_taken_ids")
    assert takes_keyword(SQLiteStore(":memory:"), "renew_taken_ids")

    class Forwarding(InMemoryStore):
        def commit(self, session_id: str, revision: Revision, **options: Any) -> Revision:  # type: ignore[override]
            return super().commit(session_id, revision, **options)

    assert takes_keyword(Forwarding(), "renew_taken_ids")


def test_renewing_ids_works_on_a_store_without_the_keyword() -> None:
    store = OldStore()
    t = Transcript("s", store=store)
    t.append(messages=[{"id": "lc-1", "role": "user", "content": "hi"}], renew_taken_ids=True)
    renewed = t.append(
        messages=[{"id": "lc-1", "role": "user", "content": "other"}, {"id": "lc-2", "role": "assistant", "content": "a"}],
        renew_taken_ids=True,
    )
    new_id = renewed.added[0].id
    assert new_id != "lc-1" and renewed.changes[1].after == new_id
    assert [(m.id, m.content) for m in Transcript("s", store=store).messages] == [("lc-1", "hi"), (new_id, "other"), ("lc-2", "a")]
    retry = t.append(messages=[{"id": "lc-1", "role": "user", "content": "hi"}], renew_taken_ids=True)
    assert retry.changes == () and store.head("s") == 2
    other = Transcript("s", store=store)  # another writer took lc-9 since t last read: t renews against it
    other.append(messages=[{"id": "lc-9", "role": "user", "content": "theirs"}])
    mine = t.append(messages=[{"id": "lc-9", "role": "user", "content": "mine"}], renew_taken_ids=True)
    assert mine.added[0].id != "lc-9" and [m.content for m in other.messages][-2:] == ["theirs", "mine"]


def test_a_store_without_the_keyword_is_refused_by_name_not_with_a_type_error() -> None:
    store = OldStore()
    with pytest.raises(StoreCapabilityError, match="renew_taken_ids") as caught:
        asyncio.run(store.acommit("s", append(message("x")), expected_head=None, renew_taken_ids=True))
    assert isinstance(caught.value, TypeError)
    assert store.head("s") == 0
    asyncio.run(store.acommit("s", append(message("x")), expected_head=None))  # without it: works
    assert store.head("s") == 1


def test_every_postgres_secret_is_hidden_in_repr_errors_and_what_a_pickle_names(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    from psycopg.conninfo import make_conninfo

    from context_gatekeeper.integration import store_spec
    from context_gatekeeper.stores import PostgresStore
    from context_gatekeeper.stores.postgres_conninfo import is_secret_key

    assert all(map(is_secret_key, ("password", "sslpassword", "oauth_client_secret", "scram_client_key")))
    assert not any(map(is_secret_key, ("sslkey", "host", "user", "passfile")))
    store = PostgresStore(make_conninfo(postgres_dsn(), sslpassword="KEY-PASSPHRASE"), table_prefix=prefix_for(tmp_path),
                          setup=False)
    try:
        for text in (repr(store), str(store_spec(store))):
            assert "PASSPHRASE" not in text
        assert "PASSPHRASE" in store_spec(store, keep_password=True)["postgres"]  # a copy in this process keeps it
    finally:
        store.close()
    with pytest.raises(StoreUnavailableError) as caught:
        PostgresStore("host=127.0.0.1 port=1 dbname=x user=u password=PW sslpassword=KEY-PASSPHRASE", connect_timeout=2)
    assert "PASSPHRASE" not in str(caught.value) and "PW" not in str(caught.value).replace("PostgreSQL", "")


def test_a_store_opened_out_of_file_descriptors_does_not_blame_its_writable_folder(tmp_path: Path) -> None:
    """With every file descriptor of the process in use (EMFILE), SQLite says "unable to open database
    file"; the message blamed the folder ("its folder is not writable") without checking it.  Now it
    says the cause is unknown and points at SQLite's own text (a subprocess: the limit stays there)."""
    path = tmp_path / "chat.db"
    SQLiteStore(path).close()
    script = textwrap.dedent(f"""
        import os, resource
        from context_gatekeeper.stores import SQLiteStore
        held = []
        try:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            SQLiteStore({str(path)!r})
        except Exception as exc:
            for fd in held:
                os.close(fd)
            print(type(exc).__name__, exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.startswith("StoreUnavailableError"), out
    assert "not writable" not in out and "cause is unknown" in out, out


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes whatever the permissions say")
@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_an_unreadable_file_in_a_writable_folder_is_named_not_the_folder(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "chat.db"
    SQLiteStore(path).close()
    path.chmod(0)
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            SQLiteStore(path, read_only=read_only)
    finally:
        path.chmod(0o600)
    text = str(caught.value)
    assert "chat.db" in text.split("(SQLite")[1] and "not writable" not in text and "permissions" in text, text


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes whatever the permissions say")
def test_a_read_only_folder_is_still_named(tmp_path: Path) -> None:
    folder = tmp_path / "chats"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(StoreUnavailableError, match="folder .* not writable"):
            SQLiteStore(folder / "chat.db")
    finally:
        folder.chmod(0o700)
