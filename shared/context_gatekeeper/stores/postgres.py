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

The operations themselves (SQL and checks) are written once, as generators of SQL
steps, in :mod:`.postgres_ops`; this module runs them on a
:class:`psycopg_pool.ConnectionPool`, and :mod:`.postgres_async` runs the same
generators on a :class:`psycopg_pool.AsyncConnectionPool` for the async twins.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

from ..errors import InvalidInputError, InvalidTypeError, StoreClosedError
from ..records.revisions import Revision
from .base import FaultHook, Store, checked_keep
from .schema import Migration, refuse_newer

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'context-gatekeeper[postgres]'"
    ) from exc

from .postgres_async import PoolOptions, PostgresAsync, close_idle_pools
from .postgres_ops import Step, Steps, postgres_errors, run_steps
from .postgres_vectors import VECTOR_TEMPLATES, VECTORS_TABLE, PostgresVectors

__all__ = ["PostgresStore", "MIGRATIONS"]

T = TypeVar("T")

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
        lambda _conn, store: store._backfill_steps(),
    ),
    Migration(3, "saved vectors", (VECTORS_TABLE,)),
    Migration(
        4,
        "revision hash chain",
        ("ALTER TABLE {revisions} ADD COLUMN digest text",),
        lambda _conn, store: store._chain_backfill_steps(),
    ),
)
"""Add new migrations at the end; never change or remove a released one.  ``{revisions}``, ``{ids}``
and ``{migrations}`` stand for the prefixed table names (composed as identifiers)."""

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}\Z")


class PostgresStore(PostgresAsync, Store, PostgresVectors):
    """Revision logs in PostgreSQL tables named ``<table_prefix>revisions`` and
    ``<table_prefix>schema_migrations`` (saved vectors: ``<table_prefix>vectors``).

    Args:
        dsn_or_pool: a libpq connection string or ``postgresql://`` URL (the store
            opens and owns a :class:`psycopg_pool.ConnectionPool`), or a pool of
            your own (the store uses it and never closes it; its connections may be
            in autocommit mode or not).
        table_prefix: prepended to the table names, so several stores (or test
            runs) can share a database: letters, digits and ``_``, at most 40.
        min_size, max_size: the size of each pool the store opens.
        fault_hook: called with "begin", "written" and "before_commit" inside each
            commit's transaction (tests use it to fail or kill a writer there).
        setup: apply missing migrations now (default); pass False to defer to an
            explicit ``setup()``.
        connect_timeout: seconds to wait for the first connections of each pool the store opens.
        async_pool: an open :class:`psycopg_pool.AsyncConnectionPool` of your own for
            the async twins (used, never closed; it belongs to the event loop it was
            opened in, and the store refuses it from any other loop).

    Threads share the sync pool (each call checks out its own connection).  The async
    twins (``acommit``, ``ahead``, ...) are native: they run the same operations on
    psycopg's async connections, so they never block the event loop nor use a thread.
    From a connection string the store opens their :class:`~psycopg_pool.AsyncConnectionPool`
    on first async use, one per event loop (a pool cannot outlive or leave its loop:
    two ``asyncio.run`` calls in a row each get their own; how each is released, loops
    left open included, is told in :mod:`.postgres_async`).  Given
    a sync pool of your own and no ``async_pool``, the store opens no connection of its
    own and the async twins run the sync methods in worker threads.  The fault hook
    runs inside the transaction either way; the native twins call it (only when one is
    set, i.e. in tests) in a worker thread, so a hook may block as it may in sync code.

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
        async_pool: AsyncConnectionPool | None = None,
    ) -> None:
        if not isinstance(table_prefix, str) or not _PREFIX.match(table_prefix):
            raise InvalidInputError(
                f"table_prefix must be letters, digits and '_' (not starting with a digit), at most 40, "
                f"got {table_prefix!r}"
            )
        if async_pool is not None and not isinstance(async_pool, AsyncConnectionPool):
            raise InvalidTypeError(f"async_pool must be a psycopg_pool.AsyncConnectionPool, got {type(async_pool).__name__}")
        self.table_prefix = table_prefix
        self.fault_hook = fault_hook
        self._compose(table_prefix, VECTOR_TEMPLATES)
        options = PoolOptions(min_size, max_size, connect_timeout)
        if isinstance(dsn_or_pool, ConnectionPool):
            self._pool, self._owns_pool = dsn_or_pool, False
            self._init_async(None, options, async_pool)
        elif isinstance(dsn_or_pool, str):
            with postgres_errors(f"PostgresStore({_redacted(dsn_or_pool)!r})"):
                self._pool, self._owns_pool = _open_pool(dsn_or_pool, options), True
            self._init_async(dsn_or_pool, options, async_pool)
        else:
            hint = "; pass an AsyncConnectionPool as async_pool=" if isinstance(dsn_or_pool, AsyncConnectionPool) else ""
            raise InvalidTypeError(
                f"PostgresStore takes a connection string or a ConnectionPool, got {type(dsn_or_pool).__name__}{hint}"
            )
        self._closed = False
        if setup:
            try:
                self.setup()
            except BaseException:
                self.close()
                raise

    def __repr__(self) -> str:
        return f"PostgresStore({_redacted(self._pool.conninfo)!r}, table_prefix={self.table_prefix!r})"

    def _closed_error(self) -> StoreClosedError:
        return StoreClosedError(f"{self!r} is closed; open a new PostgresStore on the same database to go on")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the sync pool for the block (its transaction, if any, committed at the end)."""
        if self._closed:
            raise self._closed_error()
        with self._closing_race(), self._pool.connection() as conn:
            yield conn

    def _run(self, steps: Steps[T], lock: int | None = None) -> T:
        """Run an operation on a pooled connection: with ``lock``, in one transaction that
        first takes that advisory lock (committed if it returns, else rolled back).

        In pipeline mode, so ``BEGIN``, the lock and the next query travel together,
        and the last statement together with ``COMMIT``: the lock is held for two
        round trips, not five, which matters when many writers queue for it.
        """
        with postgres_errors(self), self._connection() as conn:
            if lock is None:
                return run_steps(conn, None, steps)
            with _pipeline(conn) as pipeline, conn.transaction():
                return run_steps(conn, pipeline, self._locked(lock, steps))

    def _setup_steps(self) -> Steps[None]:
        """Create the schema or bring it up to date (under the setup lock)."""
        encoding = (yield Step("one", self._sql["encoding"]))[0]
        if encoding.upper() not in ("UTF8", "UTF-8"):
            raise InvalidInputError(f"PostgresStore needs a UTF8 database; this one is {encoding}")
        yield Step("none", self._sql["create_migrations"])
        applied = {row[0] for row in (yield Step("all", self._sql["applied"]))}
        refuse_newer(applied, MIGRATIONS, "set of tables")
        for migration in MIGRATIONS:
            if migration.version not in applied:
                for statement in migration.statements:
                    yield Step("none", sql.SQL(statement).format(**self._names))
                if migration.backfill is not None:
                    backfill: Any = migration.backfill  # here a function of (connection, store) giving steps
                    yield from backfill(None, self)
                yield Step("none", self._sql["record"], (migration.version, migration.name, time.time()))

    # -- Store --------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the schema or bring it up to date (idempotent, one transaction)."""
        self._run(self._setup_steps(), self._lock_key("setup"))

    def applied_migrations(self) -> list[tuple[int, str]]:
        """``(version, name)`` of every migration these tables have had, in order."""
        return self._run(self._applied_steps())

    def head(self, session_id: str) -> int:
        """The latest revision number of a session (0 when it has none)."""
        return self._run(self._head_steps(self._key(session_id)))

    def tip(self, session_id: str) -> tuple[int, float]:
        """``(head, time of the head revision)``; ``(0, 0.0)`` for an empty session."""
        return self._run(self._tip_steps(self._key(session_id)))

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """The revisions numbered above ``after``, in order."""
        return self._run(self._load_steps(self._key(session_id), after))

    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        """Store ``revision`` as the next one in one transaction (see :class:`Store`)."""
        key = self._key(session_id)
        return self._run(self._commit_steps(key, revision, expected_head, renew_taken_ids), self._session_lock(key))

    def truncate(self, session_id: str, keep: int) -> int:
        """Set aside the revisions above ``keep`` (table ``<prefix>set_aside_revisions``)
        and rebuild the session's id index, in one transaction (see :meth:`Store.truncate`)."""
        key, keep = self._key(session_id), checked_keep(keep)
        return self._run(self._truncate_steps(key, keep), self._session_lock(key))

    def purge(self, session_id: str) -> None:
        """Erase a session entirely, in one transaction (queued behind its writers)."""
        key = self._key(session_id)
        self._run(self._purge_steps(key), self._session_lock(key))

    def sessions(self) -> list[str]:
        """Ids of the sessions that have at least one revision, sorted by code point."""
        return self._run(self._sessions_steps())

    def close(self) -> None:
        """Close the pools this store opened; the store may not be used afterwards
        (:class:`StoreClosedError`, also for calls in flight that had not got a connection
        yet).  Idempotent, and each pool is closed on its own: a close or ``aclose`` that
        was interrupted is finished by the next.  Async pools of a running loop are closed
        on that loop (scheduled), those of an idle loop by running it in a worker thread;
        prefer ``await store.aclose()`` from async code."""
        _mine, idle = self._release_async_pools(None)
        try:
            close_idle_pools(idle, wait=True)
        finally:
            if self._owns_pool:
                self._pool.close()  # idempotent


# -- helpers ------------------------------------------------------------------------------
def _open_pool(dsn: str, options: PoolOptions) -> ConnectionPool:
    """An open pool of autocommit connections (writes open explicit transactions).

    One direct connection first, so a wrong DSN or password fails at once with the
    server's own reason instead of a pool timeout.
    """
    with psycopg.connect(dsn, connect_timeout=max(1, round(options.timeout))):
        pass
    pool: ConnectionPool = ConnectionPool(dsn, **options.pool_kwargs())
    try:
        pool.open(wait=True, timeout=options.timeout)
    except BaseException:
        pool.close()
        raise
    return pool


def _pipeline(conn: psycopg.Connection[Any]) -> AbstractContextManager[psycopg.Pipeline | None]:
    """Pipeline mode where libpq supports it (14+), else plain statements (same results)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()


def _redacted(conninfo: object) -> str:
    """The connection string without its password."""
    if not isinstance(conninfo, str):
        return "<connection string from a callable>"
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})
