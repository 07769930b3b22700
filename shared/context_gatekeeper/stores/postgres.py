"""The PostgreSQL store: several processes and servers sharing one database (the ``postgres`` extra).

Needs psycopg 3 and psycopg-pool (``pip install 'context-gatekeeper[postgres]'``);
the core imports this module only when a PostgreSQL store is asked for.

Same contract as the SQLite store (see :class:`~context_gatekeeper.stores.Store`):

* every commit is one transaction that first takes a transaction-scoped advisory
  lock for its session (``pg_advisory_xact_lock``), then reads the head, runs
  :func:`~context_gatekeeper.stores.place_revision` and inserts the row: writers of
  one session queue, writers of different sessions do not, readers never wait;
  the transaction is READ COMMITTED whatever the server's default isolation (so the
  head it reads is the one the writer it waited for left), and waits at most
  ``lock_timeout`` seconds for the lock (:class:`StoreUnavailableError` after that);
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

Nothing depends on how the connections are set up: every statement runs on a cursor of
the store's own that returns tuples in binary format, so a caller's pool may make dict
rows (LangGraph's ``PostgresSaver`` needs them), and times come back exactly whatever
``extra_float_digits`` says (the hash chain hashes them as read back).  A pool the store
opens checks each connection as it hands it out, so connections the server ended while
idle (a restart, a failover) are replaced, not failed.

Session ids are stored as text next to ``session_key`` (their SHA-256), which
is what the primary key indexes and what every operation selects a session's rows by,
so ids of any length (B-tree entries are
limited to about 2.7 KB) and any characters except NUL work.  A row whose ``session_id``
is not its key's (moved to another session, or its session renamed, by hand) is read as
damage, :class:`CorruptLogError` naming the truncate that sets it aside, and
``stored_sessions`` names every key (:func:`.postgres_ops.named_keys`), so purging each
session it lists erases everything (see :func:`.postgres_ops.purge_steps`); an instruction or
model name holding NUL is refused (:class:`InvalidInputError`, nothing written), as
``text`` cannot hold it.  Changes are
stored as JSON *text*, not ``jsonb`` (which cannot hold ``\\u0000``), with the
SQLite store's fallback for lone surrogates.  Table names are composed with
:class:`psycopg.sql.Identifier` and every value is a bound parameter.

The operations themselves (SQL and checks) are written once, as generators of SQL
steps, in :mod:`.postgres_ops`; the store runs them on a
:class:`psycopg_pool.ConnectionPool` for its sync methods and on a
:class:`psycopg_pool.AsyncConnectionPool` for its native async twins (``acommit``,
``ahead``, ...), so a commit makes the same head check, rebase,
:func:`~.base.prepare_commit` and advisory-lock wait inside the same transaction,
without a worker thread and without blocking the event loop.

Event loops: an :class:`~psycopg_pool.AsyncConnectionPool` belongs to the loop it was
opened in.  A store opened from a connection string opens one on first async use in
each loop (``asyncio.run`` twice, or a test runner's loop per test, each get their
own).  How a loop's pool is released:

* ``await store.aclose()`` on that loop closes it there; ``close()`` or ``aclose()``
  elsewhere closes it on its loop: scheduled there if the loop is running, else, if the
  loop is idle (neither running nor closed, e.g. a ``new_event_loop()`` driven by
  ``run_until_complete`` and left open), by running the loop in a short-lived thread
  until the pool is closed (so do not start that loop from another thread meanwhile);
* a loop that has closed: its pool is forgotten at the next opening or close (its tasks
  were cancelled with the loop; its idle connections go when the pool is collected);
* an idle loop whose thread (the one that asked for the pool) has ended: its pool is
  closed as above when another loop next opens one.  An idle loop of a live thread may
  run again, so its pool stays until the store is closed.

Pools are keyed by the loop itself: a weak reference would free nothing, as the pool's
own tasks hold their loop.  A pool given as ``async_pool`` belongs to the loop its
tasks run on (or, not open yet, to the first loop that uses it) and is refused from
another (:class:`InvalidInputError`) instead of hanging.  Closing is idempotent per
resource: a ``close`` or ``aclose`` that was cancelled or failed partway still closes
the sync pool, and calls racing it raise :class:`StoreClosedError`.  See
``docs/architecture.md#concurrency-rules``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator
from contextlib import (
    AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager, nullcontext, suppress,
)
from typing import Any, NamedTuple, TypeVar

from ..errors import InvalidInputError, InvalidTypeError, MissingExtraError, SchemaVersionError, StoreClosedError
from ..records.revisions import Revision
from .base import FaultHook, Store, checked_after, checked_keep, checked_seconds
from .schema import Migration, id_key, missing_error, refuse_newer, schema_behind, unrecorded_error
from .vectors import VectorRow, VectorStore, checked_rows, pack_vector

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        f"PostgresStore needs psycopg 3 and psycopg-pool ({exc}): {MissingExtraError.install_command('postgres')}",
        extra="postgres", name=exc.name,
    ) from exc

from . import postgres_ops as ops
from .postgres_conninfo import check_conninfo, connection_settings, is_secret_key, redacted
from .postgres_ops import VECTORS_TABLE, Key, Step, Steps, arun_steps, postgres_errors, run_steps

__all__ = ["PostgresStore", "MIGRATIONS", "is_secret_key"]

T = TypeVar("T")
_MISSING = (pg_errors.UndefinedTable, pg_errors.UndefinedColumn)
"""What a statement raises on tables whose schema is behind (see :meth:`PostgresStore._run`)."""
_closing: set[concurrent.futures.Future[None]] = set()  # pool closings scheduled on other loops (kept from collection)


RECONNECT_WINDOW = 5.0
"""Seconds a pool the store opens retries a lost connection (psycopg_pool's delays of 1, 2, 4 s...,
so no more than 2 s apart) before it gives up (see :meth:`PoolOptions.pool_kwargs`)."""


class _RetryWhileCallsWait:
    """A pool's ``reconnect_failed``: when a :data:`RECONNECT_WINDOW` of attempts has failed, start
    another only while a call may still be waiting for a connection, so a server back up mid-wait
    is used within about two seconds, but a database that stays down is not retried (and logged
    about, one WARNING a second) for as long as the store is open.  Once the pool has given up,
    the next call starts it connecting again: psycopg_pool grows an empty pool for each request.

    psycopg_pool does not tell which calls still wait (``requests_waiting`` keeps those that timed
    out until a connection comes), so its count of requests tells instead: one counted since the
    last give-up came from a call that waits at most ``wait`` seconds (the pool's ``timeout``)."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self._requests, self._until = 0, 0.0
        self._lock = threading.Lock()  # a sync pool's workers may give up at once

    def __call__(self, pool: ConnectionPool | AsyncConnectionPool) -> Awaitable[None] | None:
        """Restart ``pool``'s attempts (``check()``, which grows an empty pool; the async pool's is a
        coroutine, which psycopg_pool awaits) if :meth:`retries` says so."""
        if self.retries(pool.get_stats().get("requests_num", 0), time.monotonic()):
            return pool.check()
        return None

    def retries(self, requests: int, now: float) -> bool:
        """Whether a give-up at ``now`` (monotonic seconds), the pool having counted ``requests``
        requests, starts another window: within ``wait`` seconds of the first give-up after a request."""
        with self._lock:
            if requests != self._requests:
                self._requests, self._until = requests, now + self.wait
            return now < self._until


class PoolOptions(NamedTuple):
    """The sizing and timeout of every pool a store opens, sync or async."""

    min_size: int
    max_size: int
    timeout: float

    def connection_kwargs(self, dsn: str) -> dict[str, Any]:
        """Keywords for each connection to ``dsn``: autocommit (writes open explicit
        transactions), and the timeouts and keepalives :func:`.postgres_conninfo.connection_settings`
        derives from ``connect_timeout`` unless ``dsn``, the environment or a service file sets them."""
        return {"autocommit": True, **connection_settings(dsn, self.timeout)}

    def pool_kwargs(self, pool_class: Any, dsn: str, connection: dict[str, Any] | None = None) -> dict[str, Any]:
        """Keywords for a psycopg pool of ``pool_class`` (sync or async) on ``dsn``, opened by the caller:

        * connections of :meth:`connection_kwargs` (``connection``: those the caller worked out
          already for its first connection), each checked (``check_connection``) as it is
          handed out, so connections the server ended while idle (a restart, a failover, an idle
          timeout) are replaced instead of failing a call;
        * a call waits at most ``connect_timeout`` seconds for a connection (``timeout``; the
          pool's default is 30 s);
        * a lost connection is retried for :data:`RECONNECT_WINDOW` seconds (``reconnect_timeout``),
          and again while a call waits for a connection (:class:`_RetryWhileCallsWait`), then left
          to the next call: psycopg_pool doubles its delay between attempts for 5 minutes by
          default, so a server back after an outage went unused for up to two minutes; now a
          call gets it within about two seconds."""
        kwargs = self.connection_kwargs(dsn) if connection is None else connection  # given: worked out already
        return {"min_size": self.min_size, "max_size": self.max_size, "kwargs": kwargs,
                "open": False, "name": "context-gatekeeper", "check": pool_class.check_connection,
                "timeout": self.timeout, "reconnect_timeout": RECONNECT_WINDOW,
                "reconnect_failed": _RetryWhileCallsWait(self.timeout)}


def _index_backfill(_table_prefix: str, q: ops.Statements) -> Any:
    """Migration 2's backfill, as steps: :func:`.postgres_ops.backfill_steps`."""
    return ops.backfill_steps(q)


def _chain_backfill(_table_prefix: str, q: ops.Statements) -> Any:
    """Migration 4's backfill, as steps: :func:`.postgres_ops.chain_backfill_steps`."""
    return ops.chain_backfill_steps(q)


def _unambiguous_chain(table_prefix: str, q: ops.Statements) -> Any:
    """Migration 5's backfill, as steps: :func:`.postgres_ops.unambiguous_chain_steps` (each
    session under its writers' lock)."""
    return ops.unambiguous_chain_steps(q, table_prefix)


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
        _index_backfill,
    ),
    Migration(3, "saved vectors", (VECTORS_TABLE,)),
    Migration(
        4,
        "revision hash chain",
        ("ALTER TABLE {revisions} ADD COLUMN digest text",),
        _chain_backfill,
    ),
    Migration(5, "unambiguous hash chain fields", (), _unambiguous_chain),
)
"""Add new migrations at the end; never change or remove a released one.  ``{revisions}``, ``{ids}``
and ``{migrations}`` stand for the prefixed table names (composed as identifiers); a backfill
is a function of ``(table_prefix, statements)`` giving the steps to run (see :mod:`.postgres_ops`)."""

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}\Z")


class PostgresStore(Store, VectorStore):
    """Revision logs in PostgreSQL tables named ``<table_prefix>revisions`` and
    ``<table_prefix>schema_migrations`` (saved vectors: ``<table_prefix>vectors``).

    Args:
        dsn_or_pool: a libpq connection string or ``postgresql://`` URL (the store
            opens and owns a :class:`psycopg_pool.ConnectionPool`), or a pool of
            your own (the store uses it and never closes it; its connections may be
            in autocommit mode or not, and make any kind of row; give it
            ``check=ConnectionPool.check_connection`` to survive server restarts).
        table_prefix: prepended to the table names, so several stores (or test
            runs) can share a database: letters, digits and ``_``, at most 40.
        min_size, max_size: the size of each pool the store opens (ints, ``0 <= min_size
            <= max_size``, ``max_size >= 1``).
        fault_hook: called with "begin", "written" and "before_commit" inside each
            commit's transaction (tests use it to fail or kill a writer there).
        setup: apply missing migrations now (default); pass False to defer to an
            explicit ``setup()``.
        connect_timeout: seconds (more than 0) to wait for the first connections of each
            pool the store opens, and for a connection at each call; each connection's libpq
            ``connect_timeout``, TCP keepalives and ``tcp_user_timeout`` are derived from it
            (:func:`.postgres_conninfo.connection_settings`) unless the connection string, libpq's
            environment variables or its service file set them, so a network partition fails a
            call after about twice this.
        lock_timeout: seconds a write waits for its session's lock (held by another writer
            of the session) before giving up with :class:`StoreUnavailableError`, writing
            nothing; like ``SQLiteStore``'s ``busy_timeout``.  None: wait as long as the
            server's own ``lock_timeout`` says (by default, forever).
        async_pool: an open :class:`psycopg_pool.AsyncConnectionPool` of your own for
            the async twins (used, never closed; it belongs to the event loop it was
            opened in, and the store refuses it from any other loop).

    Threads share the sync pool (each call checks out its own connection).  The async
    twins (``acommit``, ``ahead``, ...) are native: they run the same operations on
    psycopg's async connections, so they never block the event loop nor use a thread.
    From a connection string the store opens their :class:`~psycopg_pool.AsyncConnectionPool`
    on first async use, one per event loop (a pool cannot outlive or leave its loop:
    two ``asyncio.run`` calls in a row each get their own; how each is released, loops
    left open included, is told in the module docstring).  Given
    a sync pool of your own and no ``async_pool``, the store opens no connection of its
    own and the async twins run the sync methods in worker threads.  The fault hook
    runs inside the transaction either way; the native twins call it (only when one is
    set, i.e. in tests) in a worker thread, so a hook may block as it may in sync code.

    The database must use the UTF8 encoding.  ``purge`` deletes the session's rows
    in one transaction; the server reclaims their space at its next ``VACUUM``.

    Every read of revisions checks the hash chain (:mod:`.chain`) of the rows it returns,
    and that each carries the session's id: a row edited, removed, moved to another session
    or renamed by hand raises :class:`CorruptLogError` naming the first bad revision.  A
    reader that has read rows before checks only those it has not read yet (an open
    ``Transcript`` catching up reads ``revisions(session, after=its head - 1)``), so a row
    changed after an object read it is found when the session is opened anew; meanwhile that
    object serves the text it read and appends after it (``docs/guide/stores.md`` says what
    the repair then costs, and what to do instead).  ``setup()`` (run when the store is
    opened) refuses tables whose column types were changed by hand
    (:class:`SchemaVersionError` naming the column; the store reads every value back exactly
    as it wrote it), and tables or columns that the migrations table records but that were
    dropped by hand (naming them and how to restore them), writing nothing.
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
        lock_timeout: float | None = 30.0,
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
        self.lock_timeout = _checked_lock_timeout(lock_timeout)
        options = _checked_pool_options(min_size, max_size, connect_timeout)
        self._names, self._sql = ops.compose(table_prefix)
        if isinstance(dsn_or_pool, ConnectionPool):
            self._pool, self._owns_pool = dsn_or_pool, False
            self._init_async(None, options, async_pool)
        elif isinstance(dsn_or_pool, str):
            check_conninfo(dsn_or_pool)
            with postgres_errors(f"PostgresStore({redacted(dsn_or_pool)!r})"):
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
        return f"PostgresStore({redacted(self._pool.conninfo)!r}, table_prefix={self.table_prefix!r})"

    # -- plumbing -----------------------------------------------------------------------
    def _key(self, session_id: Any) -> Key:
        """``(session_key, session_id)`` after checking the id can be stored."""
        return ops.session_key(session_id)

    def _lock_key(self, name: str, key: bytes = b"") -> int:
        """The advisory lock of ``name`` (``"setup"``, or ``"session"`` with its key)."""
        return ops.lock_key(self.table_prefix, name, key)

    def _session_lock(self, key: Key) -> int:
        """The advisory lock a session's writers take."""
        return self._lock_key("session", key[0])

    def _hook(self) -> ops.FaultHook | None:
        """What the operations call at their fault points: None when no hook is set."""
        return self._fault if self.fault_hook is not None else None

    def _schema_error(self, recorded: set[int] | None) -> SchemaVersionError | None:
        """What to raise when a statement met a missing table or column and the tables have
        had the migrations ``recorded`` (None: none at all); None: the schema is up to date."""
        return schema_behind(recorded, MIGRATIONS, f"the database of {self!r}",
                             "call store.setup(), or open one PostgresStore on it with setup=True (the default),",
                             "the connection string and table_prefix")

    def _drift_steps(self) -> Steps[SchemaVersionError | None]:
        """What to raise when a statement met a missing table or column: the tables' schema is
        behind (:meth:`_schema_error`), or a table or column a recorded migration created was
        dropped by hand (:meth:`_missing_error`); None: neither (the failure stays psycopg's)."""
        recorded = yield from ops.recorded_steps(self._sql, self.table_prefix)
        error = self._schema_error(recorded)
        if error is None and recorded:
            columns = yield from ops.column_types_steps(self._sql, self.table_prefix, f"the database of {self!r}")
            error = self._missing_error(columns, recorded)
        return error

    def _missing_error(self, found: set[tuple[str, str]], recorded: set[int]) -> SchemaVersionError | None:
        """The error for tables whose migrations table records ``recorded`` but lack what such a
        migration created (``found``: the columns that exist, :func:`.postgres_ops.column_types_steps`)."""
        missing = ops.missing_objects(found, self.table_prefix, recorded, MIGRATIONS)
        record = ops.found_as(self.table_prefix, "migrations")
        return missing_error(f"the database of {self!r}", missing, MIGRATIONS, record)

    def _closed_error(self) -> StoreClosedError:
        return StoreClosedError(f"{self!r} is closed; open a new PostgresStore on the same database to go on")

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the sync pool for the block (its transaction, if any, committed at the end)."""
        if self._closed:
            raise self._closed_error()
        with self._closing_race(), self._pool.connection() as conn:
            yield conn

    def _lock_wait(self, unbounded: bool) -> float | None:
        """The seconds a locked transaction waits for its lock (:func:`.postgres_ops.locked`):
        :attr:`lock_timeout`, or (``unbounded``: setup) 0, no limit for the advisory lock alone, so
        that a ``lock_timeout`` the server, database or role sets does not end the wait for another
        worker's migration (the migration's own DDL keeps that limit, :func:`.postgres_ops.locked`)."""
        return 0 if unbounded else self.lock_timeout

    def _run(self, steps: Steps[T], lock: int | None = None, *, unbounded: bool = False) -> T:
        """Run an operation on a pooled connection: with ``lock``, in one transaction that
        first takes that advisory lock (committed if it returns, else rolled back), waiting
        for it at most :attr:`lock_timeout` seconds (``unbounded``: as long as it takes, whatever
        lock_timeout the server or role sets; setup waits out another worker's migration, however long).

        In pipeline mode, so ``BEGIN``, the lock and the next query travel together,
        and the last statement together with ``COMMIT``: the lock is held for two
        round trips, not five, which matters when many writers queue for it.

        A statement that fails on a missing table or column, in tables whose schema is not
        up to date (opened with ``setup=False``), raises :class:`SchemaVersionError`.
        """
        try:
            return self._run_once(steps, lock, unbounded)
        except _MISSING as exc:
            error = self._run_once(self._drift_steps())
            if error is None:
                raise
            raise error from exc

    def _run_once(self, steps: Steps[T], lock: int | None = None, unbounded: bool = False) -> T:
        """:meth:`_run`, a failure on a missing table or column left as psycopg raised it."""
        with postgres_errors(self), self._connection() as conn:
            if lock is None:
                return run_steps(conn, None, steps)
            with _pipeline(conn) as pipeline, conn.transaction(), _drained(pipeline):
                return run_steps(conn, pipeline, ops.locked(self._sql, lock, steps, self._lock_wait(unbounded)))

    # -- async plumbing: a pool per event loop (see the module docstring) ---------------
    def _init_async(self, dsn: str | None, options: PoolOptions, given: AsyncConnectionPool | None) -> None:
        """Where the async twins get connections: ``given``, else pools opened from ``dsn``
        per loop, else (neither) the sync methods in worker threads."""
        self._adsn, self._aoptions, self._agiven = dsn, options, given
        self._agiven_loop: asyncio.AbstractEventLoop | None = None
        self._apools: dict[asyncio.AbstractEventLoop, _Opening] = {}
        # guards _apools, _agiven_loop and the switch of _closed: loops in several threads
        # may open pools at once, and close() may run in yet another thread
        self._apools_lock = threading.Lock()

    async def _apool(self) -> AsyncConnectionPool | None:
        """The async pool of the running loop (opened on first use); None: use threads."""
        if self._closed:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        if self._agiven is not None:
            return self._given_pool(loop, self._agiven)
        if self._adsn is None:
            return None
        opening = self._apools.get(loop)
        if opening is None or not _succeeded(opening.task):
            opening = self._opening(loop, self._adsn)
        pool = await asyncio.shield(opening.task)  # a cancelled caller leaves the opening to the others
        if self._closed:  # closed while it opened: close() took this pool too; close it now anyway
            await pool.close()
            raise self._closed_error()
        return pool

    def _given_pool(self, loop: asyncio.AbstractEventLoop, given: AsyncConnectionPool) -> AsyncConnectionPool:
        """The caller's ``async_pool``, if ``loop`` is its loop (the loop its tasks run on
        once it is open, else the first loop that uses it)."""
        with self._apools_lock:
            if self._closed:
                raise self._closed_error()
            if self._agiven_loop is None:
                self._agiven_loop = _loop_of(given) or loop
            if self._agiven_loop is not loop:
                raise InvalidInputError(
                    "the async_pool given to this PostgresStore belongs to another event loop (the one it "
                    "was opened in, or that first used it); give each event loop its own store and pool "
                    "(or pass a connection string, and the store opens a pool per loop)"
                )
        return given

    def _opening(self, loop: asyncio.AbstractEventLoop, dsn: str) -> _Opening:
        """The opening of ``loop``'s pool: the one under way or done, else a new one (also
        in place of one that failed or was cancelled).  Forgets the pools of loops that
        have closed, and closes those of loops left idle by a thread that has ended."""
        with self._apools_lock:
            if self._closed:
                raise self._closed_error()
            opening = self._apools.get(loop)
            if opening is None or (opening.task.done() and not _succeeded(opening.task)):
                opening = self._apools[loop] = _Opening(
                    loop.create_task(_aopen_pool(dsn, self._aoptions)), threading.current_thread()
                )
            abandoned = [(other, entry) for other, entry in self._apools.items()
                         if other.is_closed() or (not other.is_running() and not entry.thread.is_alive())]
            for other, _entry in abandoned:
                del self._apools[other]
        _close_idle_pools([(other, entry) for other, entry in abandoned if not other.is_closed()], wait=False)
        return opening

    @contextmanager
    def _closing_race(self) -> Iterator[None]:
        """Around a pool checkout: a pool closed by :meth:`close` under a call still in
        flight raises :class:`StoreClosedError`, as a call after it does (a pool of the
        caller's that its owner closed still raises psycopg's ``PoolClosed``)."""
        try:
            yield
        except PoolClosed as exc:
            if not self._closed:
                raise
            raise self._closed_error() from exc

    async def _arun(self, steps: Steps[T], lock: int | None = None, *, unbounded: bool = False) -> T:
        """The async twin of :meth:`_run`: the same steps on a connection of the loop's pool."""
        with postgres_errors(self):
            pool = await self._apool()
        if pool is None:
            return await asyncio.to_thread(functools.partial(self._run, steps, lock, unbounded=unbounded))
        try:
            return await self._arun_once(pool, steps, lock, unbounded)
        except _MISSING as exc:
            error = await self._arun_once(pool, self._drift_steps())
            if error is None:
                raise
            raise error from exc

    async def _arun_once(
        self, pool: AsyncConnectionPool, steps: Steps[T], lock: int | None = None, unbounded: bool = False
    ) -> T:
        """:meth:`_arun` on ``pool``, a failure on a missing table or column left as psycopg raised it."""
        with postgres_errors(self), self._closing_race():
            async with pool.connection() as conn:
                if lock is None:
                    return await arun_steps(conn, None, steps)
                async with _apipeline(conn) as pipeline, conn.transaction(), _adrained(pipeline):
                    wait = self._lock_wait(unbounded)
                    return await arun_steps(conn, pipeline, ops.locked(self._sql, lock, steps, wait))

    def _release_async_pools(self, current: asyncio.AbstractEventLoop | None) -> _Released:
        """Mark the store closed and take every pool it opened (so each is closed once):
        those of other running loops are closed on their loop (scheduled), those of loops
        that have closed are dropped (their tasks were cancelled when the loop ended, their
        connections go when the pool is collected).  Returns ``current``'s opening and the
        idle loops' (not running, not closed) for the caller to close."""
        with self._apools_lock:
            self._closed = True
            pools, self._apools = self._apools, {}
        released = _Released(None, [])
        for loop, entry in pools.items():
            if loop is current:
                released = released._replace(mine=entry.task)
            elif loop.is_running():
                _close_on_its_loop(loop, entry.task)
            elif not loop.is_closed():
                released.idle.append((loop, entry))
        return released

    def _setup_steps(self) -> Steps[None]:
        """Create the schema or bring it up to date (under the setup lock).  Tables that
        have had every migration are only read: a role without CREATE on the schema (a
        worker using tables another job created and migrated) opens them too.  Every
        statement names the schema the tables were found in (:func:`.postgres_ops.home_steps`),
        so a migration never starts a second set in another schema of the search path."""
        encoding = (yield Step("one", self._sql["encoding"]))[0]
        if encoding.upper() not in ("UTF8", "UTF-8"):
            raise InvalidInputError(f"PostgresStore needs a UTF8 database; this one is {encoding}")
        schema = yield from ops.home_steps(self._sql, self.table_prefix)
        names, q = ops.compose(self.table_prefix, schema)  # None: no schema to create in (InvalidSchemaName)
        recorded = yield from ops.recorded_steps(q, self.table_prefix)
        if recorded is not None:
            refuse_newer(recorded, MIGRATIONS, "set of tables")
        # a column whose type was changed, or a recorded table or column dropped, by hand: refused before
        # any DDL (one catalog query)
        columns = yield from ops.column_types_steps(q, self.table_prefix, f"the database of {self!r}")
        missing = self._missing_error(columns, recorded) if recorded else None  # a recorded table dropped by hand
        if missing is not None:
            raise missing
        if recorded is not None and all(migration.version in recorded for migration in MIGRATIONS):
            return  # up to date: no DDL, so no CREATE privilege needed
        # what a migration creates, there without its record (deleted by hand): refused before any DDL
        found = yield from ops.unrecorded_steps(q, self.table_prefix, recorded or set(), MIGRATIONS)
        table = ops.found_as(self.table_prefix, "migrations")
        create = None if recorded is not None else (
            f"CREATE TABLE {table} (version integer PRIMARY KEY, name text NOT NULL, applied_at double precision NOT NULL)")
        unrecorded = unrecorded_error(f"the database of {self!r}", found, MIGRATIONS, table, create)
        if unrecorded is not None:
            raise unrecorded
        if recorded is None:  # not for tables that have one: CREATE needs the privilege even when it exists
            yield Step("none", q["create_migrations"])
        applied = {row[0] for row in (yield Step("all", q["applied"]))}
        refuse_newer(applied, MIGRATIONS, "set of tables")
        for migration in MIGRATIONS:
            if migration.version not in applied:
                for statement in migration.statements:
                    yield Step("none", sql.SQL(statement).format(**names))
                if migration.backfill is not None:
                    backfill: Any = migration.backfill  # here a function of (table prefix, statements) giving steps
                    yield from backfill(self.table_prefix, q)
                yield Step("none", q["record"], (migration.version, migration.name, time.time()))

    # -- Store --------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the schema or bring it up to date (idempotent, one transaction)."""
        self._run(self._setup_steps(), self._lock_key("setup"), unbounded=True)

    def applied_migrations(self) -> list[tuple[int, str]]:
        """``(version, name)`` of every migration these tables have had, in order."""
        return self._run(ops.applied_steps(self._sql))

    def head(self, session_id: str) -> int:
        """The latest revision number of a session (0 when it has none)."""
        return self._run(ops.head_steps(self._sql, self._key(session_id)))

    def tip(self, session_id: str) -> tuple[int, float]:
        """``(head, time of the head revision)``; ``(0, 0.0)`` for an empty session."""
        return self._run(ops.tip_steps(self._sql, self._key(session_id)))

    def revisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """The revisions numbered above ``after``, in order."""
        return self._run(ops.load_steps(self._sql, self._key(session_id), checked_after(after)))

    def commit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        """Store ``revision`` as the next one in one transaction (see :class:`Store`)."""
        key = self._key(session_id)
        ops.checked_text_fields(revision)
        steps = ops.commit_steps(self._sql, key, revision, expected_head, renew_taken_ids, self._hook)
        return self._run(steps, self._session_lock(key))

    def truncate(self, session_id: str, keep: int) -> int:
        """Set aside the revisions above ``keep`` (table ``<prefix>set_aside_revisions``)
        and rebuild the session's id index, in one transaction (see :meth:`Store.truncate`)."""
        key, keep = self._key(session_id), checked_keep(keep)
        return self._run(ops.truncate_steps(self._sql, key, keep), self._session_lock(key))

    def purge(self, session_id: str) -> None:
        """Erase a session entirely, in one transaction (queued behind its writers).

        When the id's key holds no row (an id never stored included), the rows that carry the
        id under other keys (a session renamed whole by hand) are erased too, and finding them
        reads the revisions and set-aside tables through once (the session id column has no
        index): some 15-25 ms at 100k revision rows, growing with the table (see
        :func:`.postgres_ops.purge_steps`)."""
        key = self._key(session_id)
        self._run(ops.purge_steps(self._sql, key), self._session_lock(key))

    def sessions(self) -> list[str]:
        """Ids of the sessions that have at least one revision, sorted by code point."""
        return self._run(ops.sessions_steps(self._sql))

    def stored_sessions(self) -> list[str]:
        """Sessions with revisions or set-aside revisions, sorted by code point (see
        :meth:`Store.stored_sessions`; a session's vectors never outlive its revisions)."""
        return self._run(ops.stored_sessions_steps(self._sql))

    # -- saved vectors (VectorStore; table ``<prefix>vectors``, migration 3) ------------
    # Writes take the session's advisory lock, so they queue behind (and never outlive) a
    # concurrent ``purge``, and a save checks, under that lock, that the session still holds revisions.
    def _saving(self, session_id: str, rows: Iterable[Any]) -> tuple[Key, list[tuple[Any, ...]]]:
        """The session's key and the table rows to save (all checked before anything is
        written; a closed store refuses even an empty save, as the SQLite store does)."""
        if self._closed:
            raise self._closed_error()
        key, checked = self._key(session_id), checked_rows(rows)
        now = time.time()
        return key, [
            (key[0], r.embedder, r.dimension, r.text_hash, id_key(r.message_id), pack_vector(r.vector), now)
            for r in checked
        ]

    def save_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        """Store vectors for the session in one transaction (see :class:`.VectorStore`)."""
        key, values = self._saving(session_id, rows)
        if not values:
            return 0
        return self._run(ops.save_vectors_steps(self._sql, self, key, values), self._session_lock(key))

    def load_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        """The session's vectors by ``embedder`` (of ``dimension`` floats, if given), oldest first."""
        return self._run(ops.load_vectors_steps(self._sql, self, session_id, embedder, dimension))

    def delete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        """Erase the session's vectors (of one embedder, or all); returns how many."""
        key = self._key(session_id)
        return self._run(ops.delete_vectors_steps(self._sql, key, embedder), self._session_lock(key))

    async def asave_vectors(self, session_id: str, rows: Iterable[Any]) -> int:
        """Async :meth:`save_vectors` (native, no thread)."""
        key, values = self._saving(session_id, rows)
        if not values:
            return 0
        return await self._arun(ops.save_vectors_steps(self._sql, self, key, values), self._session_lock(key))

    async def aload_vectors(self, session_id: str, embedder: str, *, dimension: int | None = None) -> list[VectorRow]:
        """Async :meth:`load_vectors` (native, no thread)."""
        return await self._arun(ops.load_vectors_steps(self._sql, self, session_id, embedder, dimension))

    async def adelete_vectors(self, session_id: str, embedder: str | None = None) -> int:
        """Async :meth:`delete_vectors` (native, no thread)."""
        key = self._key(session_id)
        return await self._arun(ops.delete_vectors_steps(self._sql, key, embedder), self._session_lock(key))

    # -- async twins (native: the same steps on the loop's pool) ------------------------
    async def asetup(self) -> None:
        """Async :meth:`setup`."""
        await self._arun(self._setup_steps(), self._lock_key("setup"), unbounded=True)

    async def ahead(self, session_id: str) -> int:
        """Async :meth:`head`."""
        return await self._arun(ops.head_steps(self._sql, self._key(session_id)))

    async def atip(self, session_id: str) -> tuple[int, float]:
        """Async :meth:`tip`."""
        return await self._arun(ops.tip_steps(self._sql, self._key(session_id)))

    async def arevisions(self, session_id: str, after: int = 0) -> list[Revision]:
        """Async :meth:`revisions`."""
        return await self._arun(ops.load_steps(self._sql, self._key(session_id), checked_after(after)))

    async def acommit(
        self, session_id: str, revision: Revision, *, expected_head: int | None, renew_taken_ids: bool = False
    ) -> Revision:
        """Async :meth:`commit`: the same checks in the same transaction."""
        key = self._key(session_id)
        ops.checked_text_fields(revision)
        steps = ops.commit_steps(self._sql, key, revision, expected_head, renew_taken_ids, self._hook)
        return await self._arun(steps, self._session_lock(key))

    async def atruncate(self, session_id: str, keep: int) -> int:
        """Async :meth:`truncate`."""
        key, keep = self._key(session_id), checked_keep(keep)
        return await self._arun(ops.truncate_steps(self._sql, key, keep), self._session_lock(key))

    async def apurge(self, session_id: str) -> None:
        """Async :meth:`purge`."""
        key = self._key(session_id)
        await self._arun(ops.purge_steps(self._sql, key), self._session_lock(key))

    async def asessions(self) -> list[str]:
        """Async :meth:`sessions`."""
        return await self._arun(ops.sessions_steps(self._sql))

    async def astored_sessions(self) -> list[str]:
        """Async :meth:`stored_sessions`."""
        return await self._arun(ops.stored_sessions_steps(self._sql))

    async def aapplied_migrations(self) -> list[tuple[int, str]]:
        """Async :meth:`applied_migrations`."""
        return await self._arun(ops.applied_steps(self._sql))

    def close(self) -> None:
        """Close the pools this store opened; the store may not be used afterwards
        (:class:`StoreClosedError`, also for calls in flight that had not got a connection
        yet).  Idempotent, and each pool is closed on its own: a close or ``aclose`` that
        was interrupted is finished by the next.  Async pools of a running loop are closed
        on that loop (scheduled), those of an idle loop by running it in a worker thread;
        prefer ``await store.aclose()`` from async code."""
        _mine, idle = self._release_async_pools(None)
        try:
            _close_idle_pools(idle, wait=True)
        finally:
            if self._owns_pool:
                self._pool.close()  # idempotent

    async def aclose(self) -> None:
        """Async :meth:`close`: closes this loop's pool here, other running loops' pools on
        their loop, idle loops' pools on their loop in a worker thread, and the sync pool
        (if the store opened them).  Idempotent; a cancelled or failed ``aclose`` still
        closes the sync pool, and a later ``close`` or ``aclose`` closes what is left."""
        mine, idle = self._release_async_pools(asyncio.get_running_loop())
        try:
            if mine is not None:  # shielded: a cancelled aclose leaves the closing to finish
                await asyncio.shield(asyncio.ensure_future(_close_opened(mine)))
            await asyncio.to_thread(_close_idle_pools, idle, wait=True)
        finally:
            if self._owns_pool:
                await asyncio.to_thread(self._pool.close)  # joins the sync pool's worker threads (idempotent)


# -- helpers ------------------------------------------------------------------------------
def _open_pool(dsn: str, options: PoolOptions) -> ConnectionPool:
    """An open pool of autocommit connections (writes open explicit transactions).

    One direct connection first, so a wrong DSN or password fails at once with the
    server's own reason instead of a pool timeout.
    """
    connection = options.connection_kwargs(dsn)  # (reads the environment and any service file: once)
    with psycopg.connect(dsn, **connection):
        pass
    pool: ConnectionPool = ConnectionPool(dsn, **options.pool_kwargs(ConnectionPool, dsn, connection))
    try:
        pool.open(wait=True, timeout=options.timeout)
    except BaseException:
        pool.close()
        raise
    return pool


def _checked_lock_timeout(value: object) -> float | None:
    """``lock_timeout`` when it is None or a positive number of seconds PostgreSQL can keep
    (an int of milliseconds: :func:`~.base.checked_seconds`)."""
    hint = "; pass None to wait as long as the server's lock_timeout says"
    return None if value is None else checked_seconds("lock_timeout", value, zero=False, hint=hint)


def _checked_pool_options(min_size: object, max_size: object, connect_timeout: object) -> PoolOptions:
    """The pool options if ``min_size`` and ``max_size`` are ints with ``0 <= min_size <=
    max_size`` and ``max_size >= 1``, and ``connect_timeout`` a number of seconds above 0."""
    least, most = _checked_size("min_size", min_size), _checked_size("max_size", max_size)
    if not 0 <= least <= most or most < 1:
        raise InvalidInputError(
            f"min_size and max_size are the least and most connections of each pool the store opens: "
            f"0 <= min_size <= max_size and max_size >= 1, got min_size={least}, max_size={most}"
        )
    return PoolOptions(least, most, checked_seconds("connect_timeout", connect_timeout, zero=False))


def _checked_size(name: str, value: object) -> int:
    """``value`` if it is an int (a pool size)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int (connections in each pool), got {type(value).__name__} {value!r}")
    return value


def _pipeline(conn: psycopg.Connection[Any]) -> AbstractContextManager[psycopg.Pipeline | None]:
    """Pipeline mode where libpq supports it (14+), else plain statements (same results)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()


@contextmanager
def _drained(pipeline: psycopg.Pipeline | None) -> Iterator[None]:
    """Inside a transaction in pipeline mode: when a statement fails, end the pipeline's
    aborted run (a sync) before the transaction's ROLLBACK is sent.  The server skips every
    statement after a failed one up to the next sync, so the ROLLBACK sent right after a
    failure that arrived while later statements were in flight was skipped too, and psycopg
    logged "error ignored terminating <psycopg.Pipeline ...>: pipeline aborted" beside the
    error the store raises anyway (which stays the one raised)."""
    try:
        yield
    except psycopg.Error:
        if pipeline is not None:
            with suppress(psycopg.Error):  # the skipped statements' "pipeline aborted": the error is raised below
                pipeline.sync()
        raise


@asynccontextmanager
async def _adrained(pipeline: psycopg.AsyncPipeline | None) -> AsyncIterator[None]:
    """The async twin of :func:`_drained`."""
    try:
        yield
    except psycopg.Error:
        if pipeline is not None:
            with suppress(psycopg.Error):
                await pipeline.sync()
        raise


class _Opening(NamedTuple):
    """A loop's pool, being opened or open, and the thread that asked for it (when that
    thread has ended and the loop is idle, nothing will run the loop again)."""

    task: asyncio.Task[AsyncConnectionPool]
    thread: threading.Thread


class _Released(NamedTuple):
    """What :meth:`PostgresStore._release_async_pools` leaves its caller to close."""

    mine: asyncio.Task[AsyncConnectionPool] | None
    idle: list[tuple[asyncio.AbstractEventLoop, _Opening]]


async def _aopen_pool(dsn: str, options: PoolOptions) -> AsyncConnectionPool:
    """An open async pool (see :func:`_open_pool`): one direct connection
    first, so a wrong DSN or password fails with the server's own reason."""
    connection = options.connection_kwargs(dsn)  # (reads the environment and any service file: once)
    first = await psycopg.AsyncConnection.connect(dsn, **connection)
    await first.close()
    pool: AsyncConnectionPool = AsyncConnectionPool(dsn, **options.pool_kwargs(AsyncConnectionPool, dsn, connection))
    try:
        await pool.open(wait=True, timeout=options.timeout)
    except BaseException:
        await pool.close()
        raise
    return pool


async def _close_opened(opening: asyncio.Task[AsyncConnectionPool]) -> None:
    """Close the pool ``opening`` opens (nothing if its opening failed or was cancelled)."""
    try:
        pool = await opening
    except Exception:
        return
    except asyncio.CancelledError:
        if opening.cancelled():
            return
        raise  # this closing itself was cancelled
    await pool.close()


def _close_on_its_loop(loop: asyncio.AbstractEventLoop, opening: asyncio.Task[AsyncConnectionPool]) -> None:
    """Schedule the closing of ``opening``'s pool on ``loop``, a loop running in another thread."""
    future = asyncio.run_coroutine_threadsafe(_close_opened(opening), loop)
    _closing.add(future)
    future.add_done_callback(_closing.discard)


def _close_on_idle_loops(idle: list[tuple[asyncio.AbstractEventLoop, _Opening]]) -> None:
    """Close the pools of loops that are neither running nor closed by running each loop
    until its pool is closed; call it in a thread that runs no loop.  A loop that started
    running (or closed) meanwhile has its pool closed on it (or dropped) instead."""
    for loop, entry in idle:
        closing = _close_opened(entry.task)
        try:
            loop.run_until_complete(closing)
        except RuntimeError:  # raised before the loop took the coroutine
            closing.close()
            if loop.is_running():
                _close_on_its_loop(loop, entry.task)


def _close_idle_pools(idle: list[tuple[asyncio.AbstractEventLoop, _Opening]], *, wait: bool) -> None:
    """Close the pools of idle loops (see :func:`_close_on_idle_loops`) in a short-lived
    thread: the calling thread may be running a loop, and one thread cannot run two.
    ``wait``: return once they are closed."""
    if idle:
        closer = threading.Thread(target=_close_on_idle_loops, args=(idle,), name="context-gatekeeper-pool-closer",
                                  daemon=True)
        closer.start()
        if wait:
            closer.join()


def _succeeded(opening: asyncio.Task[AsyncConnectionPool]) -> bool:
    """Whether ``opening`` has opened its pool (not still under way, failed or cancelled)."""
    return opening.done() and not opening.cancelled() and opening.exception() is None


def _loop_of(pool: AsyncConnectionPool) -> asyncio.AbstractEventLoop | None:
    """The loop an open pool's tasks run on (None before it is opened).  psycopg_pool keeps
    no public record of it: its scheduler task tells."""
    runner = getattr(pool, "_sched_runner", None)
    return runner.get_loop() if isinstance(runner, asyncio.Task) else None


def _apipeline(conn: psycopg.AsyncConnection[Any]) -> AbstractAsyncContextManager[psycopg.AsyncPipeline | None]:
    """Pipeline mode where libpq supports it (14+), else plain statements (same results)."""
    return conn.pipeline() if psycopg.Pipeline.is_supported() else nullcontext()
