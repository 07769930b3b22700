"""The embedded SQLite store: one file, several threads and processes, standard library only.

Every write is one ``BEGIN IMMEDIATE`` transaction on a WAL-mode database with a
busy timeout, so writers in different processes queue instead of failing, readers
never block writers, and a crash at any point leaves the previous revision intact.

Schema changes are an add-only list of :data:`MIGRATIONS`; ``setup()`` applies the
ones a file lacks, in order, in one transaction, and records each in
``schema_migrations``.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import CorruptLogError, InvalidInputError, SchemaVersionError, StoreClosedError, StoreUnavailableError
from ..records.revisions import Revision
from .base import MAX_REVISION, FaultHook, Store, checked_after, checked_keep, checked_seconds, prepare_commit
from .chain import (
    anchor_damage, chained_prefix, forget_decoded, genesis, next_read, rechained, row_digest, unfollowable, verified,
)
from .integrity import IdEntry
from .schema import (
    Migration, backfill_index, changes_text, checked_session, created_objects, id_key, index_rows, missing_error,
    refuse_newer, revision_from_row, schema_behind, unrecorded_error,
)
from .unavailable import cannot_open, sqlite_errors
from .vectors import (
    VectorRow, VectorStore, checked_dimension, checked_embedder, checked_rows, pack_vector, refused_save, stored_vectors,
)

__all__ = ["SQLiteStore", "Migration", "MIGRATIONS", "SchemaVersionError"]


def _backfill(conn: sqlite3.Connection) -> None:
    """Index every stored session's message ids (sessions that no longer replay included)."""
    for (session_id,) in conn.execute("SELECT DISTINCT session_id FROM revisions").fetchall():
        _write_index(conn, session_id, backfill_index(session_id, conn.execute(_SELECT, (session_id, 0))))


def _backfill_chain(conn: sqlite3.Connection) -> None:
    """Give the valid prefix of every stored session its hash chain (see :mod:`.chain`)."""
    for (session_id,) in conn.execute("SELECT DISTINCT session_id FROM revisions").fetchall():
        chained = chained_prefix(session_id, conn.execute(_SELECT, (session_id, 0)).fetchall())
        conn.executemany(
            "UPDATE revisions SET digest = ? WHERE session_id = ? AND number = ?",
            [(digest, session_id, number) for number, digest in chained],
        )


_AMBIGUOUS_SESSIONS = """SELECT DISTINCT session_id FROM revisions WHERE digest IS NOT NULL AND (
    (instruction IS NOT NULL AND (typeof(instruction) <> 'text' OR instruction = 'None'
        OR instr(instruction, char(31)) > 0 OR substr(instruction, 1, 1) = char(30)))
    OR (model IS NOT NULL AND (typeof(model) <> 'text' OR model = 'None'
        OR instr(model, char(31)) > 0 OR substr(model, 1, 1) = char(30))))"""
"""Sessions with a row whose instruction or model name :func:`.chain.chain_text` escapes: the
only rows whose digest migration 5 changes (a superset: :func:`.chain.rechained` decides)."""


def _backfill_unambiguous_chain(conn: sqlite3.Connection) -> None:
    """Migration 5: the digests of rows whose text fields the first chain wrote ambiguously,
    recomputed after checking the first chain up to them (see :mod:`.chain`)."""
    for (session_id,) in conn.execute(_AMBIGUOUS_SESSIONS).fetchall():
        changed = rechained(session_id, conn.execute(_SELECT_CHAINED, (session_id, 0)).fetchall())
        conn.executemany(
            "UPDATE revisions SET digest = ? WHERE session_id = ? AND number = ?",
            [(digest, session_id, number) for number, digest in changed],
        )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "revisions",
        (
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
            )""",
        ),
    ),
    Migration(
        2,
        "message id index and set-aside revisions",
        (
            """CREATE TABLE message_ids (
                session_id TEXT    NOT NULL,
                message_id BLOB    NOT NULL,
                present    INTEGER NOT NULL,
                digest     TEXT    NOT NULL,
                PRIMARY KEY (session_id, message_id)
            ) WITHOUT ROWID""",
            # the revisions' columns and the time they were set aside; no keys: a number may recur
            "CREATE TABLE set_aside_revisions AS SELECT *, 0.0 AS set_aside_at FROM revisions WHERE 0",
        ),
        _backfill,
    ),
    Migration(
        3,
        "saved vectors",
        (
            """CREATE TABLE vectors (
                session_id TEXT    NOT NULL,
                embedder   TEXT    NOT NULL,
                dimension  INTEGER NOT NULL CHECK (dimension >= 1),
                text_hash  TEXT    NOT NULL,
                message_id BLOB    NOT NULL,
                vector     BLOB    NOT NULL,
                created_at REAL    NOT NULL,
                PRIMARY KEY (session_id, embedder, dimension, text_hash, message_id)
            ) WITHOUT ROWID""",
        ),
    ),
    Migration(4, "revision hash chain", ("ALTER TABLE revisions ADD COLUMN digest TEXT",), _backfill_chain),
    Migration(5, "unambiguous hash chain fields", (), _backfill_unambiguous_chain),
)
"""Add new migrations at the end; never change or remove a released one."""


_CREATE_MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
)"""
_COLUMNS = "number, parent, kind, instruction, model, created_at, base, target, changes"
_HEAD = "SELECT COALESCE(MAX(number), 0) FROM revisions WHERE session_id = ?"
_TIP = "SELECT number, created_at FROM revisions WHERE session_id = ? ORDER BY number DESC LIMIT 1"
_TIP_DIGEST = "SELECT number, digest FROM revisions WHERE session_id = ? ORDER BY number DESC LIMIT 1"
_SELECT = f"SELECT {_COLUMNS} FROM revisions WHERE session_id = ? AND number > ? ORDER BY number"
_SELECT_CHAINED = f"SELECT {_COLUMNS}, digest FROM revisions WHERE session_id = ? AND number >= ? ORDER BY number"
_DIGEST = "SELECT digest FROM revisions WHERE session_id = ? AND number = ?"
_INSERT = f"INSERT INTO revisions (session_id, {_COLUMNS}, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_UPSERT_ID = """INSERT INTO message_ids (session_id, message_id, present, digest) VALUES (?, ?, ?, ?)
    ON CONFLICT (session_id, message_id) DO UPDATE SET present = excluded.present, digest = excluded.digest"""
_LOOKUP_CHUNK = 400
_SAVE_VECTOR = """INSERT INTO vectors (session_id, embedder, dimension, text_hash, message_id, vector, created_at)
    VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, embedder, dimension, text_hash, message_id)
    DO UPDATE SET vector = excluded.vector, created_at = excluded.created_at"""
_LOAD_VECTORS = """SELECT message_id, text_hash, embedder, dimension, vector FROM vectors
    WHERE session_id = ? AND embedder = ? AND (? IS NULL OR dimension = ?) ORDER BY created_at"""
_HAS_MIGRATION = "SELECT 1 FROM schema_migrations WHERE version = ?"
_HAS_REVISIONS = "SELECT EXISTS (SELECT 1 FROM revisions WHERE session_id = ?)"
_DROP_OTHER_TEXTS = """WITH new (message_id, text_hash) AS (VALUES {pairs})
    DELETE FROM vectors WHERE session_id = ? AND EXISTS (SELECT 1 FROM new
    WHERE new.message_id = vectors.message_id AND new.text_hash <> vectors.text_hash)"""
_VECTOR_CHUNK = 400  # (message id, text hash) pairs a statement; one pass over the session's rows each
_PRUNE_REMOVED = """DELETE FROM vectors WHERE session_id = ? AND message_id IN
    (SELECT message_id FROM message_ids WHERE session_id = ? AND present = 0)"""
_PRUNE_SET_ASIDE = """DELETE FROM vectors WHERE session_id = ?1 AND (
    NOT EXISTS (SELECT 1 FROM revisions WHERE session_id = ?1)
    OR (message_id <> x'' AND message_id NOT IN (SELECT message_id FROM message_ids WHERE session_id = ?1 AND present)))"""
"""After a truncate: the vectors of messages the kept log no longer holds, and every vector of a
session left with no revisions (which takes none, see :mod:`.vectors`)."""


class SQLiteStore(Store, VectorStore):
    """Revision logs (and saved vectors, table ``vectors``) in an SQLite file (WAL mode).

    Args:
        path: the database file (created if missing).  ``":memory:"`` gives a
            private in-memory database, correct across threads (there is one
            connection) but gone on ``close()`` and invisible to other objects
            and processes.
        busy_timeout: seconds a write waits for another process's write to finish
            before :class:`StoreUnavailableError` ("... is locked ..."): a number >= 0
            (0: never wait), else :class:`InvalidTypeError` / :class:`InvalidInputError`.
        fault_hook: called with "begin", "written" and "before_commit" inside each
            commit's transaction (tests use it to fail or kill a writer there).
        setup: apply missing migrations now (default); pass False to defer to
            an explicit ``setup()``.
        read_only: open the file for reading only (a database on a read-only mount,
            or one another program owns): nothing is created or migrated, and every
            write raises :class:`StoreUnavailableError`.  A file whose folder cannot
            be written is read as it is on disk (SQLite's ``immutable`` mode), so no
            other process may change it meanwhile; if a non-empty ``-wal`` file lies
            beside it (a copy of a live database), which that mode cannot read, opening
            raises :class:`StoreUnavailableError` instead of missing its revisions.  A file
            without the store's tables raises :class:`SchemaVersionError`.

    Storage failures (locked past ``busy_timeout``, disk full, I/O errors, a file that
    cannot be opened or is damaged) raise :class:`StoreUnavailableError` (an ``OSError``)
    saying what to do, with SQLite's error as ``__cause__``.  Every read of revisions checks
    the hash chain (:mod:`.chain`) of the rows it returns: a row edited, removed or moved by
    hand raises :class:`CorruptLogError` naming the first bad revision.  A reader that has
    read rows before checks only those it has not read yet (an open ``Transcript`` catching
    up reads ``revisions(session, after=its head - 1)``), so a row changed after an object read
    it is found when the session is opened anew; meanwhile that object serves the text it read
    and appends after it (``docs/guide/stores.md`` says what the repair then costs, and what to
    do instead).  ``head`` and ``tip`` read the newest row's number alone
    (:class:`CorruptLogError` when it is not an integer).

    Threads: one connection per object, opened with ``check_same_thread=False``
    and used only under a lock.  A sqlite3 connection must not be used by two
    threads at once, and a connection per thread would leak one connection per
    short-lived worker thread (``asyncio.to_thread`` pools come and go) and make
    ``close()`` unsafe while another thread is mid-transaction.  The lock costs
    little: SQLite admits one writer at a time anyway and reads take
    microseconds.  Processes (or several objects on one file) each have their
    own connection and are coordinated by SQLite itself: WAL, ``BEGIN
    IMMEDIATE`` for every write and the busy timeout.

    ``purge`` also overwrites the erased rows (``secure_delete``) and truncates
    the write-ahead log, so a purged session's text does not linger in the files
    (see :meth:`purge` for a log another connection keeps from being truncated).

    A file holding another program's tables under the store's names is refused
    (:class:`SchemaVersionError`) before anything in it is changed (the switch to
    WAL included, which rewrites the file's header).  So is, when ``setup`` is True, a
    file migrated by a newer version, one holding the tables or columns of a migration
    that ``schema_migrations`` has no record of (a record deleted by hand), and one lacking
    those of a migration it records (a table dropped by hand; with ``setup`` False, the
    first call that needs it refuses).  An empty or blank ``path`` is refused
    (:class:`InvalidInputError`) before anything is opened: SQLite would take it for a
    temporary database, deleted on close.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        fault_hook: FaultHook | None = None,
        setup: bool = True,
        read_only: bool = False,
    ) -> None:
        busy_timeout = checked_seconds("busy_timeout", busy_timeout, zero=True)
        self.path = os.fspath(path)
        _refuse_blank(self.path)
        _refuse_url(self.path)
        self.absolute_path = self.path if self.path == ":memory:" else os.path.abspath(self.path)
        """The file as this process opened it, whatever the working directory is later (what a
        pickled or copied adapter object reopens)."""
        self.fault_hook = fault_hook
        self.read_only = bool(read_only)
        self.busy_timeout = busy_timeout
        self._chained = True  # revisions carry the hash chain (migration 4)
        self._log_holds_purged = False  # a purge could not truncate the write-ahead log yet
        self._lock = threading.RLock()
        if self.read_only and self.path == ":memory:":
            raise InvalidInputError("read_only=True needs a database file; ':memory:' starts empty and could hold nothing")
        with sqlite_errors(self.path, busy_timeout, read_only=self.read_only):
            self._conn: sqlite3.Connection | None = (
                _connect_read_only(self.path, busy_timeout) if self.read_only
                else _connect(self.path, busy_timeout, check_schema=setup)
            )
        if setup:
            try:
                self.setup()
            except BaseException:
                self.close()
                raise

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- plumbing -----------------------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, held under the lock for the duration of the block (storage
        failures raised as :class:`StoreUnavailableError`)."""
        with self._lock:
            if self._conn is None:
                raise StoreClosedError(f"{self!r} is closed; open a new SQLiteStore on the same file to go on")
            with sqlite_errors(self.path, self.busy_timeout, read_only=self.read_only), self._schema_checked(self._conn):
                yield self._conn

    @contextmanager
    def _schema_checked(self, conn: sqlite3.Connection) -> Iterator[None]:
        """Raise a statement's failure on a missing table or column as :class:`SchemaVersionError`
        when the file's schema is not up to date (``setup=False`` or ``read_only`` on an older
        file, or on one that holds no context-gatekeeper tables at all)."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith(("no such table", "no such column")):
                raise
            migrate = (
                "open it once with SQLiteStore(path), without read_only (on a writable copy, if its mount is read-only),"
                if self.read_only else "call store.setup() (or open SQLiteStore(path) with setup=True, the default)"
            )
            recorded = _recorded_migrations(conn)
            error = schema_behind(recorded, MIGRATIONS, f"the SQLite database {self.path!r}", migrate)
            if error is None:
                error = _missing_error(conn, self.path, recorded)  # a recorded table dropped by hand
            if error is None:
                raise
            raise error from exc

    def _refuse_read_only(self) -> None:
        """A store opened with ``read_only=True`` writes nothing: :class:`StoreUnavailableError`."""
        if self.read_only:
            raise StoreUnavailableError(
                f"{self!r} was opened with read_only=True; nothing was written. Open SQLiteStore(path) without "
                "read_only (on a writable copy, if the file's mount is read-only) to change it"
            )

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed if the block returns, else rolled back."""
        self._refuse_read_only()
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
            self._finish_erase(conn)

    def _finish_erase(self, conn: sqlite3.Connection) -> None:
        """Truncate the write-ahead log that an earlier :meth:`purge` could not, if no other
        connection still reads an older snapshot now (never waiting for one; a failure leaves
        it for the next write, as the write itself is committed)."""
        if not self._log_holds_purged:
            return
        try:
            self._log_holds_purged = not _truncate_log(conn, wait=False)
        except sqlite3.Error:
            pass  # the write is committed; the truncation is tried again at the next one

    # -- Store --------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the schema or bring it up to date (idempotent, one transaction).  A
        read-only store only checks that it can read the file's schema."""
        if self.read_only:
            with self._connection() as conn, _snapshot(conn):
                _refuse_foreign_tables(conn, self.path)
                recorded = _recorded_migrations(conn)
                _refuse_unrecorded(conn, self.path, recorded)
                _refuse_missing(conn, self.path, recorded)
                applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            refuse_newer(applied, MIGRATIONS)
            self._chained = 4 in applied  # older files are read without the chain (they cannot be migrated here)
            return
        with self._write() as conn:
            _refuse_foreign_tables(conn, self.path)
            recorded = _recorded_migrations(conn)
            _refuse_unrecorded(conn, self.path, recorded)  # before anything is created
            _refuse_missing(conn, self.path, recorded)
            conn.execute(_CREATE_MIGRATIONS_TABLE)
            applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            refuse_newer(applied, MIGRATIONS)
            for migration in MIGRATIONS:
                if migration.version not in applied:
                    for statement in migration.statements:
                        conn.execute(statement)
                    if migration.backfill is not None:
                        migration.backfill(conn)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                        (migration.version, migration.name, time.time()),
                    )

    def applied_migrations(self) -> list[tuple[int, str]]:
        """``(version, name)`` of every migration this file has had, in order."""
        with self._connection() as conn:
            return [tuple(r) for r in conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")]

    def head(self, session_id: str) -> int:
        """The latest revision number of a session (0 when it has none)."""
        session_id = checked_session(session_id)
        with self._connection() as conn:
            return _number(conn, session_id, _head(conn, session_id), self._chained)

    def tip(self, session_id: str) -> tuple[int, float]:
        """``(head, time of the head revision)``; ``(0, 0.0)`` for an empty session."""
        session_id = checked_session(session_id)
        with self._connection() as conn:
            row = conn.execute(_TIP, (session_id,)).fetchone()
            return (_number(conn, session_id, row[0], self._chained), row[1]) if row else (0, 0.0)

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """The revisions numbered above ``after``, in order."""
        session_id, after = checked_session(session_id), checked_after(after)
        with self._connection() as conn:
            return _load(conn, session_id, after, self._chained)

    def _shared_revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """:meth:`revisions`, each row verified and then decoded once per process (see
        :meth:`Store._shared_revisions`): read only.  A subclass that overrides
        :meth:`revisions` is read through its override."""
        if type(self).revisions is not SQLiteStore.revisions:
            return self.revisions(session_id, after)
        session_id, after = checked_session(session_id), checked_after(after)
        with self._connection() as conn:
            return _load(conn, session_id, after, self._chained, shared=True)

    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        """Store ``revision`` as the next one in one transaction (see :class:`Store`)."""
        session_id = checked_session(session_id)
        with self._write() as conn:
            self._fault("begin")
            tip = conn.execute(_TIP_DIGEST, (session_id,)).fetchone()
            head = _number(conn, session_id, tip[0], self._chained, following=True) if tip else 0
            previous = (tip[1] or "") if tip else genesis(session_id)
            stale = isinstance(expected_head, int) and 0 <= expected_head < head
            later = _load(conn, session_id, expected_head) if isinstance(expected_head, int) and stale else []

            def lookup(ids: Iterable[str]) -> dict[str, IdEntry]:
                return _lookup(conn, session_id, ids)

            def log() -> list[Revision]:  # read only when the index refuses (see prepare_commit)
                return _load(conn, session_id, 0, self._chained)

            stored, rows = prepare_commit(
                session_id, revision, head, expected_head, later, lookup, renew_taken_ids, log
            )
            if stored.number == head:
                return stored  # a no-op: nothing to write
            row = _row(session_id, stored)
            conn.execute(_INSERT, (*row, row_digest(previous, row[1:])))
            conn.executemany(_UPSERT_ID, index_rows(session_id, rows))
            self._fault("written")
            self._fault("before_commit")
        return stored

    def truncate(self, session_id: str, keep: int) -> int:
        """Set aside the revisions above ``keep`` (table ``set_aside_revisions``), rebuild the
        session's id index and drop the vectors of messages no longer held, in one transaction
        (see :meth:`Store.truncate`)."""
        session_id, keep = checked_session(session_id), checked_keep(keep)
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO set_aside_revisions (session_id, {_COLUMNS}, set_aside_at) "
                f"SELECT session_id, {_COLUMNS}, ? FROM revisions WHERE session_id = ? AND number > ?",
                (time.time(), session_id, keep),
            )
            forget_decoded(_digests(conn, session_id, keep))
            dropped = conn.execute("DELETE FROM revisions WHERE session_id = ? AND number > ?", (session_id, keep)).rowcount
            conn.execute("DELETE FROM message_ids WHERE session_id = ?", (session_id,))
            _write_index(conn, session_id, backfill_index(session_id, conn.execute(_SELECT, (session_id, 0))))
            conn.execute(_PRUNE_SET_ASIDE, (session_id,))
        return dropped

    def purge(self, session_id: str) -> None:
        """Erase a session entirely, overwriting its rows and truncating the write-ahead log.

        The log (the ``-wal`` file) holds the session's text until it is truncated, which
        waits up to ``busy_timeout`` for other connections (other processes, other store
        objects, a backup) to finish reading an older snapshot.  If one still does then, the
        erase is committed (nothing reads the session any more) but its text is still in the
        ``-wal`` file: a ``RuntimeWarning`` says so, and this store truncates the log at its
        next write that finds no such reader.  ``store.checkpoint()`` finishes it at once
        when the readers are done (it returns True once the log is truncated).  Truncating
        that fails (a full disk) is handled alike, the warning saying why: once the erase is
        committed, purge never raises, as an error would say that nothing happened.
        """
        session_id = checked_session(session_id)
        with self._write() as conn:
            forget_decoded(_digests(conn, session_id))  # no decoded copy of its text stays in this process
            for table in ("revisions", "message_ids", "set_aside_revisions", "vectors"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
        failure: Exception | None = None
        try:
            truncated = self.checkpoint()
        except (StoreUnavailableError, StoreClosedError, sqlite3.Error) as exc:  # a full disk, say
            truncated, failure = False, exc  # the erase is committed: raising would say nothing happened
        if not truncated:
            with self._lock:
                self._log_holds_purged = True
            warning = _log_not_erased(self.path, session_id, self.busy_timeout, failure)
            warnings.warn(warning, RuntimeWarning, stacklevel=2)

    def sessions(self) -> list[str]:
        """Ids of the sessions that have at least one revision, sorted."""
        with self._connection() as conn:
            return [row[0] for row in conn.execute("SELECT DISTINCT session_id FROM revisions ORDER BY session_id")]

    def stored_sessions(self) -> list[str]:
        """Sessions with revisions, set-aside revisions or vectors, sorted (see :meth:`Store.stored_sessions`)."""
        query = ("SELECT session_id FROM revisions UNION SELECT session_id FROM set_aside_revisions "
                 "UNION SELECT session_id FROM vectors ORDER BY session_id")
        with self._connection() as conn:
            return [row[0] for row in conn.execute(query)]

    def checkpoint(self) -> bool:
        """Copy the write-ahead log into the main file and truncate it, waiting up to
        ``busy_timeout`` for other connections reading an older snapshot (or writing) to
        finish.  True when done (always, for ``":memory:"``); False when one still was: the
        log keeps its frames (a purged session's text included); call again once it is done.
        A store opened with ``read_only=True`` cannot: :class:`StoreUnavailableError` saying so."""
        self._refuse_read_only()
        with self._connection() as conn:
            done = _truncate_log(conn, wait=True)
            if done:
                self._log_holds_purged = False
            return done

    def close(self) -> None:
        """Close the connection (idempotent); the store may not be used afterwards.  A log
        a purge could not truncate yet is truncated first, if no other connection still
        reads an older snapshot (the last connection to a file truncates it anyway)."""
        with self._lock:
            if self._conn is not None:
                self._finish_erase(self._conn)
                self._conn.close()
                self._conn = None

    # -- saved vectors (VectorStore; table ``vectors``, migration 3) --------------------
    def save_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        """Store vectors for the session in one transaction (see :class:`.VectorStore`)."""
        session_id, checked = checked_session(session_id), checked_rows(rows)
        now = time.time()
        values = [
            (session_id, r.embedder, r.dimension, r.text_hash, id_key(r.message_id), pack_vector(r.vector), now)
            for r in checked
        ]
        with self._write() as conn:
            if not conn.execute(_HAS_REVISIONS, (session_id,)).fetchone()[0]:
                return refused_save(self, session_id, len(values))
            texts = {v[4]: v[3] for v in values if v[4]}  # a message's new text: its other texts go
            pairs = list(texts.items())
            for start in range(0, len(pairs), _VECTOR_CHUNK):
                chunk = pairs[start : start + _VECTOR_CHUNK]
                marks = ", ".join(["(?, ?)"] * len(chunk))
                conn.execute(_DROP_OTHER_TEXTS.format(pairs=marks), [*(x for p in chunk for x in p), session_id])
            conn.executemany(_SAVE_VECTOR, values)
            conn.execute(_PRUNE_REMOVED, (session_id, session_id))
        return len(values)

    def load_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        """The session's vectors by ``embedder`` (of ``dimension`` floats, if given), oldest first."""
        session_id, embedder = checked_session(session_id), checked_embedder(embedder)
        dimension = checked_dimension(dimension)
        with self._connection() as conn:
            rows = conn.execute(_LOAD_VECTORS, (session_id, embedder, dimension, dimension)).fetchall()
        return stored_vectors(self, session_id, rows)

    def delete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        """Erase the session's vectors (of one embedder, or all); returns how many."""
        session_id = checked_session(session_id)
        embedder = None if embedder is None else checked_embedder(embedder)
        with self._write() as conn:
            query = "DELETE FROM vectors WHERE session_id = ? AND (? IS NULL OR embedder = ?)"
            return conn.execute(query, (session_id, embedder, embedder)).rowcount


# -- helpers ------------------------------------------------------------------------------
_URL = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://")
_URL_PASSWORD = re.compile(r"(://[^:/?#@]*):.*@", re.DOTALL)
"""A URL's ``user:password@``: up to its last ``@``, so a password holding ``/`` or ``@`` goes too."""


def _refuse_blank(path: str) -> None:
    """:class:`InvalidInputError` if ``path`` is empty or blank (an unset environment variable's
    default): SQLite takes ``""`` for a private temporary database, deleted on close, so every
    revision would be lost without a word (and a pickled adapter, naming the working folder as
    its file, could not reopen it)."""
    if not path.strip():
        raise InvalidInputError(
            f"SQLiteStore got an empty path ({path!r}), which SQLite would take for a temporary database deleted "
            "on close, losing every revision; pass a file path (such as 'chat.db'), or ':memory:' for a private "
            "in-memory database"
        )


def _refuse_url(path: object) -> None:
    """:class:`InvalidInputError` if ``path`` is a PostgreSQL URL (any case: libpq reads only
    ``postgresql://`` and ``postgres://``, so ``Transcript`` takes ``POSTGRESQL://...`` for a
    path) or any URL with a password, not a file path; the message shows no password (an error
    about a file that cannot be opened would quote the path whole)."""
    url = _URL.match(path) if isinstance(path, str) else None
    if url is None:
        return
    scheme, shown = url.group(1), _URL_PASSWORD.sub(r"\1:***@", str(path))
    if scheme.lower() in ("postgresql", "postgres"):
        how = ("pass it to PostgresStore(url), or as Transcript(store=url)" if scheme.islower() else
               f"libpq reads the scheme in lower case only: write {scheme.lower()}:// instead of {scheme}://")
        raise InvalidInputError(f"SQLiteStore takes a file path, got the PostgreSQL URL {shown!r}; {how}")
    if _URL_PASSWORD.search(str(path)):
        raise InvalidInputError(
            f"SQLiteStore takes a file path, got a URL with a password ({shown!r}); pass the path of a SQLite "
            "file, or a store for that database"
        )


def _connect(path: str, busy_timeout: float, *, check_schema: bool = True) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, secure deletes.

    Before the switch to WAL, which rewrites the file's header, a file holding another
    program's tables is refused, and (``check_schema``: the store is about to set up) one
    that ``setup()`` would refuse: migrated by a newer version, or holding what a migration
    creates without its record.  ``setup()`` checks again inside its transaction."""
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        _refuse_foreign_tables(conn, path)  # before WAL mode, which rewrites the file's header
        if check_schema:
            with _snapshot(conn):  # the record and the tables as one moment left them (another process may migrate)
                recorded = _recorded_migrations(conn)
                refuse_newer(recorded or (), MIGRATIONS)
                _refuse_unrecorded(conn, path, recorded)
                _refuse_missing(conn, path, recorded)
        _enable_wal(conn, busy_timeout)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA secure_delete = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _truncate_log(conn: sqlite3.Connection, *, wait: bool) -> bool:
    """``PRAGMA wal_checkpoint(TRUNCATE)``: whether the write-ahead log was copied into the
    main file and truncated (not done while another connection reads an older snapshot or
    writes; ``wait``: wait for it up to the connection's busy timeout, else not at all)."""
    if wait:
        return conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    waits = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        return conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(waits)}")


def _log_not_erased(path: str, session_id: str, busy_timeout: float, failure: Exception | None = None) -> str:
    """The warning of a purge whose text the write-ahead log still holds: another connection
    kept it from being truncated, or (``failure``) truncating it failed (a full disk)."""
    if failure is None:
        why = (
            "another connection (a process, another SQLiteStore, a backup) kept reading an older snapshot, or "
            f"writing, for {busy_timeout:g} s (busy_timeout), so the log could not be truncated"
        )
        then = "once that reader is done. To finish now, end the other connection's transaction"
    else:
        cause = failure.__cause__ if isinstance(failure.__cause__, sqlite3.Error) else failure
        said = f"SQLite: {cause}" if isinstance(cause, sqlite3.Error) else f"{type(cause).__name__}: {cause}"
        why = f"truncating the log failed ({said})"
        then = "once it can. To finish now, fix that (free space on the disk, if it is full)"
    return (
        f"session {session_id!r} was purged from the SQLite database {path!r}, but its text is still in the "
        f"write-ahead log {path + '-wal'!r}: {why}. Nothing reads the session any more; this store truncates the "
        f"log at its next write {then} and call store.checkpoint() (True when the log is truncated)"
    )


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL, retrying while another process holds it.

    SQLite answers "database is locked" at once, without its busy handler, when
    two processes open a new file together and both try to switch, so this
    waits here instead, for up to ``busy_timeout`` seconds.  (``":memory:"``
    stays in "memory" mode.)
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


_OWN_COLUMNS = {
    "schema_migrations": {"version", "name", "applied_at"},
    "revisions": {"session_id", "number", "parent", "kind", "instruction", "model", "created_at", "base", "target",
                  "changes"},
    "message_ids": {"session_id", "message_id", "present", "digest"},
    "set_aside_revisions": {"session_id", "number", "kind", "changes", "set_aside_at"},
    "vectors": {"session_id", "embedder", "dimension", "text_hash", "message_id", "vector", "created_at"},
}
"""The store's tables and the columns each has had since it was created."""


def _refuse_foreign_tables(conn: sqlite3.Connection, path: str) -> None:
    """:class:`SchemaVersionError` when a table named as one of the store's lacks its columns:
    the file holds another program's tables (a Rails or golang-migrate ``schema_migrations``,
    an application's ``revisions``), which the store must neither read nor migrate."""
    for table, columns in _OWN_COLUMNS.items():
        found = {row[1] for row in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))}
        if found and not columns <= found:
            raise SchemaVersionError(
                f"the SQLite database {path!r} holds a table {table!r} that is not context-gatekeeper's (its columns "
                f"are {sorted(found)}; the store's has {sorted(columns)}): the file belongs to another program. "
                "Nothing was written. Give the store a file of its own, e.g. SQLiteStore('chat.db') beside it"
            )


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction for the block, so its statements see one state of the file (not a
    migration another process commits between two of them); rolled back: it writes nothing."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.rollback()


def _refuse_unrecorded(conn: sqlite3.Connection, path: str, applied: set[int] | None) -> None:
    """:class:`SchemaVersionError` when the file holds a table or column that a migration
    missing from ``applied`` (the versions ``schema_migrations`` records; None: that table is
    gone) creates: its record was deleted by hand, and applying it again would fail half way
    (see :func:`.schema.unrecorded_error`).  No query for a file that has had every migration."""
    found = {migration.version: _objects(conn, migration, held=True)
             for migration in MIGRATIONS if applied is None or migration.version not in applied}
    create = None if applied is not None else (
        " ".join(_CREATE_MIGRATIONS_TABLE.replace(" IF NOT EXISTS", "").split()).replace("( ", "(").replace(" )", ")"))
    error = unrecorded_error(f"the SQLite database {path!r}", found, MIGRATIONS, "schema_migrations", create)
    if error is not None:
        raise error


def _refuse_missing(conn: sqlite3.Connection, path: str, applied: set[int] | None) -> None:
    """:class:`SchemaVersionError` when a table or column that a migration recorded in
    ``applied`` creates is gone (:func:`_missing_error`)."""
    error = _missing_error(conn, path, applied)
    if error is not None:
        raise error


def _missing_error(conn: sqlite3.Connection, path: str, applied: set[int] | None) -> SchemaVersionError | None:
    """The error for a file whose ``schema_migrations`` records a migration whose table or
    column is gone (``DROP TABLE vectors`` by hand), the mirror of :func:`_refuse_unrecorded`:
    every call on it would fail with a bare "no such table" (see :func:`.schema.missing_error`).
    None when nothing recorded is missing."""
    missing = {migration.version: _objects(conn, migration, held=False)
               for migration in MIGRATIONS if applied and migration.version in applied}
    return missing_error(f"the SQLite database {path!r}", missing, MIGRATIONS, "schema_migrations")


def _objects(conn: sqlite3.Connection, migration: Migration, *, held: bool) -> list[str]:
    """The tables and columns (``table`` or ``table.column``) that ``migration`` creates and
    the file has (``held``), or lacks."""
    return [table if column is None else f"{table}.{column}"
            for table, column in created_objects(migration) if _holds(conn, table, column) == held]


def _holds(conn: sqlite3.Connection, table: str, column: str | None) -> bool:
    """Whether the file has the table (``column`` None) or the table's column."""
    if column is None:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is not None
    return conn.execute("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", (table, column)).fetchone() is not None


def _recorded_migrations(conn: sqlite3.Connection) -> set[int] | None:
    """The versions of the migrations the file has had; None when it has no migrations table."""
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    if conn.execute(query).fetchone() is None:
        return None
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def _digests(conn: sqlite3.Connection, session_id: str, after: int = 0) -> list[str | None]:
    """The digests of the session's rows numbered above ``after`` (for :func:`.chain.forget_decoded`)."""
    rows = conn.execute("SELECT digest FROM revisions WHERE session_id = ? AND number > ?", (session_id, after))
    return [digest for (digest,) in rows]


def _head(conn: sqlite3.Connection, session_id: str) -> Any:
    """The largest revision number of the session as stored (see :func:`_number`)."""
    return conn.execute(_HEAD, (session_id,)).fetchone()[0]


def _number(conn: sqlite3.Connection, session_id: str, number: Any, chained: bool, *, following: bool = False) -> int:
    """``number``, the session's newest revision number as read, if it is an integer (and,
    ``following``: a commit's head, one a revision can follow, below :data:`.base.MAX_REVISION`);
    else :class:`CorruptLogError` naming the first revision that fails (and so the ``truncate``
    that recovers): a number changed by hand to text, a blob or a real, which SQLite's
    INTEGER column keeps as it is and sorts after every integer, or to the largest integer
    (the next number would not fit: the insert would fail with a bare ``OverflowError``)."""
    if type(number) is int and not (following and number >= MAX_REVISION):
        return number
    _load(conn, session_id, 0, chained)  # raises, naming the first row that fails, on a chained file
    query = "SELECT number FROM revisions WHERE session_id = ? ORDER BY number"
    numbers = [n for (n,) in conn.execute(query, (session_id,))]
    first = next((i for i, n in enumerate(numbers, 1) if type(n) is not int or n != i), len(numbers))
    reason = unfollowable(number) if type(number) is int else (
        f"a revision number is {number!r}, not an integer: the row was changed outside context-gatekeeper")
    raise CorruptLogError(session_id, first, reason)


def _connect_read_only(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A read-only connection: ``mode=ro``, else (the folder cannot hold the ``-shm``
    file SQLite needs to read a WAL database) ``immutable=1``, which reads the main file
    alone: refused (:class:`StoreUnavailableError`) when a ``-wal`` file beside it holds
    frames, as those are committed revisions it would silently miss."""
    uri = Path(path).absolute().as_uri()

    def opened(flags: str) -> sqlite3.Connection:
        conn = sqlite3.connect(f"{uri}?{flags}", uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except BaseException:
            conn.close()
            raise
        return conn

    try:
        return opened("mode=ro")
    except sqlite3.Error as exc:
        if not cannot_open(exc) or not os.path.isfile(path):  # no file to read alone: say why it failed
            raise
        _refuse_unreadable_wal(path, exc)
    return opened("mode=ro&immutable=1")


def _refuse_unreadable_wal(path: str, cause: sqlite3.Error) -> None:
    """:class:`StoreUnavailableError` if ``path`` has a non-empty ``-wal`` file: SQLite could
    not open the database to read its log (``cause``), and reading the main file alone
    would give an older state (or none) without a word."""
    try:
        size = os.stat(f"{path}-wal").st_size
    except FileNotFoundError:
        return
    if size:
        raise StoreUnavailableError(
            f"the SQLite database {path!r} has a write-ahead log ({path + '-wal'!r}, {size} bytes) that may hold "
            "its latest revisions, and SQLite cannot read it here: the folder cannot hold the -shm file it needs "
            f"(a read-only mount?) (SQLite: {cause}). Reading the main file alone would miss them, so nothing was "
            "read. Copy the database together with its -wal file to a writable folder and open it there, or "
            "checkpoint it where it is written (SQLiteStore(path).checkpoint()) before copying it"
        ) from cause


def _load(
    conn: sqlite3.Connection, session_id: str, after: int, chained: bool = True, *, shared: bool = False
) -> list[Revision]:
    """The revisions above ``after``, their numbering, fields and hash chain checked
    (:func:`.chain.verified`; ``chained`` False: a file from before the chain, read as is;
    ``shared``: revisions decoded before are shared, see :meth:`Store._shared_revisions`).

    A file that has not had migration 5 (read only, or set up by an older version) may hold
    rows whose digests are the first chain's: when a row fails, the rows are read again with
    the chain the file uses now (another process may run the migration at any moment, also
    between two of these reads), and the error stands only when a read with that chain fails."""
    if not chained:
        return [revision_from_row(row, session_id) for row in conn.execute(_SELECT, (session_id, after))]
    legacy, reads = False, 0
    while True:
        try:
            return _verified_rows(conn, session_id, after, shared=shared, legacy=legacy)
        except CorruptLogError:
            reads += 1
            chain = next_read(reads, legacy, conn.execute(_HAS_MIGRATION, (5,)).fetchone() is None)
            if chain is None:
                raise  # read with the chain the file uses, and a row still fails: the damage is real
            legacy = chain


def _verified_rows(
    conn: sqlite3.Connection, session_id: str, after: int, *, shared: bool, legacy: bool = False
) -> list[Revision]:
    """:func:`_load` of a chained file, checked with the chain (``legacy``: the first chain's);
    ``after`` is an int >= 0 (:func:`.base.checked_after`).  A catch-up (``after`` > 0) whose
    first row fails checks the row it chains from (:func:`.chain.anchor_damage`: one more
    query, only then)."""
    if not after:  # each row checked as it comes: no list of every row is built and thrown away
        cursor = conn.execute(_SELECT_CHAINED, (session_id, 0))
        try:
            return verified(session_id, cursor, 0, genesis(session_id), shared=shared, legacy=legacy)
        finally:
            cursor.close()  # a log refused half way leaves no statement open (a truncate follows)
    rows = conn.execute(_SELECT_CHAINED, (session_id, after)).fetchall()
    if not rows:
        return []
    if rows[0][0] != after:  # the row the catch-up starts from is gone
        raise CorruptLogError(
            session_id, after, f"revision {after} is missing: rows were deleted or renumbered outside context-gatekeeper"
        )
    try:
        return verified(session_id, rows[1:], after, rows[0][9], shared=shared, legacy=legacy)
    except CorruptLogError as error:
        if error.revision != after + 1:
            raise
        if after == 1:
            previous: str | None = genesis(session_id)
        else:
            row = conn.execute(_DIGEST, (session_id, after - 1)).fetchone()
            previous = row[0] if row else None
        damage = anchor_damage(session_id, rows[0], previous, legacy=legacy)
        if damage is None:
            raise
        raise damage from None


def _lookup(conn: sqlite3.Connection, session_id: str, ids: Iterable[str]) -> dict[str, IdEntry]:
    """The id-index rows of ``ids`` (absent ids were never used)."""
    keys = {id_key(i): i for i in ids}
    found: dict[str, IdEntry] = {}
    listed = list(keys)
    if len(listed) > 4 * _LOOKUP_CHUNK:  # a large revision (a revert, its undo): one scan of the session
        rows = conn.execute("SELECT message_id, present, digest FROM message_ids WHERE session_id = ?", (session_id,))
        for key, present, digest in rows:
            name = keys.get(bytes(key))
            if name is not None:
                found[name] = IdEntry(bool(present), digest)
        return found
    for start in range(0, len(listed), _LOOKUP_CHUNK):
        chunk = listed[start : start + _LOOKUP_CHUNK]
        marks = ", ".join("?" * len(chunk))
        query = f"SELECT message_id, present, digest FROM message_ids WHERE session_id = ? AND message_id IN ({marks})"
        for key, present, digest in conn.execute(query, (session_id, *chunk)):
            found[keys[bytes(key)]] = IdEntry(bool(present), digest)
    return found


def _write_index(conn: sqlite3.Connection, session_id: str, entries: dict[str, IdEntry]) -> None:
    conn.executemany(_UPSERT_ID, index_rows(session_id, entries))


def _row(session_id: str, r: Revision) -> Sequence[Any]:
    return (session_id, r.number, r.parent, r.kind, r.instruction, r.model, r.time, r.base, r.target, changes_text(r))
