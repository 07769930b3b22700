"""What the SQL stores share: migrations, row encoding, and session-id checks.

Both :mod:`.sqlite` and :mod:`.postgres` keep a session's revisions as rows holding
the revision's fields and its changes as JSON text; this module turns revisions into
that text and rows back into revisions, and holds the add-only migration record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import CorruptLogError, InvalidInputError, InvalidTypeError, SchemaVersionError
from ..records.operations import change_from_dict, change_to_dict
from ..records.revisions import Revision, revision_of
from .integrity import IdEntry, index_of_log

__all__ = [
    "Migration",
    "checked_session",
    "refuse_newer",
    "schema_behind",
    "created_objects",
    "unrecorded_error",
    "missing_error",
    "changes_text",
    "revision_from_row",
    "revision_from_fields",
    "id_key",
    "readable_prefix",
    "index_rows",
    "backfill_index",
]


class Migration(NamedTuple):
    """One schema change: applied once, in ``version`` order, never edited after release.

    ``backfill``, if any, runs after the statements in the same transaction: it fills new
    tables from existing rows (SQLite: a function of the connection; PostgreSQL: of the table
    prefix and the store's statements, giving the SQL steps to run)."""

    version: int
    name: str
    statements: tuple[str, ...]
    backfill: Callable[..., None] | None = None


def checked_session(session_id: Any) -> str:
    """``session_id`` if it is a str that UTF-8 can encode, else :class:`InvalidTypeError` /
    :class:`InvalidInputError` (a lone surrogate cannot be stored as text)."""
    if not isinstance(session_id, str):
        raise InvalidTypeError(f"session_id must be a str, got {type(session_id).__name__}; pass the session's id")
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("a session id must be valid Unicode (no lone surrogates)") from None
    return session_id


def id_key(message_id: str) -> bytes:
    """A message id as the bytes the id index stores (lone surrogates and NUL included)."""
    return message_id.encode("utf-8", "surrogatepass")


def index_rows(session: Any, entries: dict[str, IdEntry]) -> list[tuple[Any, bytes, bool, str]]:
    """``(session, id_key, present, digest)`` rows for the id index."""
    return [(session, id_key(k), e.present, e.digest) for k, e in entries.items()]


def readable_prefix(session_id: str, rows: Iterable[Sequence[Any]]) -> list[Revision]:
    """The revisions of ``rows`` up to the first that cannot be read (migrations index
    those; the session then fails to load with :class:`CorruptLogError` until truncated)."""
    out = []
    for row in rows:
        try:
            out.append(revision_from_row(row, session_id))
        except CorruptLogError:
            break
    return out


def backfill_index(session_id: str, rows: Iterable[Sequence[Any]]) -> dict[str, IdEntry]:
    """The id index of a stored session (see :func:`.integrity.index_of_log`)."""
    return index_of_log(readable_prefix(session_id, rows))


def refuse_newer(applied: Iterable[int], migrations: Sequence[Migration], what: str = "database") -> None:
    """Raise :class:`SchemaVersionError` if ``applied`` holds migrations this code does not know."""
    unknown = sorted(set(applied) - {m.version for m in migrations})
    if unknown:
        raise SchemaVersionError(
            f"this {what} has schema migration(s) {unknown}, which this version of context-gatekeeper "
            "does not know; upgrade context-gatekeeper to open it"
        )


def schema_behind(
    applied: Collection[int] | None, migrations: Sequence[Migration], where: str, migrate: str,
    check: str = "the path",
) -> SchemaVersionError | None:
    """The error for a call that failed on a missing table or column because the schema is
    not up to date: ``applied`` holds the migrations recorded (None: there is no record at
    all), ``where`` names the database, ``migrate`` says how to bring it up to date ("call
    store.setup() ..."), ``check`` what to check when it holds no tables at all.  None when
    every migration is applied (the failure is something else: leave it as it is).

    >>> str(schema_behind({1, 2, 3}, [Migration(n, "m", ()) for n in (1, 2, 3, 4)], "db.sqlite", "call setup()"))
    'db.sqlite is at schema version 3 (migration(s) [4] not applied yet), which this call needs; nothing was written. Call setup() to bring the schema up to date, then retry'
    """
    if not applied:
        return SchemaVersionError(
            f"{where} holds no context-gatekeeper tables: it was never set up, or it is not this library's "
            f"database; nothing was written. {migrate[:1].upper()}{migrate[1:]} to create them, or check {check}"
        )
    missing = sorted({m.version for m in migrations} - set(applied))
    if not missing:
        return None
    return SchemaVersionError(
        f"{where} is at schema version {max(applied)} (migration(s) {missing} not applied yet), which this call "
        f"needs; nothing was written. {migrate[:1].upper()}{migrate[1:]} to bring the schema up to date, then retry"
    )


_CREATES_TABLE = re.compile(r"\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\{?\w+\}?)", re.IGNORECASE)
_ADDS_COLUMN = re.compile(r"\s*ALTER\s+TABLE\s+(\{?\w+\}?)\s+ADD\s+COLUMN\s+(\w+)", re.IGNORECASE)


def created_objects(migration: Migration) -> tuple[tuple[str, str | None], ...]:
    """``(table, column)`` for each column a migration's statements add, and ``(table, None)``
    for each table they create, the table named as in the statements (a PostgreSQL
    placeholder such as ``{revisions}`` included): what exists once it has been applied.

    >>> created_objects(Migration(4, "m", ("CREATE TABLE t (a INTEGER)", "ALTER TABLE {r} ADD COLUMN d TEXT")))
    (('t', None), ('{r}', 'd'))
    """
    found: list[tuple[str, str | None]] = []
    for statement in migration.statements:
        table, column = _CREATES_TABLE.match(statement), _ADDS_COLUMN.match(statement)
        if table is not None:
            found.append((table.group(1), None))
        elif column is not None:
            found.append((column.group(1), column.group(2)))
    return tuple(found)


def unrecorded_error(
    where: str, found: Mapping[int, Sequence[str]], migrations: Sequence[Migration], record: str,
    create: str | None = None,
) -> SchemaVersionError | None:
    """The error for a database holding what migrations create without their record:
    ``found`` maps the version of each migration not recorded to the tables and columns of
    it that exist (as ``table`` or ``table.column``); ``where`` names the database, ``record``
    the migrations table, ``create`` the statement that creates it when it is gone.  None
    when nothing of an unrecorded migration exists (applying them is safe).  Applying one
    again would fail on its first statement: the record was deleted (or the tables made)
    outside context-gatekeeper, and restoring it is the repair.

    >>> print(unrecorded_error("db.sqlite", {2: ["ids"]}, [Migration(2, "id index", ())], "migrations"))
    db.sqlite holds the tables or columns of schema migration(s) [2] (ids) but no record of them in migrations: ...
    """
    present = {version: names for version, names in found.items() if names}
    if not present:
        return None
    names = {m.version: m.name for m in migrations}
    shown = "; ".join(", ".join(present[v]) for v in sorted(present))
    values = ", ".join(f"({v}, '{names.get(v, '?')}', 0)" for v in sorted(present))
    return SchemaVersionError(
        f"{where} holds the tables or columns of schema migration(s) {sorted(present)} ({shown}) but no record "
        f"of them in {record}: the record was deleted (or the tables were made) outside context-gatekeeper, and "
        "applying them again would fail; nothing was written. If these are context-gatekeeper's tables, restore "
        f"the record ({create + '; ' if create else ''}INSERT INTO {record} (version, name, applied_at) VALUES "
        f"{values}) or the database from a backup, then open it again"
    )


def missing_error(
    where: str, missing: Mapping[int, Sequence[str]], migrations: Sequence[Migration], record: str
) -> SchemaVersionError | None:
    """The error for a database whose migrations table records migrations whose tables or
    columns are gone (the mirror of :func:`unrecorded_error`): ``missing`` maps the version of
    each recorded migration to what it creates that does not exist (as ``table`` or
    ``table.column``); ``where`` names the database, ``record`` the migrations table.  None when
    nothing is missing.  Every call on the missing table would fail on it: it was dropped
    outside context-gatekeeper.  Restoring a backup is the repair; when everything such a
    migration creates is gone, deleting its record has the store apply it again (what is
    recreated is empty: the rows the table held are not restored).

    >>> made = [Migration(3, "saved vectors", ("CREATE TABLE vectors (x)",))]
    >>> print(missing_error("db.sqlite", {3: ["vectors"]}, made, "migrations"))
    db.sqlite records schema migration(s) [3] in migrations, but what they created is missing: vectors. ...
    """
    gone = {version: names for version, names in missing.items() if names}
    if not gone:
        return None
    created = {m.version: len(created_objects(m)) for m in migrations}
    shown = ", ".join(name for version in sorted(gone) for name in gone[version])
    rerun = "" if any(len(gone[v]) != created.get(v) for v in gone) else (
        "; or, to recreate what is missing empty (the rows it held are not restored), delete the record so that "
        "opening the store will apply them again: "
        f"DELETE FROM {record} WHERE version IN ({', '.join(str(v) for v in sorted(gone))}), then open it")
    return SchemaVersionError(
        f"{where} records schema migration(s) {sorted(gone)} in {record}, but what they created is missing: "
        f"{shown}. It was dropped (or never restored) outside context-gatekeeper, and every call using it would "
        f"fail; nothing was written. Restore the database, or what is missing, from a backup{rerun}"
    )


def changes_text(revision: Revision) -> str:
    """The changes as JSON text; ASCII-escaped if they hold text UTF-8 cannot encode
    (lone surrogates), which JSON still round-trips exactly."""
    try:
        text = revision.changes_json()
    except (TypeError, ValueError, RecursionError) as exc:  # a removed message or a before built by hand
        raise InvalidInputError(
            f"this {revision.kind} cannot be stored: a message in it holds metadata or parts JSON cannot keep "
            f"({type(exc).__name__}: {exc}); nothing was written. Build changes from the messages the store handed out"
        ) from None
    if text.isascii():  # a scan without a copy; only text beyond ASCII can hold a lone surrogate
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps([change_to_dict(c) for c in revision.changes], separators=(",", ":"))
    return text


# What json.loads runs under its wrappers (typeshed leaves the attribute out)
_scan: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")


def _decoded(text: Any) -> Any:
    """``json.loads(text)``: the value of a stored JSON text, read by the decoder's scanner
    directly when ``text`` is a str that holds exactly one value from its first character
    (what the stores write); anything else (whitespace around it, a second value, an error,
    not a str) goes through ``json.loads``, so its errors are JSON's own."""
    if type(text) is str:
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError):
            return json.loads(text)  # raises the error json.loads gives
        if end == len(text):
            return value
    return json.loads(text)


def revision_from_row(row: Sequence[Any], session_id: str = "?") -> Revision:
    """A revision from ``(number, parent, kind, instruction, model, created_at, base, target, changes)``;
    :class:`CorruptLogError` naming the session and revision when the row cannot be read."""
    return revision_from_fields(session_id, *row)


def revision_from_fields(
    session_id: str,
    number: Any,
    parent: Any,
    kind: Any,
    instruction: Any,
    model: Any,
    created_at: Any,
    base: Any,
    target: Any,
    changes: Any,
) -> Revision:
    """:func:`revision_from_row` of a row's fields given one by one (what :func:`.chain.verified`
    has unpacked already, so no row is sliced per revision)."""
    try:  # Revision.from_dict without the dict: every revision of every session opened comes through here
        legacy_end = kind == "append"
        return revision_of(
            number,
            parent,
            kind,
            tuple([change_from_dict(c, legacy_end=legacy_end) for c in _decoded(changes)]),
            instruction,
            model,
            created_at,
            base,
            target,
        )
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
        # OverflowError: a revision of 1e400; RecursionError: JSON nested past the recursion limit
        raise CorruptLogError(session_id, number, f"unreadable row: {type(exc).__name__}: {exc}") from exc
