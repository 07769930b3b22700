"""The PostgreSQL store: several processes and servers sharing one database (the ``postgres`` extra).

Needs psycopg 3 and psycopg-pool (``pip install 'context-gatekeeper[postgres]'``);
the core imports this module only when a PostgreSQL store is asked for.

Same contract as the SQLite store (see :class:`~context_gatekeeper.stores.Store`):

* every commit is one transaction that first takes a transaction-scoped advisory
  lock for its session (``pg_advisory_xact_lock``), then reads the head, runs
  :func:`~context_gatekeeper.stores.place_revision` and inserts the row: writers of
  one session queue, writers of different sessions do not, readers never wait;
* a failure, or a writer dying at any point, rolls the transaction back (the
  server releases the lock when the connection goes), leaving the previous
  revision intact;
* schema changes are the add-only list :data:`MIGRATIONS`, recorded in
  ``<prefix>schema_migrations``; ``setup()`` applies the missing ones under an
  advisory lock, so processes starting together do not race.

Why an advisory lock rather than ``SELECT ... FOR UPDATE`` on a per-session head
row: it serialises the first commit of a session too (there is no row to lock
yet; a head row would need an upsert, i.e. an extra written and vacuumed row per
commit), it is released by the server on commit, rollback or disconnection,
and there is no second table to keep in step with ``purge``.  The lock key is
64 bits of SHA-256 over the table prefix and the session id; a collision only
makes two sessions' writers take turns.  The primary key ``(session_key,
number)`` stays as a backstop: two rows with one number can never both commit.

Session ids are stored as text next to ``session_key`` (their SHA-256), which
is what the primary key indexes, so ids of any length (B-tree entries are
limited to about 2.7 KB) and any characters except NUL work.  Changes are
stored as JSON *text*, not ``jsonb`` (which cannot hold ``\\u0000``), with the
SQLite store's fallback for lone surrogates.  Table names are composed with
:class:`psycopg.sql.Identifier` and every value is a bound parameter.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ..errors import InvalidInputError
from ..transcripts.revisions import Revision
from .base import FaultHook, Store, checked_keep, prepare_commit
from .integrity import IdEntry
from .postgres_vectors import VECTOR_TEMPLATES, VECTORS_TABLE, PostgresVectors
from .schema import (
    Migration, backfill_index, changes_text, checked_session, id_key, index_rows, refuse_newer, revision_from_row,
)

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'context-gatekeeper[postgres]'"
    ) from exc

__all__ = ["PostgresStore", "MIGRATIONS"]

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "revisions",
        (
            """CREATE TABLE {revisions} (
                session_key bytea            NOT NULL,
                session_id  text             NOT NULL,
                number      integer          NOT NULL CHECK (number >= 1),
                parent      integer          NOT NULL,
                kind        text             NOT NULL,
                instruction text,
                model       text,
                created_at  double precision NOT NULL,
                base        integer,
                target      integer,
                changes     text             NOT NULL,
                PRIMARY KEY (session_key, number)
            )""",
        ),
    ),
    Migration(
        2,
        "message id index and set-aside revisions",
        (
            """CREATE TABLE {ids} (
                session_key bytea   NOT NULL,
                message_id  bytea   NOT NULL,
                present     boolean NOT NULL,
                digest      text    NOT NULL,
                PRIMARY KEY (session_key, message_id)
            )""",
            # the revisions' columns and the time they were set aside; no keys: a number may recur
            "CREATE TABLE {set_aside} (LIKE {revisions}, set_aside_at double precision NOT NULL)",
        ),
        lambda conn, store: store._backfill(conn),
    ),
    Migration(3, "saved vectors", (VECTORS_TABLE,)),
)
"""Add new migrations at the end; never change or remove a released one.  ``{revisions}``, ``{ids}``
and ``{migrations}`` stand for the prefixed table names (composed as identifiers)."""

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}\Z")
_TABLES = {"revisions": "revisions", "migrations": "schema_migrations", "ids": "message_ids",
           "set_aside": "set_aside_revisions", "vectors": "vectors"}  # placeholder -> name after the prefix
_COLUMNS = "number, parent, kind, instruction, model, created_at, base, target, changes"
_TEMPLATES = {
    "create_migrations": """CREATE TABLE IF NOT EXISTS {migrations} (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at double precision NOT NULL
    )""",
    "applied": "SELECT version, name FROM {migrations} ORDER BY version",
    "record": "INSERT INTO {migrations} (version, name, applied_at) VALUES (%s, %s, %s)",
    "head": "SELECT COALESCE(MAX(number), 0) FROM {revisions} WHERE session_key = %s AND session_id = %s",
    "tip": "SELECT number, created_at FROM {revisions} WHERE session_key = %s AND session_id = %s ORDER BY number DESC LIMIT 1",
    "load": f"SELECT {_COLUMNS} FROM {{revisions}} WHERE session_key = %s AND session_id = %s AND number > %s ORDER BY number",
    "insert": f"INSERT INTO {{revisions}} (session_key, session_id, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
    "purge": "DELETE FROM {revisions} WHERE session_key = %s AND session_id = %s",
    "sessions": "SELECT DISTINCT session_id FROM {revisions}",
    "lookup": "SELECT message_id, present, digest FROM {ids} WHERE session_key = %s AND message_id = ANY(%s)",
    "upsert_id": """INSERT INTO {ids} (session_key, message_id, present, digest) VALUES (%s, %s, %s, %s)
        ON CONFLICT (session_key, message_id) DO UPDATE SET present = excluded.present, digest = excluded.digest""",
    "purge_ids": "DELETE FROM {ids} WHERE session_key = %s",
    "purge_set_aside": "DELETE FROM {set_aside} WHERE session_key = %s AND session_id = %s",
    "set_aside": f"""INSERT INTO {{set_aside}} (session_key, session_id, {_COLUMNS}, set_aside_at)
        SELECT session_key, session_id, {_COLUMNS}, %s FROM {{revisions}}
        WHERE session_key = %s AND session_id = %s AND number > %s""",
    "drop_after": "DELETE FROM {revisions} WHERE session_key = %s AND session_id = %s AND number > %s",
    "all_sessions": "SELECT DISTINCT session_key, session_id FROM {revisions}",
    **VECTOR_TEMPLATES,
}
_LOCK = sql.SQL("SELECT pg_advisory_xact_lock(%s)")


class PostgresStore(Store, PostgresVectors):
    """Revision logs in PostgreSQL tables named ``<table_prefix>revisions`` and
    ``<table_prefix>schema_migrations`` (saved vectors: ``<table_prefix>vectors``).

    Args:
        dsn_or_pool: a libpq connection string or ``postgresql://`` URL (the store
            opens and owns a :class:`psycopg_pool.ConnectionPool`), or a pool of
            your own (the store uses it and never closes it; its connections may be
            in autocommit mode or not).
        table_prefix: prepended to the table names, so several stores (or test
            runs) can share a database: letters, digits and ``_``, at most 40.
        min_size, max_size: the owned pool's size.
        fault_hook: called with "begin", "written" and "before_commit" inside each
            commit's transaction (tests use it to fail or kill a writer there).
        setup: apply missing migrations now (default); pass False to defer to an
            explicit ``setup()``.
        connect_timeout: seconds to wait for the first connection of an owned pool.

    Threads share the pool (each call checks out its own connection).  The async
    twins run the sync methods in worker threads (:class:`Store`'s defaults), so
    they never block the event loop and the fault hook behaves the same.
    The database must use the UTF8 encoding.  ``purge`` deletes the session's rows
    in one transaction; the server reclaims their space at its next ``VACUUM``.
    """

    def __init__(
        self,
        dsn_or_pool: str | ConnectionPool,
        *,
        table_prefix: str = "cg_",
        min_size: int = 1,
        max_size: int = 10,
        fault_hook: FaultHook | None = None,
        setup: bool = True,
        connect_timeout: float = 10.0,
    ) -> None:
        if not isinstance(table_prefix, str) or not _PREFIX.match(table_prefix):
            raise InvalidInputError(
                f"table_prefix must be letters, digits and '_' (not starting with a digit), at most 40, "
                f"got {table_prefix!r}"
            )
        self.table_prefix = table_prefix
        self.fault_hook = fault_hook
        self._names = {name: sql.Identifier(table_prefix + table) for name, table in _TABLES.items()}
        self._sql = {key: sql.SQL(template).format(**self._names) for key, template in _TEMPLATES.items()}
        if isinstance(dsn_or_pool, ConnectionPool):
            self._pool, self._owns_pool = dsn_or_pool, False
        elif isinstance(dsn_or_pool, str):
            self._pool, self._owns_pool = _open_pool(dsn_or_pool, min_size, max_size, connect_timeout), True
        else:
            raise TypeError(f"PostgresStore takes a connection string or a ConnectionPool, got {type(dsn_or_pool).__name__}")
        self._closed = False
        if setup:
            try:
                self.setup()
            except BaseException:
                self.close()
                raise

    def __repr__(self) -> str:
        return f"PostgresStore({_redacted(self._pool.conninfo)!r}, table_prefix={self.table_prefix!r})"

    # -- plumbing -----------------------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for the block (its transaction, if any, committed at the end)."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; open a new PostgresStore")
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def _write(self, session_key: bytes) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Pipeline | None]]:
        """One transaction holding the session's advisory lock: committed if the block
        returns, else rolled back.

        In pipeline mode, so ``BEGIN``, the lock and the next query travel together,
        and the last statement together with ``COMMIT``: the lock is held for two
        round trips, not five, which matters when many writers queue for it.
        """
        with self._connection() as conn, _pipeline(conn) as pipeline, conn.transaction():
            conn.execute(_LOCK, (self._lock_key("session", session_key),))
            yield conn, pipeline

    def _key(self, session_id: Any) -> tuple[bytes, str]:
        """``(session_key, session_id)`` after checking the id can be stored."""
        encoded = checked_session(session_id).encode("utf-8")  # lone surrogates refused there
        if b"\x00" in encoded:
            raise InvalidInputError("a PostgreSQL session id cannot contain NUL characters")
        return hashlib.sha256(encoded).digest(), session_id

    def _lock_key(self, name: str, key: bytes = b"") -> int:
        digest = hashlib.sha256(f"{self.table_prefix}\x00{name}\x00".encode() + key).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    def _head(self, conn: psycopg.Connection[Any], key: tuple[bytes, str]) -> int:
        return conn.execute(self._sql["head"], key).fetchone()[0]

    def _load(self, conn: psycopg.Connection[Any], key: tuple[bytes, str], after: int) -> list[Revision]:
        return [revision_from_row(row, key[1]) for row in conn.execute(self._sql["load"], (*key, after))]

    def _lookup(self, conn: psycopg.Connection[Any], key: tuple[bytes, str], ids: Iterable[str]) -> dict[str, IdEntry]:
        keys = {id_key(i): i for i in ids}
        rows = conn.execute(self._sql["lookup"], (key[0], list(keys))).fetchall()
        return {keys[bytes(k)]: IdEntry(bool(present), digest) for k, present, digest in rows}

    def _index(self, conn: psycopg.Connection[Any], key: tuple[bytes, str]) -> None:
        """Rebuild a session's id index from its readable revisions."""
        conn.execute(self._sql["purge_ids"], (key[0],))
        entries = backfill_index(key[1], conn.execute(self._sql["load"], (*key, 0)).fetchall())
        with conn.cursor() as cursor:
            cursor.executemany(self._sql["upsert_id"], index_rows(key[0], entries))

    def _backfill(self, conn: psycopg.Connection[Any]) -> None:
        """Migration 2: index every stored session (sessions that no longer replay included)."""
        for key in conn.execute(self._sql["all_sessions"]).fetchall():
            self._index(conn, (bytes(key[0]), key[1]))

    # -- Store --------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the schema or bring it up to date (idempotent, one transaction)."""
        with self._connection() as conn, conn.transaction():
            encoding = conn.execute("SELECT current_setting('server_encoding')").fetchone()[0]
            if encoding.upper() not in ("UTF8", "UTF-8"):
                raise InvalidInputError(f"PostgresStore needs a UTF8 database; this one is {encoding}")
            conn.execute(_LOCK, (self._lock_key("setup"),))
            conn.execute(self._sql["create_migrations"])
            applied = {row[0] for row in conn.execute(self._sql["applied"])}
            refuse_newer(applied, MIGRATIONS, "set of tables")
            for migration in MIGRATIONS:
                if migration.version not in applied:
                    for statement in migration.statements:
                        conn.execute(sql.SQL(statement).format(**self._names))
                    if migration.backfill is not None:
                        migration.backfill(conn, self)
                    conn.execute(self._sql["record"], (migration.version, migration.name, time.time()))

    def applied_migrations(self) -> list[tuple[int, str]]:
        """``(version, name)`` of every migration these tables have had, in order."""
        with self._connection() as conn:
            return [(row[0], row[1]) for row in conn.execute(self._sql["applied"])]

    def head(self, session_id: str) -> int:
        """The latest revision number of a session (0 when it has none)."""
        key = self._key(session_id)
        with self._connection() as conn:
            return self._head(conn, key)

    def tip(self, session_id: str) -> tuple[int, float]:
        """``(head, time of the head revision)``; ``(0, 0.0)`` for an empty session."""
        key = self._key(session_id)
        with self._connection() as conn:
            row = conn.execute(self._sql["tip"], key).fetchone()
            return (row[0], row[1]) if row else (0, 0.0)

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """The revisions numbered above ``after``, in order."""
        key = self._key(session_id)
        with self._connection() as conn:
            return self._load(conn, key, after)

    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        """Store ``revision`` as the next one in one transaction (see :class:`Store`)."""
        key = self._key(session_id)
        with self._write(key[0]) as (conn, pipeline):
            head = self._head(conn, key)  # waits for the lock
            self._fault("begin")
            valid = isinstance(expected_head, int) and not isinstance(expected_head, bool)
            stale = valid and 0 <= expected_head < head  # type: ignore[operator]
            later = self._load(conn, key, expected_head) if stale else []  # type: ignore[arg-type]

            def lookup(ids: Iterable[str]) -> dict[str, IdEntry]:
                return self._lookup(conn, key, ids)

            stored, rows = prepare_commit(key[1], revision, head, expected_head, later, lookup, renew_taken_ids)
            if stored.number == head:
                return stored  # a no-op: nothing to write
            conn.execute(self._sql["insert"], _row(key, stored))
            with conn.cursor() as cursor:
                cursor.executemany(self._sql["upsert_id"], index_rows(key[0], rows))
            if self.fault_hook is not None and pipeline is not None:
                pipeline.sync()  # the row reaches the server before the hook runs
            self._fault("written")
            self._fault("before_commit")
        return stored

    def truncate(self, session_id: str, keep: int) -> int:
        """Set aside the revisions above ``keep`` (table ``<prefix>set_aside_revisions``)
        and rebuild the session's id index, in one transaction (see :meth:`Store.truncate`)."""
        key, keep = self._key(session_id), checked_keep(keep)
        with self._write(key[0]) as (conn, _):
            head = self._head(conn, key)
            conn.execute(self._sql["set_aside"], (time.time(), *key, keep))
            conn.execute(self._sql["drop_after"], (*key, keep))
            self._index(conn, key)
        return max(head - keep, 0)

    def purge(self, session_id: str) -> None:
        """Erase a session entirely, in one transaction (queued behind its writers)."""
        key = self._key(session_id)
        with self._write(key[0]) as (conn, _):
            conn.execute(self._sql["purge"], key)
            conn.execute(self._sql["purge_ids"], (key[0],))
            conn.execute(self._sql["purge_set_aside"], key)
            conn.execute(self._sql["purge_vectors"], (key[0],))

    def sessions(self) -> list[str]:
        """Ids of the sessions that have at least one revision, sorted by code point."""
        with self._connection() as conn:
            return sorted(row[0] for row in conn.execute(self._sql["sessions"]))

    def close(self) -> None:
        """Close the pool if this store opened it (idempotent); the store may not be used afterwards."""
        if not self._closed:
            self._closed = True
            if self._owns_pool:
                self._pool.close()


# -- helpers ------------------------------------------------------------------------------
def _open_pool(dsn: str, min_size: int, max_size: int, timeout: float) -> ConnectionPool:
    """An open pool of autocommit connections (writes open explicit transactions).

    One direct connection first, so a wrong DSN or password fails at once with the
    server's own reason instead of a pool timeout.
    """
    with psycopg.connect(dsn, connect_timeout=max(1, round(timeout))):
        pass
    pool: ConnectionPool = ConnectionPool(
        dsn, min_size=min_size, max_size=max_size, kwargs={"autocommit": True}, open=False, name="context-gatekeeper"
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except BaseException:
        pool.close()
        raise
    return pool


def _pipeline(conn: psycopg.Connection[Any]) -> AbstractContextManager[psycopg.Pipeline | None]:
    """Pipeline mode where libpq supports it (14+), else plain statements (same results)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()


def _redacted(conninfo: str) -> str:
    """The connection string without its password."""
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo(**{k: v for k, v in parts.items() if v is not None})


def _row(key: tuple[bytes, str], r: Revision) -> Sequence[Any]:
    return (*key, r.number, r.parent, r.kind, r.instruction, r.model, r.time, r.base, r.target, changes_text(r))
