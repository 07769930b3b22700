"""What :class:`~context_gatekeeper.stores.postgres.PostgresStore` does, written once for
its sync and its async methods: each operation is a generator of SQL steps (sans-IO).

An operation such as :func:`commit_steps` yields :class:`Step` values (a statement, its
parameters and what to fetch) and receives each step's result; it never touches a
connection.  Operations are plain functions of what they need: the store's composed
statements (:func:`compose`), the session's key (:func:`session_key`) and the values.
Two small drivers run the steps: :func:`run_steps` on a :class:`psycopg.Connection`
(the store's sync methods) and :func:`arun_steps` on a :class:`psycopg.AsyncConnection`
(its native async twins).  So the head check, the rebase, :func:`~.base.prepare_commit`
and the advisory lock are the same code in both, inside the same transaction; the
store only chooses the connection and opens the transaction (see
``docs/architecture.md#concurrency-rules``).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, NamedTuple, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import tuple_row
from psycopg_pool import PoolClosed, PoolTimeout

from ..errors import CorruptLogError, InvalidInputError, SchemaVersionError, StoreUnavailableError
from ..records.revisions import Revision
from .base import prepare_commit
from .chain import (
    anchor_damage, chained_prefix, forget_decoded, genesis, next_read, rechained, row_digest, unfollowable, verified,
)
from .integrity import IdEntry
from .schema import Migration, backfill_index, changes_text, checked_session, created_objects, id_key, index_rows
from .vectors import VectorRow, checked_dimension, checked_embedder, refused_save, stored_vectors

__all__ = [
    "Step", "Steps", "Stepper", "Key", "run_steps", "arun_steps", "TABLES", "VECTORS_TABLE", "compose",
    "session_key", "lock_key", "postgres_errors", "postgres_unavailable", "checked_text_fields",
]

T = TypeVar("T")

TABLES = {"revisions": "revisions", "migrations": "schema_migrations", "ids": "message_ids",
          "set_aside": "set_aside_revisions", "vectors": "vectors"}
"""Placeholder in the templates -> table name after the store's prefix."""
_COLUMNS = "number, parent, kind, instruction, model, created_at, base, target, changes"
_NAMES = """WITH keys AS (SELECT session_key, min(session_id COLLATE "C") AS first, max(session_id COLLATE "C") AS last
        FROM ({rows}) AS r GROUP BY session_key)
    SELECT NULL::bytea, first FROM keys WHERE first = last
    UNION ALL SELECT DISTINCT r.session_key, r.session_id FROM ({rows}) AS r
        JOIN keys k ON k.session_key = r.session_key AND k.first <> k.last"""
"""The names of the session keys among the stored ``(session_key, session_id)`` rows ``{rows}``
selects (:func:`named_keys`): ``(NULL, id)`` for a key whose rows all carry one id, which names
it whether or not its key is that id's (a session renamed whole is listed by the id its rows
carry); and the distinct ``(key, id)`` pairs of a key whose rows carry several (a row moved or
renamed by hand), for :func:`named_keys` to tell its own id from the others.  Grouping by key
in the server, and hashing ids only for such keys, made listing as fast as it was before the
session id was checked (sending every pair over and hashing each made it 2-3 times slower)."""

_TEMPLATES = {
    "create_migrations": """CREATE TABLE IF NOT EXISTS {migrations} (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at double precision NOT NULL
    )""",
    "applied": "SELECT version, name FROM {migrations} ORDER BY version",
    "has_table": "SELECT to_regclass(%s) IS NOT NULL",
    # the schema of a table as the statements find it, else the one CREATE TABLE creates it in (None: none exists)
    "home": """SELECT COALESCE((SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = to_regclass(%s)), current_schema()::text)""",
    "has_column": """SELECT EXISTS (SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass(%s) AND attname::text = %s::text AND attnum > 0 AND NOT attisdropped)""",
    # (table, column, type) of the store's tables that exist, each table given as (placeholder, found_as name)
    "column_types": """SELECT t.name, a.attname::text, format_type(a.atttypid, a.atttypmod)
        FROM unnest(%s::text[], %s::text[]) AS t (name, found) JOIN pg_attribute a ON a.attrelid = to_regclass(t.found)
        WHERE a.attnum > 0 AND NOT a.attisdropped""",
    "record": "INSERT INTO {migrations} (version, name, applied_at) VALUES (%s, %s, %s)",
    # a session's rows are those of its key (see session_key); their session_id is checked as they are read
    "head": "SELECT COALESCE(MAX(number), 0) FROM {revisions} WHERE session_key = %s",
    "tip": "SELECT number, created_at FROM {revisions} WHERE session_key = %s ORDER BY number DESC LIMIT 1",
    "load": f"SELECT {_COLUMNS} FROM {{revisions}} WHERE session_key = %s AND number > %s ORDER BY number",
    "load_chained": f"""SELECT {_COLUMNS}, digest, session_id FROM {{revisions}}
        WHERE session_key = %s AND number >= %s ORDER BY number""",
    "digest": "SELECT digest FROM {revisions} WHERE session_key = %s AND number = %s",
    "tip_digest": "SELECT number, digest FROM {revisions} WHERE session_key = %s ORDER BY number DESC LIMIT 1",
    "set_digest": "UPDATE {revisions} SET digest = %s WHERE session_key = %s AND number = %s",
    "insert": f"""INSERT INTO {{revisions}} (session_key, session_id, {_COLUMNS}, digest)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
    "purge": "DELETE FROM {revisions} WHERE session_key = %s RETURNING digest",
    # rows that carry the id %(id)s under a key other than its own %(key)s (moved or renamed by hand; see
    # purge_steps), and the id index and vectors of the keys this leaves without revisions: one
    # statement, each table read through once (session_id has no index).  Its parts share one snapshot,
    # so a key is left empty when none of its rows carries another id; the digests, for forget_decoded
    "purge_claimed": """WITH claimed AS (DELETE FROM {revisions} WHERE session_id = %(id)s AND session_key <> %(key)s
            RETURNING session_key, digest),
        aside AS (DELETE FROM {set_aside} WHERE session_id = %(id)s AND session_key <> %(key)s RETURNING session_key),
        emptied AS (SELECT c.k FROM (SELECT session_key FROM claimed UNION SELECT session_key FROM aside) AS c (k)
            WHERE NOT EXISTS (SELECT 1 FROM {revisions} r WHERE r.session_key = c.k AND r.session_id <> %(id)s)),
        ids_gone AS (DELETE FROM {ids} WHERE session_key IN (SELECT k FROM emptied)),
        vectors_gone AS (DELETE FROM {vectors} WHERE session_key IN (SELECT k FROM emptied))
        SELECT digest FROM claimed""",
    # the names of the keys (see named_keys), told apart by the server (see _NAMES)
    "sessions": _NAMES.format(rows="SELECT session_key, session_id FROM {revisions}"),
    # the vectors table keeps no session id, but a session's vectors never outlive its revisions
    "stored_sessions": _NAMES.format(
        rows="SELECT session_key, session_id FROM {revisions} UNION ALL SELECT session_key, session_id FROM {set_aside}"),
    "lookup": "SELECT message_id, present, digest FROM {ids} WHERE session_key = %s AND message_id = ANY(%s)",
    "upsert_id": """INSERT INTO {ids} (session_key, message_id, present, digest) VALUES (%s, %s, %s, %s)
        ON CONFLICT (session_key, message_id) DO UPDATE SET present = excluded.present, digest = excluded.digest""",
    "purge_ids": "DELETE FROM {ids} WHERE session_key = %s",
    "purge_set_aside": "WITH gone AS (DELETE FROM {set_aside} WHERE session_key = %s RETURNING 1) SELECT count(*) FROM gone",
    "set_aside": f"""INSERT INTO {{set_aside}} (session_key, session_id, {_COLUMNS}, set_aside_at)
        SELECT session_key, session_id, {_COLUMNS}, %s FROM {{revisions}}
        WHERE session_key = %s AND number > %s""",
    # the rows deleted, counted (a damaged log may have gaps: not max(head - keep, 0)), and their
    # digests, forgotten by the decoded-revision cache
    "drop_after": "DELETE FROM {revisions} WHERE session_key = %s AND number > %s RETURNING digest",
    "all_sessions": "SELECT DISTINCT session_key, session_id FROM {revisions}",
    # sessions with a row whose instruction or model name chain.chain_text escapes (migration 5)
    "ambiguous_sessions": """SELECT DISTINCT session_key, session_id FROM {revisions} WHERE digest IS NOT NULL AND (
        instruction = 'None' OR strpos(instruction, chr(31)) > 0 OR left(instruction, 1) = chr(30)
        OR model = 'None' OR strpos(model, chr(31)) > 0 OR left(model, 1) = chr(30))""",
    "encoding": "SELECT current_setting('server_encoding')",
    # a locked transaction's first statements: no snapshot before the lock (see :func:`locked`)
    "read_committed": "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "lock_timeout": "SELECT set_config('lock_timeout', %s, true)",
    # no limit for the next lock wait alone: the setting it replaces, to restore after (see locked)
    "lift_lock_timeout": "SELECT current_setting('lock_timeout'), set_config('lock_timeout', '0', true)",
    "lock": "SELECT pg_advisory_xact_lock(%s)",
    # saved vectors (table {vectors}, migration 3)
    "save_vector": """INSERT INTO {vectors} (session_key, embedder, dimension, text_hash, message_id, vector, created_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (session_key, embedder, dimension, text_hash, message_id)
        DO UPDATE SET vector = excluded.vector, created_at = excluded.created_at""",
    "load_vectors": """SELECT message_id, text_hash, embedder, dimension, vector FROM {vectors}
        WHERE session_key = %s AND embedder = %s AND (%s::integer IS NULL OR dimension = %s::integer)
        ORDER BY created_at""",
    # a count, not cursor.rowcount: the store writes in pipeline mode, where rowcount is not known yet
    "delete_vectors": """WITH gone AS (DELETE FROM {vectors}
        WHERE session_key = %s AND (%s::text IS NULL OR embedder = %s::text) RETURNING 1)
        SELECT count(*) FROM gone""",
    "purge_vectors": "DELETE FROM {vectors} WHERE session_key = %s",
    "drop_other_texts": """DELETE FROM {vectors} v USING unnest(%s::bytea[], %s::text[]) AS n (message_id, text_hash)
        WHERE v.session_key = %s AND v.message_id = n.message_id AND v.text_hash <> n.text_hash""",
    "prune_removed": """DELETE FROM {vectors} WHERE session_key = %s AND message_id IN
        (SELECT message_id FROM {ids} WHERE session_key = %s AND NOT present)""",
    # after a truncate: vectors of messages the kept log no longer holds; all, if it holds no revision
    "prune_set_aside": """DELETE FROM {vectors} WHERE session_key = %(key)s AND (
        NOT EXISTS (SELECT 1 FROM {revisions} WHERE session_key = %(key)s)
        OR (message_id <> ''::bytea AND message_id NOT IN (SELECT message_id FROM {ids} WHERE session_key = %(key)s AND present)))""",
}

_REVISION_TYPES = {"session_key": "bytea", "session_id": "text", "number": "integer", "parent": "integer",
                   "kind": "text", "instruction": "text", "model": "text", "created_at": "double precision",
                   "base": "integer", "target": "integer", "changes": "text"}
COLUMN_TYPES: dict[str, dict[str, str]] = {
    "revisions": {**_REVISION_TYPES, "digest": "text"},
    "migrations": {"version": "integer", "name": "text", "applied_at": "double precision"},
    "ids": {"session_key": "bytea", "message_id": "bytea", "present": "boolean", "digest": "text"},
    "set_aside": {**_REVISION_TYPES, "set_aside_at": "double precision"},  # LIKE revisions before it had a digest
    "vectors": {"session_key": "bytea", "embedder": "text", "dimension": "integer", "text_hash": "text",
                "message_id": "bytea", "vector": "bytea", "created_at": "double precision"},
}
"""The type of every column the migrations create, by table placeholder (:data:`TABLES`), as
``format_type`` names it: what :func:`column_types_steps` checks."""

LOSSLESS_TYPES: dict[str, frozenset[str]] = {
    "integer": frozenset({"bigint"}),
    "text": frozenset({"character varying"}),  # without a length: a bounded varchar refuses longer writes
}
"""Types a column of :data:`COLUMN_TYPES` may have been widened to by hand (``ALTER COLUMN ...
TYPE``) that hold and read back every value exactly as the store wrote it: accepted at setup."""


def _kept_type(made: str, found: str) -> bool:
    """Whether a column the migrations made ``made`` holds its values unchanged as ``found``."""
    return found == made or found in LOSSLESS_TYPES.get(made, frozenset())


LARGEST_NUMBER = 2**31 - 1
"""The largest revision number the ``integer`` column holds (:data:`.base.MAX_REVISION` is SQLite's)."""

VECTORS_TABLE = """CREATE TABLE {vectors} (
    session_key bytea            NOT NULL,
    embedder    text             NOT NULL,
    dimension   integer          NOT NULL CHECK (dimension >= 1),
    text_hash   text             NOT NULL,
    message_id  bytea            NOT NULL,
    vector      bytea            NOT NULL,
    created_at  double precision NOT NULL,
    PRIMARY KEY (session_key, embedder, dimension, text_hash, message_id)
)"""
"""Migration 3 of the PostgreSQL store (``{vectors}`` is the prefixed table name)."""

Key = tuple[bytes, str]
"""A session as the tables know it: ``(session_key, session_id)``, the key being the id's SHA-256."""
Statements = dict[str, Any]
"""The store's statements by template name, its table names composed in (see :func:`compose`)."""
FaultHook = Callable[[str], None]


def compose(table_prefix: str, schema: str | None = None) -> tuple[dict[str, sql.Identifier], Statements]:
    """The table names after ``table_prefix`` (as identifiers, by placeholder) and every
    statement with them composed in; with ``schema``, the names are qualified by it (setup
    and migrations, which must not create tables beside those the search path finds), else
    the search path finds them."""
    qualified = () if schema is None else (schema,)
    names = {name: sql.Identifier(*qualified, table_prefix + table) for name, table in TABLES.items()}
    return names, {key: sql.SQL(template).format(**names) for key, template in _TEMPLATES.items()}


def found_as(table_prefix: str, table: str) -> str:
    """The store's table ``table`` (a :data:`TABLES` key) as ``to_regclass`` finds it: quoted
    like the statements' identifiers, so the search path decides its schema as it does theirs."""
    return '"' + (table_prefix + TABLES[table]).replace('"', '""') + '"'


def session_key(session_id: Any) -> Key:
    """``(session_key, session_id)`` after checking the id can be stored.

    The key is what the tables index and what every operation on a session selects its rows
    by; the ``session_id`` column beside it only names the session (in listings), and a row
    whose ``session_id`` is not the one its key is of was moved or renamed by hand (see
    :func:`_owned` and :func:`named_keys`)."""
    if "\x00" in checked_session(session_id):  # lone surrogates refused there
        raise InvalidInputError("a PostgreSQL session id cannot contain NUL characters")
    return _key_of(session_id), session_id


def named_keys(pairs: Iterable[Sequence[Any]]) -> dict[bytes, list[str]]:
    """For each session key among the stored ``(session_key, session_id)`` ``pairs``, the ids
    that name it: the id it is the key of, when a row carries that id; else (every row of the
    key renamed by hand) the ids its rows carry, sorted, so that something names every stored
    row and a purge of each name erases it (:func:`purge_steps`)."""
    carried: dict[bytes, set[str]] = {}
    for stored_key, session_id in pairs:
        carried.setdefault(bytes(stored_key), set()).add(session_id)
    named: dict[bytes, list[str]] = {}
    for key, ids in carried.items():
        own = [i for i in ids if _key_of(i) == key]
        named[key] = own or sorted(ids)
    return named


def _key_of(session_id: str) -> bytes:
    """The key of a session id (valid Unicode: see :func:`session_key`)."""
    return hashlib.sha256(session_id.encode("utf-8")).digest()


def lock_key(table_prefix: str, name: str, key: bytes = b"") -> int:
    """The advisory lock of ``name`` (``"setup"``, or ``"session"`` with its key) for the
    tables of ``table_prefix``."""
    digest = hashlib.sha256(f"{table_prefix}\x00{name}\x00".encode() + key).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def postgres_unavailable(exc: BaseException, where: object) -> StoreUnavailableError | None:
    """The :class:`StoreUnavailableError` for a failure of the PostgreSQL server, of the
    connection to it, or of what the connection may do (a read-only connection, a role
    lacking privileges, rows written by something else); ``where`` names the store.
    None for any other error (a closed pool of the caller's own stays psycopg's
    ``PoolClosed``)."""
    if not isinstance(exc, psycopg.Error) or isinstance(exc, PoolClosed):
        return None
    where = where if isinstance(where, str) else repr(where)  # a store: its repr, made only now
    said = f"(PostgreSQL: {type(exc).__name__}: {str(exc).strip() or 'no message'})"
    text = _refusal(exc, where, said) if not isinstance(exc, psycopg.OperationalError) else _failure(exc, where, said)
    return None if text is None else StoreUnavailableError(text)


def _refusal(exc: psycopg.Error, where: str, said: str) -> str | None:
    """What to say when the server refused a statement of the store's (None: not a refusal
    of this kind, the error passes unchanged)."""
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return (f"the connection of {where} is read-only {said}: a hot standby (read replica), or "
                "default_transaction_read_only set for the server, database or role; nothing was written. "
                "Connect the store to the primary server, or turn default_transaction_read_only off for its role")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return (f"the PostgreSQL role of {where} lacks a privilege the store needs {said}; nothing was written. "
                "Grant it SELECT, INSERT, UPDATE and DELETE on the store's tables, and CREATE on the schema if it "
                "is to create or migrate them (or connect as their owner); a role without CREATE opens tables "
                "that are already up to date, and PostgresStore(..., setup=False) leaves creating and migrating "
                "them to another job")
    if isinstance(exc, pg_errors.InvalidSchemaName):  # 3F000: mostly "no schema has been selected to create in"
        return (f"{where} has no schema to keep its tables in {said}: no schema on the connection's search_path "
                "exists (one given as options=-c search_path=..., or set for the role or database, not created yet, "
                "or an empty search_path); nothing was written. Create the schema (CREATE SCHEMA name, and GRANT "
                "USAGE, CREATE ON SCHEMA name to the store's role) or put an existing one on the search_path")
    if isinstance(exc, pg_errors.InvalidCatalogName):  # 3D000
        return (f"the database {where} names does not exist {said}; nothing was written. Create it (CREATE "
                "DATABASE name) or fix the dbname in the connection string")
    if isinstance(exc, psycopg.IntegrityError):
        return (f"a row {where} wrote conflicts with the rows stored {said}: something other than "
                "context-gatekeeper writes these tables, or wrote them without the session's lock; the "
                "transaction was rolled back and nothing was written. Retry; if it keeps happening, find what "
                "else writes to them")
    return None


def _failure(exc: psycopg.OperationalError, where: str, said: str) -> str:
    """What to say about a failure of the server or of the connection to it."""
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, pg_errors.DiskFull):
        return (f"the disk of the PostgreSQL server behind {where} is full {said}; the transaction was rolled back "
                "and nothing was written. Free space on the server, then retry")
    if state.startswith("53"):
        return (f"the PostgreSQL server behind {where} is out of resources {said} (memory, connections or disk); "
                "nothing was written. Retry later, or raise the server's limits")
    if isinstance(exc, pg_errors.QueryCanceled):  # 57014: a statement_timeout or a cancel request, never lock_timeout
        return _cancelled(exc, where, said)
    if isinstance(exc, (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected, pg_errors.SerializationFailure)):
        return (f"{where} timed out or lost a race waiting for a lock {said}; the transaction was rolled back and "
                "nothing was written. Retry; if it keeps happening, look for long transactions holding locks "
                "(or give the store a longer lock_timeout)")
    if isinstance(exc, PoolTimeout):
        return (f"{where} got no connection in time {said}: the server is unreachable, or every pooled connection "
                "is busy. Check that the server runs and accepts connections, or give the store a larger max_size")
    return (f"{where} cannot connect to the PostgreSQL server (down, unreachable, or refusing the credentials), "
            f"or the server ended the connection {said}. A write in flight was rolled back, unless the connection "
            "broke during COMMIT: read store.head(session) before retrying. Check that the server runs and that "
            "the connection string (host, port, user, password) is right, then retry")


def _cancelled(exc: psycopg.OperationalError, where: str, said: str) -> str:
    """What to say about a statement the server cancelled: after the ``statement_timeout`` set
    for the server, database, role or connection (the store sets none: its ``lock_timeout``
    does not help, and a read that takes no lock is cancelled as well), or on request."""
    if "statement timeout" in str(exc):  # the server's message (SQLSTATE 57014 also covers a cancel request)
        return (f"the PostgreSQL server cancelled a statement of {where} after the statement_timeout set for the "
                f"server, database, role or connection {said} (a statement waiting for another writer's lock "
                "counts too); the transaction was rolled back and nothing was written. Raise statement_timeout for "
                "the store's role (ALTER ROLE name SET statement_timeout = '30s', or 0 for none) or in its "
                "connection string (options=-c statement_timeout=30s), then retry")
    return (f"a statement of {where} was cancelled on the server {said}: a cancel request (pg_cancel_backend, or "
            "a client's cancel), or a timeout the server set; the transaction was rolled back and nothing was "
            "written. Retry; if it keeps happening, find what cancels the store's statements")


@contextmanager
def postgres_errors(where: object) -> Iterator[None]:
    """Raise the server and connection failures of the block, and the server's refusals
    that are about the connection rather than the call (read-only, privileges, rows
    written by others), as :class:`StoreUnavailableError` (psycopg's error as
    ``__cause__``); every other exception passes unchanged."""
    try:
        yield
    except psycopg.Error as exc:
        error = postgres_unavailable(exc, where)
        if error is None:
            raise
        raise error from exc


def checked_text_fields(revision: object) -> None:
    """:class:`InvalidInputError` unless the revision's instruction and model name fit a
    PostgreSQL ``text`` column (which cannot hold NUL); checked before anything is sent
    (anything but a revision is left to :func:`~.base.prepare_commit` to refuse)."""
    fields = (("instruction", getattr(revision, "instruction", None)), ("model name", getattr(revision, "model", None)))
    for name, value in fields:
        if isinstance(value, str) and "\x00" in value:
            raise InvalidInputError(
                f"the revision's {name} contains a NUL character (\\x00), which PostgreSQL cannot store; "
                "nothing was written. Remove the NUL characters and try again (SQLiteStore stores them)"
            )


class Step(NamedTuple):
    """One statement for a driver to run: ``fetch`` is ``"one"`` (send back the first
    row), ``"all"`` (all rows), ``"none"``, ``"many"`` (``executemany`` over ``params``)
    or ``"sync"`` (flush the pipeline, so what was sent reaches the server; no statement);
    or ``"hook"``: call ``query(params)``, the store's fault hook (the async driver calls
    it in a worker thread, so a hook may block as it may in the sync methods)."""

    fetch: str
    query: Any = None
    params: Any = None


Steps = Generator[Step, Any, T]
"""An operation: yields steps, receives their results, returns its own."""
SYNC = Step("sync")


class Stepper(Generic[T]):
    """Drives an operation for a driver: :meth:`next` sends the last step's result and
    gives the next step, or None once the operation has returned (then ``value``)."""

    def __init__(self, steps: Steps[T]) -> None:
        self._steps = steps
        self.value: T

    def next(self, reply: Any) -> Step | None:
        try:
            return self._steps.send(reply)
        except StopIteration as done:
            self.value = done.value
            return None


def run_steps(conn: Any, pipeline: Any, steps: Steps[T]) -> T:
    """Run ``steps`` on a sync connection (``pipeline``: its pipeline, or None).

    Every statement runs on a server-binding cursor of its own that returns tuples in
    binary format, whatever the connection's settings: a caller's pool may make dict rows
    (as LangGraph's ``PostgresSaver`` needs) or client-side-binding cursors (behind
    PgBouncer), which cannot return binary results, and ``double precision`` read as text depends
    on the session's ``extra_float_digits``, whereas the hash chain needs every time
    back exactly as it was written."""

    def execute(step: Step) -> Any:
        if step.fetch == "many":
            with psycopg.Cursor(conn, row_factory=tuple_row) as cursor:
                cursor.executemany(step.query, step.params)
            return None
        if step.fetch == "sync":
            return pipeline.sync() if pipeline is not None else None
        if step.fetch == "hook":
            return step.query(step.params)
        cursor = psycopg.Cursor(conn, row_factory=tuple_row).execute(step.query, step.params, binary=True)
        return cursor.fetchone() if step.fetch == "one" else cursor.fetchall() if step.fetch == "all" else None

    stepper = Stepper(steps)
    step = stepper.next(None)
    while step is not None:
        step = stepper.next(execute(step))
    return stepper.value


async def arun_steps(conn: Any, pipeline: Any, steps: Steps[T]) -> T:
    """Run ``steps`` on an async connection (``pipeline``: its pipeline, or None); the
    twin of :func:`run_steps`."""

    async def execute(step: Step) -> Any:
        if step.fetch == "many":
            async with psycopg.AsyncCursor(conn, row_factory=tuple_row) as cursor:
                await cursor.executemany(step.query, step.params)
            return None
        if step.fetch == "sync":
            return None if pipeline is None else await pipeline.sync()
        if step.fetch == "hook":  # a test's fault hook may block: never on the loop
            return await asyncio.to_thread(step.query, step.params)
        cursor = await psycopg.AsyncCursor(conn, row_factory=tuple_row).execute(step.query, step.params, binary=True)
        if step.fetch == "one":
            return await cursor.fetchone()
        return await cursor.fetchall() if step.fetch == "all" else None

    stepper = Stepper(steps)
    step = stepper.next(None)
    while step is not None:
        step = stepper.next(await execute(step))
    return stepper.value


class _Wanted(Exception):
    """:func:`prepare_commit` asked for these ids' index rows (see :func:`prepared_steps`)."""

    def __init__(self, ids: Iterable[str]) -> None:
        super().__init__("index rows wanted")
        self.ids = list(ids)


class _WantedLog(Exception):
    """:func:`prepare_commit` refused a revision and asked for the verified log, to tell a
    damaged id index from a stale change (see :func:`prepared_steps`)."""


# -- plumbing -------------------------------------------------------------------------------
def locked(q: Statements, lock: int, steps: Steps[T], lock_timeout: float | None = None) -> Steps[T]:
    """``steps`` after taking the advisory lock ``lock``, waiting at most ``lock_timeout``
    seconds for it (0: as long as it takes, whatever the ``lock_timeout`` the server, database,
    role or connection sets; None: as long as that says).  The setting holds for this
    transaction alone (``set_config(..., true)``), its statements after the lock included;
    except 0, which covers the advisory lock alone: setup waits out another worker's migration,
    but its own DDL keeps the limit the server, role or connection sets (a migration queued behind
    a reader idle in its transaction would otherwise wait forever, and every other worker's reads
    of the table would queue behind its ACCESS EXCLUSIVE lock).

    The transaction is made READ COMMITTED first, whatever the server's, database's or
    role's default isolation: under REPEATABLE READ or SERIALIZABLE the snapshot would be
    taken by the lock's own ``SELECT``, before the lock is granted, and a writer that
    waited would then read the head as it was before the writer it waited for."""
    yield Step("none", q["read_committed"])
    if lock_timeout == 0:
        before = (yield Step("one", q["lift_lock_timeout"]))[0]
        yield Step("none", q["lock"], (lock,))
        yield Step("none", q["lock_timeout"], (before,))
        return (yield from steps)
    if lock_timeout is not None:
        yield Step("none", q["lock_timeout"], (f"{max(1, round(lock_timeout * 1000))}ms",))
    yield Step("none", q["lock"], (lock,))
    return (yield from steps)


def hook_steps(hook: Callable[[], FaultHook | None], *points: str) -> Steps[None]:
    """Call the fault hook at ``points`` (no step at all when there is none); ``hook()`` is
    read at each point, inside the transaction, so a hook set or cleared meanwhile (while
    this commit waited for the session's lock) counts from the next point on."""
    for point in points:
        current = hook()
        if current is not None:
            yield Step("hook", current, point)


# -- reads ------------------------------------------------------------------------------------
def head_steps(q: Statements, key: Key) -> Steps[int]:
    """The session's latest revision number (0 when it has none)."""
    row = yield Step("one", q["head"], (key[0],))
    return int(row[0])


def tip_steps(q: Statements, key: Key) -> Steps[tuple[int, float]]:
    """``(head, time of the head revision)``; ``(0, 0.0)`` for an empty session."""
    row = yield Step("one", q["tip"], (key[0],))
    return (row[0], row[1]) if row else (0, 0.0)


def load_steps(q: Statements, key: Key, after: int) -> Steps[list[Revision]]:
    """The revisions above ``after``, their numbering, fields and hash chain checked
    (:func:`.chain.verified`: :class:`CorruptLogError` naming the first bad one).  Tables
    that have not had migration 5 (``setup=False`` while another job upgrades) may hold
    rows whose digests are the first chain's: when a row fails, the rows are read again with
    the chain the tables use now (the migration may commit at any moment, also between two of
    these reads), and the error stands only when a read with that chain fails."""
    legacy, reads = False, 0
    while True:
        try:
            return (yield from _verified_steps(q, key, after, legacy))
        except CorruptLogError:
            reads += 1
            unmigrated = 5 not in {row[0] for row in (yield Step("all", q["applied"]))}
            chain = next_read(reads, legacy, unmigrated)
            if chain is None:
                raise  # read with the chain the tables use, and a row still fails: the damage is real
            legacy = chain


def _verified_steps(q: Statements, key: Key, after: int, legacy: bool) -> Steps[list[Revision]]:
    """One read of :func:`load_steps`, checked with the chain (``legacy``: the first chain's)
    and each row's session id (:func:`_owned`).  A catch-up (``after`` > 0) whose first row
    fails checks the row it chains from (:func:`.chain.anchor_damage`: one more query, only then)."""
    after = max(after, 0)
    rows = yield Step("all", q["load_chained"], (key[0], after))
    if not after:
        return verified(key[1], _owned(key[1], rows, 0), 0, genesis(key[1]), legacy=legacy)
    if not rows:
        return []
    if rows[0][0] != after:  # the row the catch-up starts from is gone
        raise CorruptLogError(
            key[1], after, f"revision {after} is missing: rows were deleted or renumbered outside context-gatekeeper"
        )
    anchor = next(_owned(key[1], rows[:1], after - 1))
    try:
        return verified(key[1], _owned(key[1], rows[1:], after), after, anchor[9], legacy=legacy)
    except CorruptLogError as error:
        if error.revision != after + 1:
            raise
        if after == 1:
            previous: str | None = genesis(key[1])
        else:
            row = yield Step("one", q["digest"], (key[0], after - 1))
            previous = row[0] if row else None
        damage = anchor_damage(key[1], anchor, previous, legacy=legacy)
        if damage is None:
            raise
        raise damage from None


def _owned(session_id: str, rows: Iterable[Sequence[Any]], after: int) -> Iterator[Sequence[Any]]:
    """``rows`` of the session's key (read with their ``session_id`` column last), numbered from
    ``after + 1``, without that column; :class:`CorruptLogError` at the first whose
    ``session_id`` is not the session's (a row numbered out of turn is passed on for
    :func:`.chain.verified` to name the gap first).  The hash chain does not cover the column
    (a row's key and chain are its session's), so this check is what finds a row moved to
    another session, or a session renamed, by hand."""
    for expected, row in enumerate(rows, after + 1):
        if row[10] != session_id and row[0] == expected:
            raise CorruptLogError(
                session_id, expected,
                f"the row's session_id is {row[10]!r}, though it is stored under this session's key: it was moved to "
                "another session, or the session renamed, outside context-gatekeeper (a session's rows are those of "
                "its key, the SHA-256 of its id)",
            )
        yield row[:10]


def sessions_steps(q: Statements) -> Steps[list[str]]:
    """Ids of the sessions that have at least one revision, sorted by code point (the keys'
    names, :func:`named_keys`, as the server finds them: :data:`_NAMES`)."""
    return _names((yield Step("all", q["sessions"])))


def stored_sessions_steps(q: Statements) -> Steps[list[str]]:
    """Ids of the sessions with revisions or set-aside revisions, sorted by code point (the keys'
    names, as :func:`sessions_steps` finds them: purging each erases every row, see :func:`purge_steps`)."""
    return _names((yield Step("all", q["stored_sessions"])))


def _names(rows: Sequence[Sequence[Any]]) -> list[str]:
    """The ids a listing (:data:`_NAMES`) finds, sorted by code point: those it names keys by,
    and those :func:`named_keys` names the keys of the pairs it sends by."""
    single = [session_id for stored_key, session_id in rows if stored_key is None]
    mixed = named_keys(row for row in rows if row[0] is not None)
    return sorted({*single, *(name for names in mixed.values() for name in names)})


def applied_steps(q: Statements) -> Steps[list[tuple[int, str]]]:
    """``(version, name)`` of every migration the tables have had, in order."""
    rows = yield Step("all", q["applied"])
    return [(row[0], row[1]) for row in rows]


def recorded_steps(q: Statements, table_prefix: str) -> Steps[set[int] | None]:
    """The versions of the migrations the tables have had; None when they have no migrations
    table (never set up, or the wrong ``table_prefix``)."""
    exists = yield Step("one", q["has_table"], (found_as(table_prefix, "migrations"),))
    if not exists[0]:
        return None
    return {row[0] for row in (yield Step("all", q["applied"]))}


def home_steps(q: Statements, table_prefix: str) -> Steps[str | None]:
    """The schema the store's tables are in: that of its migrations table as the search path
    finds it (a role with a schema of its own, first on PostgreSQL's default ``"$user",
    public``, finds tables another role made in ``public``), else the one an unqualified
    ``CREATE TABLE`` would create them in (``current_schema()``); None when no schema on the
    search path exists (creating anything then fails with ``InvalidSchemaName``).

    Setup runs its statements in this schema: unqualified, ``CREATE TABLE IF NOT EXISTS``
    would create a second, empty set in the first schema of the search path while the
    tables the store reads stay in another."""
    row = yield Step("one", q["home"], (found_as(table_prefix, "migrations"),))
    return None if row[0] is None else str(row[0])


def column_types_steps(q: Statements, table_prefix: str, where: str) -> Steps[set[tuple[str, str]]]:
    """:class:`SchemaVersionError` (``where`` names the database) when a column of the store's
    tables has another type than the one its migration gave it (:data:`COLUMN_TYPES`): changed
    by hand (``ALTER TABLE ... ALTER COLUMN ... TYPE``).  The store reads each value back
    exactly as it wrote it, and the hash chain covers the revisions' text, so with another type
    (``changes`` as ``jsonb``, which reads back as an object; ``created_at`` as ``numeric``)
    every session would look tampered with at its first revision, and revisions written
    meanwhile could not be read back.  A lossless widening (:data:`LOSSLESS_TYPES`: ``integer``
    to ``bigint``, ``text`` to ``varchar``) is accepted.  Tables and columns that do not exist yet are left to
    the migrations; a column added by hand is left alone.  Returns the ``(table, column)`` pairs
    found, each table by its placeholder (for :func:`missing_objects`)."""
    names = list(COLUMN_TYPES)
    rows = yield Step("all", q["column_types"], (names, [found_as(table_prefix, name) for name in names]))
    changed = sorted((table, column, found) for table, column, found in rows
                     if not _kept_type(COLUMN_TYPES[table].get(column, found), found))
    if not changed:
        return {(table, column) for table, column, _found in rows}
    shown = ", ".join(f"{table_prefix + TABLES[table]}.{column} is {found} (context-gatekeeper made it "
                      f"{COLUMN_TYPES[table][column]})" for table, column, found in changed)
    repair = "; ".join(
        f"ALTER TABLE {found_as(table_prefix, table)} ALTER COLUMN {column} TYPE {COLUMN_TYPES[table][column]} "
        f"USING {column}::{COLUMN_TYPES[table][column]}" for table, column, _found in changed)
    raise SchemaVersionError(
        f"in {where}, column {shown}: its type was changed outside context-gatekeeper (ALTER TABLE ... ALTER COLUMN "
        "... TYPE). The store reads every value back exactly as it wrote it (the hash chain covers the revisions' "
        "text), so with this type every session would look tampered with and new revisions could not be read back; "
        f"nothing was written. Change it back ({repair}) or restore the table from a backup taken before the change. "
        "Values the change rewrote stay rewritten (jsonb reorders keys and drops spacing, numeric rounds): sessions "
        "holding them then fail to open with CorruptLogError naming the truncate that recovers"
    )


def missing_objects(
    found: set[tuple[str, str]], table_prefix: str, applied: Collection[int], migrations: Sequence[Migration]
) -> dict[int, list[str]]:
    """For each migration in ``applied`` (the versions recorded), the tables and columns it
    creates that are not among ``found`` (:func:`column_types_steps`'s pairs): dropped by hand
    (``table`` or ``table.column``, the table by its name; see :func:`.schema.missing_error`)."""
    tables = {table for table, _column in found}
    missing: dict[int, list[str]] = {}
    for migration in migrations:
        if migration.version in applied:
            missing[migration.version] = names = []
            for table, column in created_objects(migration):
                placeholder = table.strip("{}")
                name = table_prefix + TABLES[placeholder]
                if column is None and placeholder not in tables:
                    names.append(name)
                elif column is not None and (placeholder, column) not in found:
                    names.append(f"{name}.{column}")
    return missing


def unrecorded_steps(
    q: Statements, table_prefix: str, applied: set[int], migrations: Sequence[Migration]
) -> Steps[dict[int, list[str]]]:
    """For each migration missing from ``applied`` (the versions recorded), the tables and
    columns it creates that exist already (``table`` or ``table.column``; see
    :func:`.schema.unrecorded_error`); no query when every migration is recorded."""
    found: dict[int, list[str]] = {}
    for migration in migrations:
        if migration.version in applied:
            continue
        found[migration.version] = names = []
        for table, column in created_objects(migration):
            name, quoted = table_prefix + TABLES[table.strip("{}")], found_as(table_prefix, table.strip("{}"))
            if column is None:
                exists = yield Step("one", q["has_table"], (quoted,))
            else:
                exists = yield Step("one", q["has_column"], (quoted, column))
            if exists[0]:
                names.append(name if column is None else f"{name}.{column}")
    return found


def lookup_steps(q: Statements, key: Key, ids: Iterable[str]) -> Steps[dict[str, IdEntry]]:
    """The id-index rows of ``ids`` (absent ids were never used)."""
    keys = {id_key(i): i for i in ids}
    rows = yield Step("all", q["lookup"], (key[0], list(keys)))
    return {keys[bytes(k)]: IdEntry(bool(present), digest) for k, present, digest in rows}


# -- writes (run under the session's lock) ----------------------------------------------------
def index_steps(q: Statements, key: Key) -> Steps[None]:
    """Rebuild a session's id index from its readable revisions."""
    yield Step("none", q["purge_ids"], (key[0],))
    rows = yield Step("all", q["load"], (key[0], 0))
    yield Step("many", q["upsert_id"], index_rows(key[0], backfill_index(key[1], rows)))


def chain_backfill_steps(q: Statements) -> Steps[None]:
    """Migration 4: give the valid prefix of every stored session its hash chain.

    No session lock is needed: the migration's ``ALTER TABLE`` holds the revisions table
    exclusively (reads included) until the migration commits, so no writer reads a digest
    in between."""
    return _digest_steps(q, "all_sessions", "load", chained_prefix)


def unambiguous_chain_steps(q: Statements, table_prefix: str) -> Steps[None]:
    """Migration 5: the digests of rows whose text fields the first chain wrote ambiguously,
    recomputed after checking the first chain up to them (:func:`.chain.rechained`).

    Each session is read and rewritten under its writers' advisory lock, held until the
    migration commits: a writer of that session that does not migrate (a store opened with
    ``setup=False``, or a worker of the previous release during a rolling upgrade) waits, then
    chains its revision from the rewritten digest, not from the one the migration replaces.
    The sessions listed are rare (an instruction or model name that is the text ``None``, holds
    U+001F or starts with U+001E), so the locks held at once stay few.

    What this does not cover: a worker of a release before this migration, still running after
    it commits, digests its own new revisions the first chain's way.  For a revision whose
    instruction or model name is one of those texts that digest differs from the one readers
    compute, so every read of its session raises :class:`CorruptLogError` from it on (no release
    before this migration was published; the stores guide says to stop such workers first)."""
    return _digest_steps(q, "ambiguous_sessions", "load_chained", rechained,
                         lambda key: lock_key(table_prefix, "session", key))


def _digest_steps(
    q: Statements, sessions: str, load: str, digests: Callable[[str, Any], list[tuple[int, str]]],
    lock: Callable[[bytes], int] | None = None,
) -> Steps[None]:
    """For each session ``q[sessions]`` lists, its rows (``q[load]``) and the ``(number, digest)``
    pairs ``digests`` gives for them, written; ``lock``: the advisory lock taken (until the
    transaction ends) before each session's rows are read, by its key (each key once, under
    the id it is the key of, :func:`named_keys`)."""
    for stored_key, names in named_keys((yield Step("all", q[sessions]))).items():
        if lock is not None:
            yield Step("none", q["lock"], (lock(stored_key),))
        rows = yield Step("all", q[load], (stored_key, 0))
        written = digests(names[0], rows)
        if written:
            yield Step("many", q["set_digest"], [(digest, stored_key, number) for number, digest in written])


def backfill_steps(q: Statements) -> Steps[None]:
    """Migration 2: index every stored session (sessions that no longer replay included)."""
    for stored_key, names in named_keys((yield Step("all", q["all_sessions"]))).items():
        yield from index_steps(q, (stored_key, names[0]))


def prepared_steps(
    q: Statements, key: Key, revision: Revision, head: int, expected_head: int | None,
    later: Sequence[Revision], renew_taken_ids: bool,
) -> Steps[tuple[Revision, dict[str, IdEntry]]]:
    """:func:`prepare_commit`, its id-index reads done as steps.

    ``prepare_commit`` reads the index through a callback, inside which a generator
    cannot pause: a pass stops at the first lookup that wants ids not read yet, a step
    reads their rows, and the next pass (a pure function again) runs with every row
    read so far; so any number of lookups each get their own ids' rows, each id is
    read once, and a lookup of no new ids costs no query.
    """
    found: dict[str, IdEntry] = {}
    read: set[str] = set()
    loaded: list[Revision] | None = None  # the verified log, read only when a refusal asks for it

    def lookup(ids: Iterable[str]) -> dict[str, IdEntry]:
        wanted = list(ids)
        missing = [i for i in wanted if i not in read]
        if missing:
            raise _Wanted(missing)
        return {i: found[i] for i in wanted if i in found}

    def log() -> list[Revision]:
        if loaded is None:
            raise _WantedLog
        return loaded

    while True:
        try:
            return prepare_commit(key[1], revision, head, expected_head, later, lookup, renew_taken_ids, log)
        except _Wanted as wanted:
            found.update((yield from lookup_steps(q, key, wanted.ids)))
            read.update(wanted.ids)
        except _WantedLog:
            loaded = yield from load_steps(q, key, 0)


def commit_steps(
    q: Statements, key: Key, revision: Revision, expected_head: int | None, renew_taken_ids: bool,
    hook: Callable[[], FaultHook | None],
) -> Steps[Revision]:
    """Store ``revision`` as the next one (see :meth:`~.base.Store.commit`); ``hook()``:
    the store's fault hook as it is now (or ``None``), called at "begin", "written" and
    "before_commit"."""
    tip = yield Step("one", q["tip_digest"], (key[0],))  # waits for the lock
    head, previous = (tip[0], tip[1] or "") if tip else (0, genesis(key[1]))
    if head >= LARGEST_NUMBER:  # renumbered by hand: no number can follow it (the insert would overflow)
        yield from load_steps(q, key, 0)  # raises, naming the first revision that fails
        raise CorruptLogError(key[1], head, unfollowable(head))
    yield from hook_steps(hook, "begin")
    valid = isinstance(expected_head, int) and not isinstance(expected_head, bool)
    stale = valid and 0 <= expected_head < head  # type: ignore[operator]
    later = (yield from load_steps(q, key, expected_head)) if stale else []  # type: ignore[arg-type]
    stored, rows = yield from prepared_steps(q, key, revision, head, expected_head, later, renew_taken_ids)
    if stored.number == head:
        return stored  # a no-op: nothing to write
    row = _row(key, stored)
    yield Step("none", q["insert"], (*row, row_digest(previous, row[2:])))
    yield Step("many", q["upsert_id"], index_rows(key[0], rows))
    if hook() is not None:
        yield SYNC  # the row reaches the server before the hook runs
    yield from hook_steps(hook, "written", "before_commit")
    return stored


def truncate_steps(q: Statements, key: Key, keep: int) -> Steps[int]:
    """Set aside the revisions above ``keep``, rebuild the id index and drop the vectors of
    messages no longer held; how many rows went (on a log with gaps, fewer than ``head - keep``)."""
    yield Step("none", q["set_aside"], (time.time(), key[0], keep))
    gone = yield Step("all", q["drop_after"], (key[0], keep))
    forget_decoded(digest for (digest,) in gone)
    yield from index_steps(q, key)
    yield Step("none", q["prune_set_aside"], {"key": key[0]})
    return len(gone)


def purge_steps(q: Statements, key: Key) -> Steps[None]:
    """Erase a session: the revisions, id index, set-aside revisions and vectors of its key
    (and this process's decoded copies of its revisions, :func:`.chain.forget_decoded`).

    When the key holds no row, the id may be one that only rows of other keys carry: a session
    renamed whole by hand, whose key no row names by the id it is the key of, is listed by
    :meth:`PostgresStore.stored_sessions` under the ids its rows carry (:func:`named_keys`).  Then
    the rows carrying the id are erased, and the id index and vectors of a key that this leaves
    without revisions: so purging each session ``stored_sessions()`` lists erases everything.
    The session id column has no index (and the schema none to tell cheaply whether any row
    carries an id other than its key's), so such a purge reads the revisions and set-aside
    tables through, once each in one statement: some 15-25 ms at 100k revision rows, growing
    with the table (a purge of an id that was never stored pays it; a retention job purging
    the sessions it finds never does, their keys holding rows).  A session renamed by hand onto
    the id of a stored session is listed under that id, and erased by a second purge of it (the
    first erases the session of the id's key)."""
    gone = yield Step("all", q["purge"], (key[0],))
    forget_decoded(digest for (digest,) in gone)
    yield Step("none", q["purge_ids"], (key[0],))
    aside = yield Step("one", q["purge_set_aside"], (key[0],))
    yield Step("none", q["purge_vectors"], (key[0],))
    if gone or aside[0]:
        return
    claimed = yield Step("all", q["purge_claimed"], {"id": key[1], "key": key[0]})
    forget_decoded(digest for (digest,) in claimed)


# -- saved vectors (table {vectors}) ---------------------------------------------------------
def save_vectors_steps(q: Statements, store: object, key: Key, values: list[tuple[Any, ...]]) -> Steps[int]:
    """Store ``values`` (table rows) if the session holds revisions; how many were stored
    (``store`` names the store in the debug log of a refused save)."""
    if not (yield from head_steps(q, key)):
        return refused_save(store, key[1], len(values))
    texts = {v[4]: v[3] for v in values if v[4]}  # a message's new text: its other texts go
    if texts:
        yield Step("none", q["drop_other_texts"], (list(texts), list(texts.values()), key[0]))
    yield Step("many", q["save_vector"], values)
    yield Step("none", q["prune_removed"], (key[0], key[0]))
    return len(values)


def load_vectors_steps(
    q: Statements, store: object, session_id: str, embedder: str, dimension: int | None
) -> Steps[list[VectorRow]]:
    """The session's vectors by ``embedder`` (of ``dimension`` floats, if given), oldest first
    (the arguments are checked once the driver runs it, as before it reads; ``store`` names the
    store in the error about a damaged vector, :func:`.vectors.stored_vectors`)."""
    key, embedder = session_key(session_id), checked_embedder(embedder)
    dimension = checked_dimension(dimension)
    rows = yield Step("all", q["load_vectors"], (key[0], embedder, dimension, dimension))
    return stored_vectors(store, session_id, rows)


def delete_vectors_steps(q: Statements, key: Key, embedder: str | None) -> Steps[int]:
    """Erase the session's vectors (of one embedder, or all); how many."""
    embedder = None if embedder is None else checked_embedder(embedder)
    row = yield Step("one", q["delete_vectors"], (key[0], embedder, embedder))
    return int(row[0])


def _row(key: Key, r: Revision) -> Sequence[Any]:
    return (*key, r.number, r.parent, r.kind, r.instruction, r.model, r.time, r.base, r.target, changes_text(r))
